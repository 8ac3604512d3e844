"""The blocking API: the trio entry points, each run on a trio loop in a dedicated thread.

``open_runtime`` keeps one trio thread for its block (the runtime lives there; every call of
its ``Runtime`` and ``Session`` is one job on it); ``run_batch``, ``score_results`` and
``run_workflow`` start one for the call. Results and exceptions are those of the trio API.
"""

from __future__ import annotations

import os
from collections import deque
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterator, Sequence

import trio

from .. import batch as _batch, session as _session, workflow as _workflow
from .._embedding import Host, RuntimeHandle, SessionHandle, compare_runs as compare_runs
from ..approvals import AuditLog
from ..batch import BatchOptions, BatchSummary
from ..gateway import DEFAULT_GATEWAY, GatewayOptions
from ..protocol import QueryResult
from ..runtime import RuntimeSpec
from ..session import CommandResult, PromptInput, TurnResult
from ..transport import DEFAULT_CAPACITY, Notification, Subscription
from ..workflow import Workflow, WorkflowOptions, WorkflowResult
from ._loop import TrioThread, check_not_in_trio


class Events:
    """A session's notifications as a plain iterator (``for n in session.events():``).

    Use it as a context manager (or call ``close()``) to unsubscribe. Notifications are
    fetched from the trio thread a batch at a time (all those buffered), one hop per batch.
    Iteration ends when the runtime closes the stream; ``TransportClosedError`` and
    ``SubscriberOverflowError`` are raised as by the trio channel.
    """

    def __init__(self, loop: TrioThread, subscription: Subscription) -> None:
        self._loop = loop
        self._subscription = subscription
        self._ready: deque[Notification] = deque()

    def __iter__(self) -> Events:
        return self

    def __next__(self) -> Notification:
        if not self._ready:
            try:
                self._ready.extend(self._loop.call(self._subscription.receive_batch))
            except (trio.EndOfChannel, trio.ClosedResourceError):
                raise StopIteration from None
        return self._ready.popleft()

    def close(self) -> None:
        """Unsubscribe (idempotent)."""
        if self._loop.alive:
            self._loop.run_sync(self._subscription.close)

    def __enter__(self) -> Events:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Session(SessionHandle[TrioThread]):
    """A session of a blocking ``Runtime``: the trio ``Session``'s calls, blocking."""

    api = "sync"

    def run(self, input: PromptInput, *, capacity: int = DEFAULT_CAPACITY) -> TurnResult:
        """Send one prompt and block until the session tree settled; see ``Session.run``."""
        return self._host.call(partial(self.trio_session.run, input, capacity=capacity))

    def prompt(self, input: PromptInput) -> str:
        """Queue ``input`` (session/prompt) and return the queued message id."""
        return self._host.call(self.trio_session.prompt, input)

    def wait(self) -> None:
        """session/wait: block until the root is idle and its descendants settled."""
        self._host.call(self.trio_session.wait)

    def query(self, input: PromptInput) -> QueryResult:
        """session/query (MethodNotSupportedError on the 0.2.1-rc.2 runtime)."""
        return self._host.call(self.trio_session.query, input)

    def run_query(self, input: PromptInput) -> TurnResult | CommandResult:
        """session/query, then settle; see ``Session.run_query``."""
        return self._host.call(self.trio_session.run_query, input)

    def get_working_directory(self) -> str:
        """The session's effective working directory."""
        return self._host.call(self.trio_session.get_working_directory)

    def set_working_directory(self, path: str) -> str:
        """Change the effective working directory; returns it (absolute)."""
        return self._host.call(self.trio_session.set_working_directory, path)

    def events(self, *, capacity: int = DEFAULT_CAPACITY) -> Events:
        """This session tree's notifications as a plain iterator (``with`` it to unsubscribe)."""
        subscription = self._host.run_sync(partial(self.trio_session.events, capacity=capacity))
        return Events(self._host, subscription)


class Runtime(RuntimeHandle[TrioThread, Session]):
    """A runtime of the blocking API (from ``dsh_orchestra.sync.open_runtime``)."""

    api = "sync"
    session_type = Session

    def resume(self, id: str) -> Session:
        """Restore persisted session ``id`` (session/resume) and return its handle."""
        return Session(self._host, self._host.call(self.trio_runtime.resume, id))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``await fn(*args)`` on the runtime's trio thread and return its value: the way
        to use the trio API (``trio_runtime``, ``runtime.turns()``) from blocking code."""
        return self._host.call(fn, *args)


@contextmanager
def open_runtime(
    spec: RuntimeSpec | None = None,
    *,
    approvals: Any = None,
    answerer: Any = None,
    audit: AuditLog | str | os.PathLike[str] | None = None,
    approval_relay: str | None = None,
    gateway: GatewayOptions | None = DEFAULT_GATEWAY,
) -> Iterator[Runtime]:
    """Start a runtime on a trio loop in a dedicated thread; yield a blocking ``Runtime``;
    close it (the whole ladder) when the block ends, also on KeyboardInterrupt.

    Arguments as for ``dsh_orchestra.open_runtime`` (no spec: the simulator). Policies and
    answerers may be plain functions or trio async functions; they run in the trio thread.

    Raises:
        RuntimeStartError: the runtime did not start (bare).
        RuntimeError: called from inside trio (use the trio API there).
    """
    check_not_in_trio("dsh_orchestra.sync.open_runtime")
    loop = TrioThread()
    try:
        opened = partial(_session.open_runtime, spec, approvals=approvals, answerer=answerer, audit=audit,
                         approval_relay=approval_relay, gateway=gateway)
        host = Host(opened, partial(_nursery, loop))
        runtime = loop.call(host.start)
        try:
            yield Runtime(loop, runtime)
        finally:
            loop.call(host.stop)
    finally:
        loop.close()


def _nursery(loop: TrioThread) -> trio.Nursery:
    nursery = loop._nursery
    assert nursery is not None
    return nursery


def _once(api: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``await fn(*args, **kwargs)`` on a trio loop in a thread of its own."""
    check_not_in_trio(api)
    loop = TrioThread()
    try:
        return loop.call(partial(fn, *args, **kwargs))
    finally:
        loop.close()


def run_batch(
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    spec: RuntimeSpec | None = None,
    options: BatchOptions | None = None,
    **kwargs: Any,
) -> BatchSummary:
    """``dsh_orchestra.run_batch``, blocking (its own trio thread); same arguments and result.
    A KeyboardInterrupt stops the batch (no process is left; the results so far are kept)."""
    return _once("dsh_orchestra.sync.run_batch", _batch.run_batch, dataset, out, spec, options, **kwargs)  # type: ignore[no-any-return]


def score_results(
    results: str | os.PathLike[str],
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    score: Sequence[Any] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """``dsh_orchestra.batch.score_results``, blocking: re-score ``results`` into ``out`` and
    return the summary."""
    return _once("dsh_orchestra.sync.score_results", _batch.score_results, results, dataset, out, score, **kwargs)  # type: ignore[no-any-return]


def run_workflow(
    workflow: Workflow,
    target: Runtime | WorkflowOptions | None = None,
    options: WorkflowOptions | None = None,
    **keywords: Any,
) -> WorkflowResult:
    """``dsh_orchestra.run_workflow``, blocking; same arguments and result:
    ``run_workflow(workflow, WorkflowOptions(...))`` (runtimes opened and closed by the call, on
    a trio thread of its own) or ``run_workflow(workflow, runtime, WorkflowOptions(...))`` with a
    blocking ``Runtime`` (the workflow runs on its trio thread).

    Raises:
        TypeError: ``target`` is a trio Runtime or RuntimePool (not drivable from blocking code).
    """
    if isinstance(target, Runtime):
        return target.call(partial(_workflow.run_workflow, workflow, target.trio_runtime, options, **keywords))  # type: ignore[no-any-return]
    if target is not None and not isinstance(target, WorkflowOptions):
        raise TypeError(f"run_workflow's target must be a dsh_orchestra.sync.Runtime or WorkflowOptions, not {type(target).__name__}: "
                        "a trio Runtime or RuntimePool cannot be driven from blocking code")
    return _once("dsh_orchestra.sync.run_workflow", _workflow.run_workflow, workflow, target, options, **keywords)  # type: ignore[no-any-return]

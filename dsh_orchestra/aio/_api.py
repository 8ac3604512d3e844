"""The asyncio API: the trio entry points awaited from asyncio, trio running as a guest.

Every call is one task of the loop's trio guest run (``_guest``); a runtime opened by
``open_runtime`` lives in a guest task for the block. Results are those of the trio API.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

import attrs
import trio

from .. import batch as _batch, session as _session, workflow as _workflow
from .._embedding import Host, RuntimeHandle, SessionHandle, compare_runs as compare_runs
from ..approvals import ApprovalService, AuditLog
from ..batch import BatchOptions, BatchSummary
from ..gateway import DEFAULT_GATEWAY, GatewayOptions
from ..protocol import QueryResult
from ..runtime import RuntimeSpec
from ..session import CommandResult, PromptInput, TurnResult
from ..transport import DEFAULT_CAPACITY, Notification, Subscription
from ..workflow import Workflow, WorkflowOptions, WorkflowResult
from ._guest import Guest, TrioObjectError, acquire, asyncio_callable, call, on_asyncio, release


class Events:
    """A session's notifications as an asyncio async iterator (``async for n in session.events()``).

    A trio task of the guest moves what the subscription buffers here (a batch at a time, at
    most ``capacity`` ahead of the reader); the iterator hands them out without a trip to trio
    per event. Use it as a (plain or async) context manager, or call ``close()``, to
    unsubscribe. Iteration ends when the subscription is closed; ``TransportClosedError`` and
    ``SubscriberOverflowError`` are raised as by the trio channel.
    """

    def __init__(self, guest: Guest, subscription: Subscription) -> None:
        self._guest = guest
        self._subscription = subscription
        self._ready: deque[Notification] = deque()
        self._error: BaseException | None = None
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None
        self._room = trio.Event()  # set when the consumer took some: the pump may go on
        self._scope = trio.CancelScope()
        guest.spawn(self._pump)

    async def _pump(self) -> None:
        capacity = self._subscription.capacity
        with self._scope:
            try:
                while True:
                    if len(self._ready) >= capacity:
                        self._room = trio.Event()
                        await self._room.wait()
                        continue
                    batch = await self._subscription.receive_batch(capacity - len(self._ready))
                    self._ready.extend(batch)
                    self._wake()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                self._ended = True
            except trio.Cancelled:
                self._ended = True
                raise
            except Exception as exc:  # raised by the iterator once the buffer drained
                self._error = exc
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> Events:
        return self

    async def __anext__(self) -> Notification:
        while not self._ready:
            if self._error is not None:
                raise self._error
            if self._ended:
                raise StopAsyncIteration
            self._waiter = self._guest.loop.create_future()
            await self._waiter
        item = self._ready.popleft()
        if not self._room.is_set():
            self._guest.soon(self._room.set)
        return item

    def close(self) -> None:
        """Unsubscribe and stop the pump (idempotent)."""
        self._ready.clear()
        self._ended = True
        if not self._guest.stopping:
            self._guest.soon(self._subscription.close)
            self._guest.soon(self._scope.cancel)

    def __enter__(self) -> Events:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Events:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class Session(SessionHandle[Guest]):
    """A session of an asyncio ``Runtime``: the trio ``Session``'s calls, awaitable from asyncio."""

    api = "aio"

    async def run(self, input: PromptInput, *, capacity: int = DEFAULT_CAPACITY) -> TurnResult:
        """Send one prompt and wait until the session tree settled; see ``Session.run``.
        Cancelling the awaiting task cancels the run (the session is abandoned)."""
        return await call(self._host, partial(self.trio_session.run, input, capacity=capacity))

    async def prompt(self, input: PromptInput) -> str:
        """Queue ``input`` (session/prompt) and return the queued message id."""
        return await call(self._host, self.trio_session.prompt, input)

    async def wait(self) -> None:
        """session/wait: until the root is idle and its descendants settled."""
        await call(self._host, self.trio_session.wait)

    async def query(self, input: PromptInput) -> QueryResult:
        """session/query (MethodNotSupportedError on the 0.2.1-rc.2 runtime)."""
        return await call(self._host, self.trio_session.query, input)

    async def run_query(self, input: PromptInput) -> TurnResult | CommandResult:
        """session/query, then settle; see ``Session.run_query``."""
        return await call(self._host, self.trio_session.run_query, input)

    async def get_working_directory(self) -> str:
        """The session's effective working directory."""
        return await call(self._host, self.trio_session.get_working_directory)

    async def set_working_directory(self, path: str) -> str:
        """Change the effective working directory; returns it (absolute)."""
        return await call(self._host, self.trio_session.set_working_directory, path)

    def events(self, *, capacity: int = DEFAULT_CAPACITY) -> Events:
        """This session tree's notifications as an async iterator (``with`` it to unsubscribe)."""
        return Events(self._host, self.trio_session.events(capacity=capacity))


class Runtime(RuntimeHandle[Guest, Session]):
    """A runtime of the asyncio API (from ``dsh_orchestra.aio.open_runtime``)."""

    api = "aio"
    session_type = Session

    async def resume(self, id: str) -> Session:
        """Restore persisted session ``id`` (session/resume) and return its handle."""
        return Session(self._host, await call(self._host, self.trio_runtime.resume, id))

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """``await fn(*args)`` on the trio side and return its value: the way to use the trio
        API (``trio_runtime``, ``runtime.turns()``) from asyncio code."""
        return await call(self._host, fn, *args)


def _bridged(value: Any, guest: Guest, what: str) -> Any:
    """A policy or answerer for the trio side: asyncio coroutine functions run on the loop."""
    if isinstance(value, ApprovalService) and asyncio_callable(value.policy):
        raise TrioObjectError(f"an ApprovalService's async policy would run as trio code; under dsh_orchestra.aio pass the "
                              f"{what} itself (give it a `deadline` attribute for its deadline)")
    return on_asyncio(value, guest, what) if asyncio_callable(value) else value


@asynccontextmanager
async def open_runtime(
    spec: RuntimeSpec | None = None,
    *,
    approvals: Any = None,
    answerer: Any = None,
    audit: AuditLog | str | os.PathLike[str] | None = None,
    approval_relay: str | None = None,
    gateway: GatewayOptions | None = DEFAULT_GATEWAY,
) -> AsyncIterator[Runtime]:
    """Start a runtime in the loop's trio guest run; yield an asyncio ``Runtime``; close it
    (the whole ladder) when the block ends, also when the task is cancelled.

    Arguments as for ``dsh_orchestra.open_runtime`` (no spec: the simulator). A policy or
    answerer may be a plain function (run inline on the trio side) or an asyncio coroutine
    function (run on the asyncio loop; the policy's deadline still applies).

    Raises:
        RuntimeStartError: the runtime did not start (bare).
        TrioObjectError: a trio-only object was given where asyncio code runs.
    """
    guest = await acquire("dsh_orchestra.aio.open_runtime")
    try:
        opened = partial(
            _session.open_runtime, spec, approvals=_bridged(approvals, guest, "policy"),
            answerer=_bridged(answerer, guest, "answerer"), audit=audit, approval_relay=approval_relay,
            gateway=gateway,
        )
        host = Host(opened, partial(_nursery, guest))
        runtime = await call(guest, host.start)
        try:
            yield Runtime(guest, runtime)
        finally:
            await call(guest, partial(host.stop, shield=True))  # the close ladder runs to its end
    finally:
        await release(guest)


def _nursery(guest: Guest) -> trio.Nursery:
    assert guest.nursery is not None
    return guest.nursery


async def _once(api: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
    guest = await acquire(api)
    try:
        return await call(guest, partial(fn, *args, **kwargs))
    finally:
        await release(guest)


def _options(options: BatchOptions | None, kwargs: dict[str, Any], guest: Guest) -> BatchOptions:
    chosen = options or BatchOptions(**kwargs)
    policy, answerer = chosen.policy, chosen.answerer
    bridged_policy, bridged_answerer = _bridged(policy, guest, "policy"), _bridged(answerer, guest, "answerer")
    if bridged_policy is policy and bridged_answerer is answerer:
        return chosen
    return attrs.evolve(chosen, policy=bridged_policy, answerer=bridged_answerer)


async def run_batch(
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    spec: RuntimeSpec | None = None,
    options: BatchOptions | None = None,
    **kwargs: Any,
) -> BatchSummary:
    """``dsh_orchestra.run_batch`` awaited from asyncio; same arguments and result. Cancelling
    the task stops the batch (no process is left; the results so far are kept)."""
    guest = await acquire("dsh_orchestra.aio.run_batch")
    try:
        chosen = _options(options, kwargs, guest)
        return await call(guest, partial(_batch.run_batch, dataset, out, spec, chosen))
    finally:
        await release(guest)


async def score_results(
    results: str | os.PathLike[str],
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    score: Sequence[Any] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """``dsh_orchestra.batch.score_results`` awaited from asyncio: re-score ``results`` into
    ``out`` and return the summary."""
    return await _once("dsh_orchestra.aio.score_results", _batch.score_results, results, dataset, out, score, **kwargs)  # type: ignore[no-any-return]


async def run_workflow(
    workflow: Workflow,
    target: Runtime | WorkflowOptions | None = None,
    options: WorkflowOptions | None = None,
    **keywords: Any,
) -> WorkflowResult:
    """``dsh_orchestra.run_workflow`` awaited from asyncio; same arguments and result:
    ``await aio.run_workflow(workflow, WorkflowOptions(...))`` (runtimes opened and closed by
    the call) or ``await aio.run_workflow(workflow, runtime, WorkflowOptions(...))`` with an
    asyncio ``Runtime``. The workflow's Python steps are trio code (they run on the trio side);
    the options' ``approvals``/``answerer`` may be asyncio coroutine functions.

    Raises:
        TrioObjectError: ``target`` is a trio Runtime or RuntimePool.
    """
    if target is not None and not isinstance(target, (Runtime, WorkflowOptions)):
        raise TrioObjectError(f"run_workflow's target must be a dsh_orchestra.aio.Runtime or WorkflowOptions, not {type(target).__name__}: "
                              "a trio Runtime or RuntimePool cannot be driven from asyncio; open it with aio.open_runtime")
    guest = await acquire("dsh_orchestra.aio.run_workflow")
    try:
        if isinstance(target, WorkflowOptions):
            target, options = None, target if options is None else options
        if options is not None:
            options = attrs.evolve(options, approvals=_bridged(options.approvals, guest, "policy"),
                                   answerer=_bridged(options.answerer, guest, "answerer"))
        for key, what in (("approvals", "policy"), ("answerer", "answerer")):
            if key in keywords:
                keywords[key] = _bridged(keywords[key], guest, what)
        where = target.trio_runtime if isinstance(target, Runtime) else None
        return await call(guest, partial(_workflow.run_workflow, workflow, where, options, **keywords))
    finally:
        await release(guest)

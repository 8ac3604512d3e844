"""PoolExecutor: the default executor, item attempts on a local ``RuntimePool``.

``attempt_on_pool`` is one attempt on a pool (a place on the least-loaded runtime, the
session under the timeout, the transcript written before it returns); the Ray actors run the
very same function on their own pools (``dsh_orchestra.scale``).
"""

from __future__ import annotations

import math
import socket
import uuid
import weakref
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, ClassVar, Coroutine

import attrs
import trio

from ..pool import Lease, RuntimePool, SessionBusyError, open_places, retryable
from ..protocol import OrchestraError, RuntimeExitedError, SessionExistsError, SessionOwnedError, TransportClosedError
from ..runtime import RuntimeSpec
from ..session import Runtime, Session, TurnResult
from ._dataset import BatchItem
from ._executor import Attempt, RuntimeCrash
from ._options import BatchOptions
from ._transcripts import TranscriptWriter


async def _run_session(runtime: Runtime, item: BatchItem, session_id: str, workspace: str | None = None) -> TurnResult:
    """Run the item's prompt in ``session_id`` (in ``workspace``, when given: the session's
    working directory is set there before the prompt).

    A generated id is always new. An item's own ``session_id`` may already be persisted (by an
    earlier attempt, or by a run that was killed): then it is resumed first (PROTOCOL.md 5.4).
    """
    if item.session_id is None:
        return await _prompt(runtime.session(session_id), item, workspace)
    try:
        return await _prompt(runtime.session(session_id), item, workspace)
    except SessionExistsError:
        pass  # persisted by an earlier attempt or run: resume it
    try:
        session = await runtime.resume(session_id)
    except SessionOwnedError as exc:  # a runtime being recycled holds it
        raise SessionBusyError(f"session {session_id!r} is still held by another runtime: {exc.message}") from exc
    return await _prompt(session, item, workspace)


async def _prompt(session: Session, item: BatchItem, workspace: str | None) -> TurnResult:
    if workspace is not None:
        await session.set_working_directory(workspace)
    return await session.run(item.prompt)


_INCARNATIONS: weakref.WeakKeyDictionary[Runtime, str] = weakref.WeakKeyDictionary()


def incarnation(runtime: Runtime) -> str:
    """An identifier of this runtime incarnation, unique across restarts, hosts and runs:
    ``<name>@<host>:<pid>/<random>``."""
    found = _INCARNATIONS.get(runtime)
    if found is None:
        found = _INCARNATIONS[runtime] = f"{runtime.name}@{socket.gethostname()}:{runtime.actor.pid}/{uuid.uuid4().hex[:8]}"
    return found


def crash_of(runtime: Runtime) -> RuntimeCrash | None:
    """How ``runtime`` died on its own (its process exited or its stream ended, not closed by
    us), or None while it lives or when it was closed."""
    connection = runtime.actor.connection
    error = connection.closed_error if connection is not None else None
    if not isinstance(error, RuntimeExitedError):
        return None
    return RuntimeCrash(runtime=incarnation(runtime), exit_status=error.returncode, stderr_tail=error.stderr_tail)


async def death_under(runtime: Runtime, error: BaseException) -> RuntimeCrash | None:
    """How ``runtime`` died under an attempt that failed with ``error`` (None: it did not).

    A write to a runtime that has just died fails at once ("cannot write"), before its
    connection closed with the exit status (the reader sees the end of the output, then the
    actor reaps the process): that death is waited for, at most as long as the actor takes to
    learn of it (its ``exit_wait``, and a second for the end of the output and stderr).
    """
    connection = runtime.actor.connection
    if isinstance(error, TransportClosedError) and connection is not None and not connection.closed:
        with trio.move_on_after(runtime.actor.spec.exit_wait + 1.0):
            await connection.wait_closed()
    return crash_of(runtime)


async def attempt_on_pool(
    pool: RuntimePool,
    item: BatchItem,
    session_id: str,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - covers the session only (not the wait for a place); a result
    transcripts: TranscriptWriter | None = None,
    workspace: str | None = None,
    alone: bool = False,
) -> Attempt:
    """One attempt at ``item`` on ``pool``: a place on the least-loaded runtime, then the
    session under ``timeout``; the item's transcript is written (to ``transcripts``) before
    this returns, so a result line always implies its transcript. ``workspace``: the
    session's working directory (an item's own copy of a workspace template). ``alone``: a
    runtime to itself (``RuntimePool.lease(alone=True)``). When the runtime died under the
    attempt, ``Attempt.crash`` says which incarnation and how.

    The timeout covers the session's work only, not the wait for a place (a runtime that is
    restarting delays items without burning their retries).
    """
    placed: Runtime | None = None
    try:
        async with pool.lease(alone=alone) as runtime:
            placed = runtime
            incarnation(runtime)  # named while it lives (its pid)
            try:
                # The common attempt (a fresh session, no workspace, no timeout) awaits the
                # run directly: every coroutine level in between is resumed at each wake-up.
                if timeout is None:
                    if item.session_id is None and workspace is None:
                        turn = await runtime.session(session_id).run(item.prompt)
                    else:
                        turn = await _run_session(runtime, item, session_id, workspace)
                else:
                    with trio.fail_after(timeout):
                        turn = await _run_session(runtime, item, session_id, workspace)
            finally:
                runtime.forget(session_id)  # the batch never uses this session again
    except trio.TooSlowError:
        assert timeout is not None
        return Attempt.failed(session_id, TimeoutError(f"item {item.id!r} did not finish within {timeout:g} s"),
                              retryable=True)
    except (OrchestraError, OSError) as exc:
        crash = await death_under(placed, exc) if placed is not None else None
        return Attempt.failed(session_id, exc, retryable=retryable(exc), crash=crash)
    if transcripts is not None:
        await transcripts.write(item.id, turn)
    return Attempt(session_id=session_id, turn=turn)


@attrs.define
class PoolRunner:
    """An open ``PoolExecutor``: attempts on its pool."""

    pool: RuntimePool
    capacity: int
    timeout: float | None = None
    transcripts: TranscriptWriter | None = None
    max_lost: int = 1  # a local place is never "lost": a dead runtime is a retryable failure

    def attempt(self, item: BatchItem, session_id: str, *, workspace: str | None = None,
                alone: bool = False) -> Coroutine[Any, Any, Attempt]:
        """Run ``item`` once in session ``session_id`` on the pool (see ``attempt_on_pool``)."""
        # attempt_on_pool's own coroutine (no level of this method's, resumed at every wake-up)
        return attempt_on_pool(self.pool, item, session_id, timeout=self.timeout, transcripts=self.transcripts,
                               workspace=workspace, alone=alone)

    def pending_approvals(self) -> int:
        """Approval requests waiting for a decision on the pool's runtimes right now."""
        return sum(r.approvals.pending for r in self.pool.runtimes if r.approvals is not None)

    @property
    def lease(self) -> Lease:
        """The pool's ``lease``: judges' sessions run on the batch's own runtimes."""
        return self.pool.lease

    @property
    def server_version(self) -> str | None:
        """The runtimes' ``serverInfo.version`` (the first that greeted with one)."""
        for runtime in self.pool.runtimes:
            info = getattr(runtime.actor, "server_info", None)
            server = getattr(info, "server_info", None)
            if server is not None and server.version is not None:
                return str(server.version)
        return None


@attrs.frozen(kw_only=True)
class PoolExecutor:
    """Run the items on a local pool of ``runtimes`` runtime processes (default: ``options.runtimes``),
    ``concurrency`` items in flight (default ``options.in_flight``: 4 per runtime).

    With no spec the simulator runs (as processes, in a temporary DSH_HOME removed afterwards).
    Runtimes are recycled after ``options.max_sessions_per_runtime`` sessions or past
    ``options.max_runtime_rss_mib`` (``RuntimePool``).
    The audit log (``options.audit``) and transcripts (``options.transcripts``) are written here.
    """

    in_process: ClassVar[bool] = True  # its runtimes are this process's children (``executor_in_process``)
    runtimes: int | None = None
    concurrency: int | None = None

    @asynccontextmanager
    async def open(self, spec: RuntimeSpec | None, options: BatchOptions) -> AsyncIterator[PoolRunner]:
        """Open the pool of runtimes (``runtimes``, else the options'); yield its runner; close it on exit."""
        runtimes = self.runtimes or options.runtimes
        in_flight = self.concurrency or options.concurrency or runtimes * 4
        transcripts = TranscriptWriter(options.transcripts) if options.transcripts is not None else None
        async with open_places(
            spec, runtimes, scratch="batch", approvals=options.policy, answerer=options.answerer, audit=options.audit,
            max_sessions=max(1, math.ceil(in_flight / runtimes)),
            max_sessions_per_runtime=options.max_sessions_per_runtime, max_runtime_rss_mib=options.max_runtime_rss_mib,
            gateway=options.gateway,
        ) as places:
            assert places.pool is not None
            yield PoolRunner(places.pool, in_flight, options.timeout, transcripts)


def default_executor() -> PoolExecutor:
    """The executor ``run_batch`` uses when given none: a local pool sized by the options."""
    return PoolExecutor()

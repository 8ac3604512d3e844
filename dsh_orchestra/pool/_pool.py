"""RuntimePool: N runtimes under one nursery, least-loaded placement, supervision, recycling.

Owns: one supervisor task per slot (start, watch, restart with backoff), placement with a
per-runtime limit of sessions in flight, recycling a runtime that holds abandoned turns once
it is idle, graceful close. Must not know about graphs or datasets.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncContextManager, AsyncIterator, Callable

import attrs
import trio

from ..approvals import AuditLog
from ..protocol import OrchestraError, TransportClosedError
from ..runtime import RuntimeSpec
from ..session import PromptInput, Runtime, TurnResult, open_runtime
from ._retry import Backoff, PoolClosedError
from ._supervisor import Ended, Supervisor, serving

log = logging.getLogger("dsh_orchestra.pool")

SpecFactory = Callable[[int], RuntimeSpec]


@attrs.frozen
class PoolStatistics:
    """A snapshot of the pool."""

    size: int
    live: int
    in_flight: int
    restarts: int
    recycled: int
    starting: int


class _Slot:
    """One runtime position in the pool; its supervisor restarts the runtime as needed."""

    def __init__(self, index: int, supervisor: Supervisor) -> None:
        self.index = index
        self.runtime: Runtime | None = None
        self.in_flight = 0
        self.alone = False  # its one session in flight holds it alone (an exclusive lease)
        self.reserved = 0  # exclusive leases waiting for it to drain: it takes no new sessions
        self.retire = trio.Event()
        self.supervisor = supervisor  # starts, failed starts in a row, restarts

    @property
    def failures(self) -> int:
        return self.supervisor.failures

    @property
    def ready_once(self) -> bool:
        return self.supervisor.ready_once

    @property
    def usable(self) -> bool:
        runtime = self.runtime  # a runtime holding abandoned turns takes no new work: it drains
        return runtime is not None and runtime.alive and not runtime.abandoned and not self.retire.is_set()


def _same_spec(spec: RuntimeSpec) -> SpecFactory:
    def spec_for(index: int) -> RuntimeSpec:
        return spec.evolve(name=f"{spec.display_name}#{index}")

    return spec_for


class RuntimePool:
    """Many runtimes, one nursery. Start with ``await nursery.start(pool.run)`` or ``open_pool``.

    Sessions are placed on the live runtime with the fewest sessions in flight, never more than
    ``max_sessions`` each. A runtime that dies is restarted with exponential backoff
    (``backoff``: a ``Backoff``, or (first delay, cap) in seconds, exact; default
    ``Backoff(0.5, 15.0)``, jittered); its in-flight sessions fail with
    TransportClosedError (retryable). A runtime holding abandoned turns takes no new sessions
    and is recycled (closed and started afresh, without backoff) once none of its sessions is
    in flight. When every slot has failed ``max_start_failures`` starts in a row, the pool
    gives up: ``run`` raises the last start error. ``lease(alone=True)`` holds a runtime with
    no other session on it.
    """

    def __init__(
        self,
        spec: RuntimeSpec | SpecFactory,
        size: int = 2,
        *,
        max_sessions: int = 8,
        approvals: Any = None,
        answerer: Any = None,
        audit: AuditLog | None = None,
        backoff: Backoff | tuple[float, float] | None = None,
        max_start_failures: int = 5,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"pool size must be an integer >= 1, not {size!r}")
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an integer >= 1, not {max_sessions!r}")
        if isinstance(max_start_failures, bool) or not isinstance(max_start_failures, int) or max_start_failures < 1:
            raise ValueError(f"max_start_failures must be an integer >= 1, not {max_start_failures!r}")
        chosen = Backoff(0.5, 15.0) if backoff is None else Backoff.of(backoff, jitter=0.0)
        self._spec_for: SpecFactory = _same_spec(spec) if isinstance(spec, RuntimeSpec) else spec
        self.size = size
        self.max_sessions = max_sessions
        self.approvals = approvals
        self.answerer = answerer
        self.audit = audit
        self.backoff = (chosen.first, chosen.cap)
        self.max_start_failures = max_start_failures
        self._close_event = trio.Event()
        self._slots = [_Slot(i, Supervisor(chosen, self._close_event, on_change=self._notify)) for i in range(size)]
        # Made only when a task waits (most releases have no waiter): ``_changed`` for slot and
        # closing changes (the watcher, wait_live), ``_freed`` for those and freed places too.
        self._changed: trio.Event | None = None
        self._freed: trio.Event | None = None
        self._closing = False
        self._running = False
        self._stopped = trio.Event()
        self._recycled = 0
        self._last_error: OrchestraError | None = None

    # ---- service ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[RuntimePool] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise every slot until ``aclose()``; started() once one runtime is ready.

        Raises:
            OrchestraError: no runtime could be started at all (the first start error, e.g.
                RuntimeStartError), or later every slot failed ``max_start_failures`` starts
                in a row (the last one). Raised bare, after every runtime was closed.
        """
        if self._running:
            raise RuntimeError("RuntimePool.run() was already started")
        self._running = True
        failure: OrchestraError | None = None
        try:
            async with trio.open_nursery() as nursery:
                for slot in self._slots:
                    nursery.start_soon(self._supervise, slot)
                failure = await self._watch(task_status)
                if failure is not None:
                    self._begin_close()
                    nursery.cancel_scope.cancel(reason="the runtime pool gave up")
        finally:
            self._closing = True
            self._stopped.set()
            self._notify()
        if failure is not None:
            raise failure

    async def _watch(self, task_status: trio.TaskStatus[RuntimePool]) -> OrchestraError | None:
        """started() once a runtime is usable; then until closing, watch for a pool that cannot start."""
        started = False
        while not self._closing:
            if not started and any(s.usable for s in self._slots):
                started = True
                task_status.started(self)
            if self._last_error is not None and not any(s.usable for s in self._slots):
                limit = self.max_start_failures if started else 1
                if all(s.failures >= (limit if s.ready_once else 1) for s in self._slots):
                    return self._last_error
            await self._wait_changed()
        if not started:
            return PoolClosedError("the runtime pool was closed before any runtime started")
        return None

    async def _supervise(self, slot: _Slot) -> None:
        await slot.supervisor.run(lambda: self._run_slot(slot))

    async def _run_slot(self, slot: _Slot) -> Ended:
        """Start the slot's runtime and serve until it is retired or dies."""
        slot.retire = trio.Event()  # before starting, so aclose() can always reach it
        crashed = True
        try:
            async with open_runtime(
                self._spec_for(slot.index), approvals=self.approvals, answerer=self.answerer, audit=self.audit
            ) as runtime:
                slot.runtime = runtime
                slot.supervisor.ready()
                self._notify()
                async with trio.open_nursery() as watch:
                    watch.start_soon(_set_when_closed, runtime, slot.retire)
                    await slot.retire.wait()
                    watch.cancel_scope.cancel()
                crashed = not runtime.alive
                if not crashed and not self._closing:
                    self._recycled += 1
                    log.info("recycling runtime %r (abandoned turns: %d)", runtime.name, len(runtime.abandoned))
                # drain: nothing is in flight when retired for recycling or closing
        except OrchestraError as exc:
            log.warning("runtime slot %d failed to start: %s", slot.index, exc)
            self._last_error = exc
            return Ended.DONE if self._closing else Ended.FAILED
        finally:
            slot.runtime = None
            self._notify()
        if self._closing:
            return Ended.DONE
        return Ended.CRASHED if crashed else Ended.RECYCLED  # a crash backs off; a recycle restarts at once

    def _notify(self) -> None:
        """A slot changed or the pool is closing: wake every waiter."""
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        self._notify_places()

    def _notify_places(self) -> None:
        """A place was freed: wake the tasks waiting for one (not the watcher: it only
        cares about slots, and waking it at every release was a task step per item)."""
        freed, self._freed = self._freed, None
        if freed is not None:
            freed.set()

    async def _wait_changed(self) -> None:
        if self._changed is None:
            self._changed = trio.Event()
        await self._changed.wait()

    async def _wait_places(self) -> None:
        if self._freed is None:
            self._freed = trio.Event()
        await self._freed.wait()

    # ---- placement -------------------------------------------------------------------

    async def _acquire(self, pinned: Runtime | None = None, *, alone: bool = False) -> _Slot:
        while True:
            if self._closing:
                raise PoolClosedError("the runtime pool is closing")
            if pinned is not None and not any(s.runtime is pinned and s.usable for s in self._slots):
                raise TransportClosedError(f"runtime {pinned.name!r}, which holds this session, is gone or recycling")
            best: _Slot | None = None  # the fewest in flight; the lowest index among equals
            for slot in self._slots:
                if self._fits(slot, alone) and (best is None or slot.in_flight < best.in_flight) and (
                    pinned is None or slot.runtime is pinned
                ):
                    best = slot
            if best is not None:
                best.in_flight += 1
                best.alone = alone
                return best
            await self._wait_places()

    async def _acquire_alone(self, pinned: Runtime | None) -> _Slot:
        """A slot with no other session, kept so until released: meanwhile the emptiest runtime
        takes no new sessions, so that it drains."""
        waiting_on = min(self._slots, key=lambda s: (pinned is not None and s.runtime is not pinned, not s.usable,
                                                     s.in_flight))
        waiting_on.reserved += 1
        try:
            return await self._acquire(pinned, alone=True)
        finally:
            waiting_on.reserved -= 1
            self._notify()

    def _fits(self, slot: _Slot, alone: bool) -> bool:
        """Whether ``slot`` can take a session now (``alone``: one with the runtime to itself)."""
        if not slot.usable or slot.alone:
            return False
        return slot.in_flight == 0 if alone else slot.in_flight < self.max_sessions and not slot.reserved

    def _release(self, slot: _Slot, runtime: Runtime) -> None:
        slot.in_flight -= 1
        slot.alone = False
        if runtime.abandoned and slot.in_flight == 0 and slot.runtime is runtime:
            slot.retire.set()  # recycle: it may still be busy with abandoned turns
        self._notify_places()

    def lease(self, runtime: Runtime | None = None, *, alone: bool = False) -> AsyncContextManager[Runtime]:
        """Hold one place on the least-loaded runtime (or on ``runtime``) for the block.

        With ``alone`` the place is a whole runtime: it waits for one with no session in
        flight (keeping new sessions off the emptiest one meanwhile, so it drains), and no
        other session is placed there until the block ends.

        Raises:
            TransportClosedError: the pinned ``runtime`` is gone.
            PoolClosedError: the pool is closing.
        """
        return _Lease(self, runtime, alone)

    async def run_prompt(self, input: PromptInput, *, session_id: str | None = None, resume: bool = False) -> TurnResult:
        """Run one prompt in its own session on the least-loaded runtime.

        Raises:
            TransportClosedError: the runtime died mid-turn (retryable).
        """
        async with self.lease() as runtime:
            session = await runtime.resume(session_id) if resume and session_id else runtime.session(session_id)
            try:
                return await session.run(input)
            finally:
                if session_id is None:  # a session of its own, never used again: prune its state
                    runtime.forget(session.id)

    async def wait_live(self, count: int | None = None) -> None:
        """Wait until ``count`` runtimes (default: all of them) are live and taking sessions.

        Raises:
            PoolClosedError: the pool closed first.
        """
        wanted = self.size if count is None else count
        if not 1 <= wanted <= self.size:
            raise ValueError(f"count must be between 1 and the pool size {self.size}, not {count!r}")
        while sum(1 for s in self._slots if s.usable) < wanted:
            if self._closing:
                raise PoolClosedError("the runtime pool is closing")
            await self._wait_changed()
        await trio.lowlevel.checkpoint()

    def statistics(self) -> PoolStatistics:
        """Counts of live runtimes, sessions in flight, restarts and recycles."""
        return PoolStatistics(
            size=self.size,
            live=sum(1 for s in self._slots if s.usable),
            in_flight=sum(s.in_flight for s in self._slots),
            restarts=sum(s.supervisor.restarts for s in self._slots),
            recycled=self._recycled,
            starting=sum(1 for s in self._slots if s.runtime is None),
        )

    @property
    def runtimes(self) -> list[Runtime]:
        """The runtimes live right now."""
        return [s.runtime for s in self._slots if s.runtime is not None]

    # ---- closing ---------------------------------------------------------------------

    def _begin_close(self) -> None:
        self._closing = True
        self._close_event.set()
        self._notify()

    async def aclose(self, *, drain: bool = True) -> None:
        """Stop taking work and close every runtime; returns once every process was reaped.

        With ``drain`` it first waits for the sessions in flight; without it they fail with
        TransportClosedError as their runtimes close. Idempotent.
        """
        self._begin_close()
        if drain:
            while any(s.in_flight for s in self._slots) and not self._stopped.is_set():
                await self._wait_places()
        for slot in self._slots:
            slot.retire.set()
        if self._running:
            await self._stopped.wait()
        else:
            await trio.lowlevel.checkpoint()


class _Lease:
    """``RuntimePool.lease``: a plain async context manager (one per item in a batch; a
    generator-based one costs a generator, its frame and two extra steps)."""

    __slots__ = ("_pool", "_pinned", "_alone", "_slot", "_runtime")

    def __init__(self, pool: RuntimePool, pinned: Runtime | None, alone: bool) -> None:
        self._pool = pool
        self._pinned = pinned
        self._alone = alone
        self._slot: _Slot | None = None
        self._runtime: Runtime | None = None

    async def __aenter__(self) -> Runtime:
        if self._slot is not None:
            raise RuntimeError("a lease is entered once")
        pool = self._pool
        slot = await (pool._acquire_alone(self._pinned) if self._alone else pool._acquire(self._pinned))
        runtime = slot.runtime
        assert runtime is not None
        self._slot, self._runtime = slot, runtime
        return runtime

    async def __aexit__(self, *exc_info: object) -> None:
        slot, runtime = self._slot, self._runtime
        assert slot is not None and runtime is not None
        self._pool._release(slot, runtime)


async def _set_when_closed(runtime: Runtime, event: trio.Event) -> None:
    connection = runtime.actor.connection
    if connection is not None:
        await connection.wait_closed()
    event.set()


@asynccontextmanager
async def open_pool(spec: RuntimeSpec | SpecFactory, size: int = 2, **kwargs: Any) -> AsyncIterator[RuntimePool]:
    """Start a pool, yield it once one runtime is ready, close it on exit.

    On exit the pool stops taking work and closes every runtime (sessions still in flight,
    e.g. of tasks the block started, fail with TransportClosedError); every process is reaped
    before this returns.

    Raises:
        OrchestraError: no runtime could be started (raised bare, e.g. RuntimeStartError).
        ExceptionGroup: errors inside the block, or the pool giving up later (use except*).
    """
    pool = RuntimePool(spec, size, **kwargs)

    async def close() -> None:
        with trio.CancelScope(shield=True):
            await pool.aclose(drain=False)

    async with serving(pool.run, close):
        yield pool

"""RuntimePool: N runtimes under one nursery, least-loaded placement, supervision, recycling.

Owns: one supervisor task per slot (start, watch, restart with backoff), placement with a
per-runtime limit of sessions in flight, recycling a runtime that holds abandoned turns once
it is idle, graceful close. Must not know about graphs or datasets.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import attrs
import trio

from ..approvals import AuditLog
from ..protocol import OrchestraError, TransportClosedError
from ..runtime import RuntimeSpec
from ..session import PromptInput, Runtime, TurnResult, open_runtime

log = logging.getLogger("dsh_orchestra.pool")

SpecFactory = Callable[[int], RuntimeSpec]


class PoolClosedError(TransportClosedError):
    """The pool is closing (or closed) and takes no more work."""


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

    def __init__(self, index: int) -> None:
        self.index = index
        self.runtime: Runtime | None = None
        self.in_flight = 0
        self.retire = trio.Event()
        self.starts = 0
        self.failures = 0
        self.ready_once = False

    @property
    def usable(self) -> bool:
        runtime = self.runtime  # a runtime holding abandoned turns takes no new work: it drains
        return runtime is not None and runtime.alive and not runtime.abandoned and not self.retire.is_set()


class RuntimePool:
    """Many runtimes, one nursery. Start with ``await nursery.start(pool.run)`` or ``open_pool``.

    Sessions are placed on the live runtime with the fewest sessions in flight, never more than
    ``max_sessions`` each. A runtime that dies is restarted with exponential backoff; its
    in-flight sessions fail with TransportClosedError (retryable). A runtime holding abandoned
    turns is recycled once idle.
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
        backoff: tuple[float, float] = (0.5, 15.0),
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"pool size must be an integer >= 1, not {size!r}")
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an integer >= 1, not {max_sessions!r}")
        if isinstance(spec, RuntimeSpec):
            base = spec
            self._spec_for: SpecFactory = lambda i: base.evolve(name=f"{base.display_name}#{i}")
        else:
            self._spec_for = spec
        self.size = size
        self.max_sessions = max_sessions
        self.approvals = approvals
        self.answerer = answerer
        self.audit = audit
        self.backoff = backoff
        self._slots = [_Slot(i) for i in range(size)]
        self._changed = trio.Event()
        self._closing = False
        self._restarts = 0
        self._recycled = 0
        self._first_error: BaseException | None = None

    # ---- service ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[RuntimePool] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise every slot until ``aclose()``; started() once one runtime is ready.

        Raises:
            OrchestraError: no runtime could be started at all (the first start error).
        """
        async with trio.open_nursery() as nursery:
            for slot in self._slots:
                nursery.start_soon(self._supervise, slot)
            while not any(s.usable for s in self._slots):
                if self._first_error is not None and all(s.failures and not s.ready_once for s in self._slots):
                    self._closing = True
                    for slot in self._slots:
                        slot.retire.set()
                    raise self._first_error
                await self._wait_changed()
            task_status.started(self)

    async def _supervise(self, slot: _Slot) -> None:
        delay = self.backoff[0]
        while not self._closing:
            slot.starts += 1
            slot.retire = trio.Event()  # before starting, so aclose() can always reach it
            try:
                async with open_runtime(
                    self._spec_for(slot.index), approvals=self.approvals, answerer=self.answerer, audit=self.audit
                ) as runtime:
                    slot.runtime = runtime
                    slot.ready_once = True
                    delay = self.backoff[0]
                    self._notify()
                    async with trio.open_nursery() as watch:
                        watch.start_soon(_set_when_closed, runtime, slot.retire)
                        await slot.retire.wait()
                        watch.cancel_scope.cancel()
                    if runtime.alive and not self._closing:
                        self._recycled += 1
                        log.info("recycling runtime %r (abandoned turns: %d)", runtime.name, len(runtime.abandoned))
                    # drain: nothing is in flight when retired for recycling or closing
            except OrchestraError as exc:
                log.warning("runtime slot %d failed: %s", slot.index, exc)
                slot.failures += 1
                if self._first_error is None:
                    self._first_error = exc
            finally:
                slot.runtime = None
                self._notify()
            if self._closing:
                return
            self._restarts += 1
            await trio.sleep(delay)
            delay = min(delay * 2, self.backoff[1])

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_changed(self) -> None:
        await self._changed.wait()

    # ---- placement -------------------------------------------------------------------

    async def _acquire(self, pinned: Runtime | None = None) -> _Slot:
        while True:
            if self._closing:
                raise PoolClosedError("the runtime pool is closing")
            if pinned is not None and not any(s.runtime is pinned and s.usable for s in self._slots):
                raise TransportClosedError(f"runtime {pinned.name!r}, which holds this session, is gone or recycling")
            candidates = [
                s for s in self._slots
                if s.usable and s.in_flight < self.max_sessions and (pinned is None or s.runtime is pinned)
            ]
            if candidates:
                slot = min(candidates, key=lambda s: (s.in_flight, s.index))
                slot.in_flight += 1
                return slot
            await self._wait_changed()

    def _release(self, slot: _Slot, runtime: Runtime) -> None:
        slot.in_flight -= 1
        if runtime.abandoned and slot.in_flight == 0 and slot.runtime is runtime:
            slot.retire.set()  # recycle: it may still be busy with abandoned turns
        self._notify()

    @asynccontextmanager
    async def lease(self, runtime: Runtime | None = None) -> AsyncIterator[Runtime]:
        """Hold one place on the least-loaded runtime (or on ``runtime``) for the block.

        Raises:
            TransportClosedError: the pinned ``runtime`` is gone.
            PoolClosedError: the pool is closing.
        """
        slot = await self._acquire(runtime)
        runtime = slot.runtime
        assert runtime is not None
        try:
            yield runtime
        finally:
            self._release(slot, runtime)

    async def run_prompt(self, input: PromptInput, *, session_id: str | None = None, resume: bool = False) -> TurnResult:
        """Run one prompt in its own session on the least-loaded runtime.

        Raises:
            TransportClosedError: the runtime died mid-turn (retryable).
        """
        async with self.lease() as runtime:
            session = await runtime.resume(session_id) if resume and session_id else runtime.session(session_id)
            return await session.run(input)

    def statistics(self) -> PoolStatistics:
        """Counts of live runtimes, sessions in flight, restarts and recycles."""
        return PoolStatistics(
            size=self.size,
            live=sum(1 for s in self._slots if s.usable),
            in_flight=sum(s.in_flight for s in self._slots),
            restarts=self._restarts,
            recycled=self._recycled,
            starting=sum(1 for s in self._slots if s.runtime is None),
        )

    @property
    def runtimes(self) -> list[Runtime]:
        """The runtimes live right now."""
        return [s.runtime for s in self._slots if s.runtime is not None]

    # ---- closing ---------------------------------------------------------------------

    async def aclose(self, *, drain: bool = True) -> None:
        """Stop taking work; with ``drain`` wait for sessions in flight, then close every runtime."""
        self._closing = True
        self._notify()
        if drain:
            while any(s.in_flight for s in self._slots):
                await self._wait_changed()
        for slot in self._slots:
            slot.retire.set()
        await trio.lowlevel.checkpoint()


async def _set_when_closed(runtime: Runtime, event: trio.Event) -> None:
    connection = runtime.actor.connection
    if connection is not None:
        await connection.wait_closed()
    event.set()


@asynccontextmanager
async def open_pool(spec: RuntimeSpec | SpecFactory, size: int = 2, **kwargs: Any) -> AsyncIterator[RuntimePool]:
    """Start a pool, yield it once one runtime is ready, close it (draining) on exit.

    Raises:
        ExceptionGroup: errors inside the block and the pool's own (use except*).
    """
    pool = RuntimePool(spec, size, **kwargs)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        try:
            yield pool
        finally:
            with trio.CancelScope(shield=True):
                await pool.aclose(drain=False)

"""RuntimePool: N runtimes under one nursery, least-loaded placement, supervision, recycling.

Owns: one supervisor task per slot (start, watch, restart with backoff), one host task per
runtime process (it owns the process from start to close), placement with a per-runtime limit
of sessions in flight, recycling (a runtime holding abandoned turns once it is idle; a runtime
that served ``max_sessions_per_runtime`` sessions or passed ``max_runtime_rss_mib``, drained
while its replacement already serves), graceful close. Must not know about graphs or datasets.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncContextManager, AsyncIterator, Callable

import attrs
import trio

from .._params import Check, Param, ParamValueError, integer, positive
from ..approvals import AuditLog
from ..protocol import OrchestraError, TransportClosedError
from ..runtime import RuntimeSpec
from ..gateway import DEFAULT_GATEWAY, Gateway, GatewayOptions, gateway_for
from ..session import PromptInput, Runtime, TurnResult, open_runtime
from ._retry import Backoff, PoolClosedError
from ._rss import runtime_rss_mib
from ._supervisor import Ended, Supervisor, serving

_AT_LEAST_ONE = integer(1)

SESSIONS_PER_RUNTIME = 500
"""A recycling quota for long runs, used by batches and judges (docs/batch.md: measured on the
real runtime, which keeps about 0.15-0.3 MiB per session served); the pool's own default is off."""

log = logging.getLogger("dsh_orchestra.pool")

SpecFactory = Callable[[int], RuntimeSpec]
RssReader = Callable[[Runtime], "float | None"]


@attrs.frozen
class PoolStatistics:
    """A snapshot of the pool. ``starting``: slots whose newest runtime is not up yet (a
    successor started ahead of a recycle included); ``draining``: runtimes being recycled that
    still finish the sessions they hold (their successors count in ``live`` or ``starting``)."""

    size: int
    live: int
    in_flight: int
    restarts: int
    recycled: int
    starting: int
    draining: int = 0


class _Instance:
    """One runtime of a slot, from its start to its close (hosted by its own task).

    A successor started ahead of a recycle waits (not usable) until its ``predecessor``
    stops taking sessions."""

    def __init__(self, predecessor: _Instance | None = None) -> None:
        self.runtime: Runtime | None = None
        self.in_flight = 0
        self.placed = 0  # sessions placed on it
        self.alone = False  # its one session in flight holds it alone (an exclusive lease)
        self.reserved = 0  # exclusive leases waiting for it to drain: it takes no new sessions
        self.recycling: str | None = None  # why it takes no new sessions while it drains
        self.succeeded = False  # its successor was started (ahead of its recycle, or at it)
        self.predecessor = predecessor
        self.leave = trio.Event()  # set with retire, or when its successor is to start
        self.retire = trio.Event()  # close it now
        self.released = trio.Event()  # the slot may start its next runtime
        self.ended = Ended.CRASHED

    @property
    def taking(self) -> bool:
        runtime = self.runtime  # a runtime holding abandoned turns takes no new work: it drains
        return (runtime is not None and runtime.alive and not runtime.abandoned and self.recycling is None
                and not self.retire.is_set())

    @property
    def usable(self) -> bool:
        before = self.predecessor
        if before is not None and not before.taking:
            self.predecessor = before = None  # it stopped taking sessions: from now on this one does
        return self.taking and before is None

    @property
    def draining(self) -> bool:
        return self.runtime is not None and self.recycling is not None

    def close(self) -> None:
        self.retire.set()
        self.leave.set()


class _Slot:
    """One runtime position in the pool; its supervisor restarts the runtime as needed. While a
    runtime is recycled the slot hosts two: the old one (serving, then draining) and its successor."""

    def __init__(self, index: int, supervisor: Supervisor) -> None:
        self.index = index
        self.current = _Instance()  # the newest
        self.instances: list[_Instance] = []  # every one not closed yet, oldest first
        self.supervisor = supervisor  # starts, failed starts in a row, restarts

    @property
    def runtimes(self) -> list[Runtime]:
        """Its runtimes not closed yet: the one taking sessions first."""
        ordered = sorted(self.instances, key=lambda i: not i.usable)
        return [i.runtime for i in ordered if i.runtime is not None]

    @property
    def failures(self) -> int:
        return self.supervisor.failures

    @property
    def ready_once(self) -> bool:
        return self.supervisor.ready_once

    @property
    def usable(self) -> bool:
        return any(i.usable for i in self.instances)


def _same_spec(spec: RuntimeSpec) -> SpecFactory:
    def spec_for(index: int) -> RuntimeSpec:
        return spec.evolve(name=f"{spec.display_name}#{index}")

    return spec_for


_OPTIONAL_COUNT = integer(1, "an integer >= 1 or None")
_OPTIONAL_MIB = positive("a positive finite number of MiB or None", finite=True)


def _optional(check: Check, name: str, value: Any) -> Any:
    if value is not None:
        check.check(name, value)
    return value


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

    Long runs: a runtime that was given ``max_sessions_per_runtime`` sessions, or whose process
    tree's resident memory passed ``max_runtime_rss_mib`` MiB when one of its sessions ended
    (read by ``measure_rss``, default ``runtime_rss_mib``: /proc), is recycled: it takes no new
    sessions and is closed once the sessions it holds have ended (none is cut). Its successor
    is started ahead (when all but a fifth of the quota, at least ``max_sessions``, was given)
    and takes over at once; for the memory limit it starts when the limit is passed. Both
    default to None (never): a pinned ``lease(runtime)`` on a recycling runtime fails, so
    leave them off for sessions that go on across leases.
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
        max_sessions_per_runtime: int | None = None,
        max_runtime_rss_mib: float | None = None,
        measure_rss: RssReader = runtime_rss_mib,
        gateway: GatewayOptions | None = DEFAULT_GATEWAY,
    ) -> None:
        if not (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
            raise ParamValueError("pool ", Param("size", size, spelled="size"), f" must be an integer >= 1, not {size!r}")
        _AT_LEAST_ONE.check("max_sessions", max_sessions)
        _AT_LEAST_ONE.check("max_start_failures", max_start_failures)
        chosen = Backoff(0.5, 15.0) if backoff is None else Backoff.of(backoff, jitter=0.0)
        self._spec_for: SpecFactory = _same_spec(spec) if isinstance(spec, RuntimeSpec) else spec
        self.size = size
        self.max_sessions = max_sessions
        self.max_sessions_per_runtime = _optional(_OPTIONAL_COUNT, "max_sessions_per_runtime", max_sessions_per_runtime)
        self.max_runtime_rss_mib = _optional(_OPTIONAL_MIB, "max_runtime_rss_mib", max_runtime_rss_mib)
        self.measure_rss = measure_rss
        limit = self.max_sessions_per_runtime  # its successor starts this many sessions ahead
        self._lead = 0 if limit is None else max(max_sessions, limit // 5)
        self.approvals = approvals
        self.answerer = answerer
        self.audit = audit
        self.gateway = gateway  # for runtimes not routed already (open_pool routes a RuntimeSpec once)
        self.backoff = (chosen.first, chosen.cap)
        self.max_start_failures = max_start_failures
        self.model_gateway: Gateway | None = None  # the gateway open_pool runs for all its runtimes
        self._close_event = trio.Event()
        self._slots = [_Slot(i, Supervisor(chosen, self._close_event, on_change=self._notify)) for i in range(size)]
        self._nursery: trio.Nursery | None = None
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
                self._nursery = nursery
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
        """Start the slot's next runtime (hosted by a task of its own); return how it ended,
        or ``RECYCLED`` as soon as its successor is to start (ahead of its recycle, or at it)."""
        serving = next((i for i in slot.instances if i.taking), None)  # one being succeeded ahead of its recycle
        instance = _Instance(serving)  # before starting, so aclose() can always reach it
        slot.current = instance
        slot.instances.append(instance)
        assert self._nursery is not None
        self._nursery.start_soon(self._host, slot, instance)
        await instance.released.wait()
        return instance.ended

    async def _host(self, slot: _Slot, instance: _Instance) -> None:
        """Run one runtime from its start to its close; say how it ended (``instance.released``)."""
        try:
            async with open_runtime(
                self._spec_for(slot.index), approvals=self.approvals, answerer=self.answerer, audit=self.audit,
                gateway=self.gateway,
            ) as runtime:
                instance.runtime = runtime
                slot.supervisor.ready()
                self._notify()
                async with trio.open_nursery() as watch:
                    watch.start_soon(_close_when_gone, runtime, instance)
                    await instance.leave.wait()
                    if instance.succeeded and runtime.alive and not self._closing:
                        # its successor starts now; this one serves until its limit, drains, closes
                        log.info("starting the successor of runtime %r (%s)", runtime.name,
                                 instance.recycling or f"given {instance.placed} sessions")
                        instance.ended = Ended.RECYCLED
                        instance.released.set()
                        self._notify()
                        await instance.retire.wait()
                    watch.cancel_scope.cancel()
                if not instance.released.is_set() and runtime.alive and not self._closing:
                    self._recycled += 1
                    log.info("recycling runtime %r (abandoned turns: %d)", runtime.name, len(runtime.abandoned))
                    instance.ended = Ended.RECYCLED
                elif not runtime.alive and not instance.released.is_set():
                    instance.ended = Ended.CRASHED
                # drain: nothing is in flight when retired for recycling or closing
        except OrchestraError as exc:
            log.warning("runtime slot %d failed to start: %s", slot.index, exc)
            self._last_error = exc
            instance.ended = Ended.FAILED
        finally:
            instance.runtime = None
            slot.instances.remove(instance)
            if self._closing and not instance.released.is_set():
                instance.ended = Ended.DONE
            instance.released.set()  # a crash backs off, a recycle restarts at once
            self._notify()

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

    async def _acquire(self, pinned: Runtime | None = None, *, alone: bool = False) -> _Instance:
        while True:
            best = self._place(pinned, alone)
            if best is not None:
                return best
            await self._wait_places()

    def _place(self, pinned: Runtime | None, alone: bool) -> _Instance | None:
        """Take a place now (None: none is free).

        Raises:
            PoolClosedError: the pool is closing.
            TransportClosedError: the pinned runtime is gone or recycling.
        """
        if self._closing:
            raise PoolClosedError("the runtime pool is closing")
        candidates = [i for s in self._slots for i in s.instances if i.usable]
        if pinned is not None and not any(i.runtime is pinned for i in candidates):
            raise TransportClosedError(f"runtime {pinned.name!r}, which holds this session, is gone or recycling")
        best: _Instance | None = None  # the fewest in flight; the lowest index among equals
        for here in candidates:
            if self._fits(here, alone) and (best is None or here.in_flight < best.in_flight) and (
                pinned is None or here.runtime is pinned
            ):
                best = here
        if best is not None:
            best.in_flight += 1
            best.alone = alone
            best.placed += 1
            limit = self.max_sessions_per_runtime
            if limit is not None and best.placed >= limit:
                self._recycle(best, f"given {best.placed} sessions")
            elif limit is not None and best.placed >= limit - self._lead:
                self._succeed(best)  # start its successor now, so that it is ready in time
        return best

    async def _acquire_alone(self, pinned: Runtime | None) -> _Instance:
        """A runtime with no other session, kept so until released: meanwhile the emptiest runtime
        takes no new sessions, so that it drains."""
        waiting_on = min((i for s in self._slots for i in (s.instances or [s.current])),
                         key=lambda i: (pinned is not None and i.runtime is not pinned, not i.usable, i.in_flight))
        waiting_on.reserved += 1
        try:
            return await self._acquire(pinned, alone=True)
        finally:
            waiting_on.reserved -= 1
            self._notify()

    def _fits(self, instance: _Instance, alone: bool) -> bool:
        """Whether ``instance`` can take a session now (``alone``: one with the runtime to itself)."""
        if not instance.usable or instance.alone:
            return False
        return instance.in_flight == 0 if alone else instance.in_flight < self.max_sessions and not instance.reserved

    def _release(self, instance: _Instance, runtime: Runtime) -> None:
        instance.in_flight -= 1
        instance.alone = False
        limit = self.max_runtime_rss_mib
        if limit is not None and instance.recycling is None and runtime.alive and not self._closing:
            try:
                rss = self.measure_rss(runtime)
            except OSError:
                rss = None
            if rss is not None and rss > limit:
                self._recycle(instance, f"resident memory {rss:.0f} MiB > {limit:g} MiB")
        if instance.in_flight == 0 and instance.runtime is runtime and (runtime.abandoned or instance.recycling):
            instance.close()  # it may still be busy with abandoned turns
            self._notify()
        else:  # only a place was freed (a recycle started above has notified everyone)
            self._notify_places()

    def _recycle(self, instance: _Instance, why: str) -> None:
        """Place nothing more on ``instance``; its successor takes over (started now, unless it
        was already); it is closed once its sessions have ended."""
        instance.recycling = why
        self._recycled += 1
        self._succeed(instance)
        if instance.in_flight == 0:
            instance.close()

    def _succeed(self, instance: _Instance) -> None:
        """Let the slot start ``instance``'s successor (once)."""
        if not instance.succeeded:
            instance.succeeded = True
            instance.leave.set()
        self._notify()

    def lease(self, runtime: Runtime | None = None, *, alone: bool = False) -> AsyncContextManager[Runtime]:
        """Hold one place on the least-loaded runtime (or on ``runtime``) for the block.

        With ``alone`` the place is a whole runtime: it waits for one with no session in
        flight (keeping new sessions off the emptiest one meanwhile, so it drains), and no
        other session is placed there until the block ends.

        Raises:
            TransportClosedError: the pinned ``runtime`` is gone or recycling.
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
            raise ParamValueError(Param("count", count, spelled="count"), f" must be between 1 and the pool size {self.size}, not {count!r}")
        while sum(1 for s in self._slots if s.usable) < wanted:
            if self._closing:
                raise PoolClosedError("the runtime pool is closing")
            await self._wait_changed()
        await trio.lowlevel.checkpoint()

    def statistics(self) -> PoolStatistics:
        """Counts of live runtimes, sessions in flight, restarts and recycles."""
        instances = [i for s in self._slots for i in s.instances]
        return PoolStatistics(
            size=self.size,
            live=sum(1 for s in self._slots if s.usable),
            in_flight=sum(i.in_flight for i in instances),
            restarts=sum(s.supervisor.restarts for s in self._slots),
            recycled=self._recycled,
            starting=sum(1 for s in self._slots if s.current.runtime is None),
            draining=sum(1 for i in instances if i.draining),
        )

    @property
    def runtimes(self) -> list[Runtime]:
        """The runtimes live right now, by slot: the one taking sessions first, then one being
        recycled (still finishing its sessions) or a successor starting ahead of a recycle."""
        return [runtime for s in self._slots for runtime in s.runtimes]

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
            while self.statistics().in_flight and not self._stopped.is_set():
                await self._wait_places()
        for instance in [i for s in self._slots for i in (*s.instances, s.current)]:
            instance.close()
        if self._running:
            await self._stopped.wait()
        else:
            await trio.lowlevel.checkpoint()


class _Lease:
    """``RuntimePool.lease``: a plain async context manager (one per item in a batch; a
    generator-based one costs a generator, its frame and two extra steps)."""

    __slots__ = ("_pool", "_pinned", "_alone", "_instance", "_runtime")

    def __init__(self, pool: RuntimePool, pinned: Runtime | None, alone: bool) -> None:
        self._pool = pool
        self._pinned = pinned
        self._alone = alone
        self._instance: _Instance | None = None
        self._runtime: Runtime | None = None

    async def __aenter__(self) -> Runtime:
        if self._instance is not None:
            raise RuntimeError("a lease is entered once")
        pool = self._pool
        if self._alone:
            instance = await pool._acquire_alone(self._pinned)
        else:  # a free place is taken without the waiting loop's coroutine
            instance = pool._place(self._pinned, False) or await pool._acquire(self._pinned)
        runtime = instance.runtime
        assert runtime is not None
        self._instance, self._runtime = instance, runtime
        return runtime

    async def __aexit__(self, *exc_info: object) -> None:
        instance, runtime = self._instance, self._runtime
        assert instance is not None and runtime is not None
        self._pool._release(instance, runtime)


async def _close_when_gone(runtime: Runtime, instance: _Instance) -> None:
    connection = runtime.actor.connection
    if connection is not None:
        await connection.wait_closed()
    instance.close()


@asynccontextmanager
async def open_pool(spec: RuntimeSpec | SpecFactory, size: int = 2, *, gateway: GatewayOptions | None = DEFAULT_GATEWAY,
                    **kwargs: Any) -> AsyncIterator[RuntimePool]:
    """Start a pool, yield it once one runtime is ready, close it on exit.

    ``gateway``: a RuntimeSpec for the real ``dsh`` gets one model gateway shared by all its
    runtimes (docs/gateway.md; a spec factory: one per runtime); ``None``: none.

    On exit the pool stops taking work and closes every runtime (sessions still in flight,
    e.g. of tasks the block started, fail with TransportClosedError); every process is reaped
    before this returns.

    Raises:
        OrchestraError: no runtime could be started (raised bare, e.g. RuntimeStartError).
        ExceptionGroup: errors inside the block, or the pool giving up later (use except*).
    """
    routing = spec if isinstance(spec, RuntimeSpec) else None
    async with gateway_for(routing, gateway) as (running, routed):
        pool = RuntimePool(routed or spec, size, gateway=gateway, **kwargs)
        pool.model_gateway = running

        async def close() -> None:
            with trio.CancelScope(shield=True):
                await pool.aclose(drain=False)

        async with serving(pool.run, close):
            yield pool

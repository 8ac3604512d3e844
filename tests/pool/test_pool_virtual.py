"""RuntimePool logic on in-process simulated runtimes, in virtual time (MockClock).

Covers: least-loaded placement and the per-runtime limit (instrumented with counters),
restart after a crash with backoff, exponential backoff of failed starts, giving up,
recycling a runtime that holds abandoned turns once idle (no new work meanwhile), draining
and non-draining close, close interrupting a backoff, per-session state pruned after runs.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.approvals import ALLOWED_ONCE, Decision
from dsh_orchestra.pool import PoolClosedError, RuntimePool, open_pool
from dsh_orchestra.protocol import RuntimeStartError, TransportClosedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime
from dsh_orchestra.testing._script import Script

from pool_support import in_process


async def test_placement_never_exceeds_max_sessions(autojump_clock: MockClock, pool_script: Script) -> None:
    """20 concurrent sessions over 3 runtimes with max_sessions=2: at most 2 each, all 3 used."""
    active: collections.Counter[int] = collections.Counter()
    peak: collections.Counter[int] = collections.Counter()
    totals: list[int] = []
    async with open_pool(in_process(pool_script), 3, max_sessions=2) as pool:
        await pool.wait_live()

        async def job(i: int) -> None:
            async with pool.lease() as runtime:
                key = id(runtime)
                active[key] += 1
                peak[key] = max(peak[key], active[key])
                totals.append(sum(active.values()))
                try:
                    result = await runtime.session(f"job-{i}").run("SLOW job")
                finally:
                    active[key] -= 1
            assert result.final_response == "slow done"

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(job, i)
        assert pool.statistics().in_flight == 0
    assert len(peak) == 3
    assert max(peak.values()) == 2
    assert max(totals) == 6


async def test_least_loaded_placement(autojump_clock: MockClock, pool_script: Script) -> None:
    """Each lease goes to the runtime with the fewest in flight; a full pool makes callers wait."""
    async with open_pool(in_process(pool_script), 3, max_sessions=2) as pool:
        await pool.wait_live()
        async with contextlib_stack() as stack:
            first = [await stack.enter_async_context(pool.lease()) for _ in range(3)]
            assert len({id(r) for r in first}) == 3
            second = [await stack.enter_async_context(pool.lease()) for _ in range(3)]
            assert {id(r) for r in second} == {id(r) for r in first}
            assert pool.statistics().in_flight == 6
            with trio.move_on_after(10) as waited:
                await stack.enter_async_context(pool.lease())
            assert waited.cancelled_caught, "a seventh lease must wait: every runtime is full"

        # one runtime with a free place: the next lease goes there
        async with pool.lease() as a, pool.lease() as b, pool.lease() as c, pool.lease() as d:
            assert len({id(a), id(b), id(c)}) == 3
            assert id(d) in {id(a), id(b), id(c)}
            async with pool.lease() as e:
                loaded = collections.Counter([id(a), id(b), id(c), id(d), id(e)])
                assert sorted(loaded.values()) == [1, 2, 2]


def contextlib_stack() -> Any:
    import contextlib

    return contextlib.AsyncExitStack()


async def test_crash_fails_in_flight_and_restarts_after_backoff(autojump_clock: MockClock, pool_script: Script) -> None:
    """A crashed runtime fails its sessions (retryable), is restarted after the backoff, and serves."""
    async with open_pool(in_process(pool_script), 1, max_sessions=4, backoff=(2.0, 8.0)) as pool:
        first = pool.runtimes[0]
        errors: list[BaseException] = []

        async def slow() -> None:
            try:
                await pool.run_prompt("SLOW in flight")
            except TransportClosedError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            await trio.sleep(1)
            with pytest.raises(TransportClosedError):
                await pool.run_prompt("CRASH now")
        assert len(errors) == 1, "the session in flight on the crashed runtime fails too"
        crashed_at = trio.current_time()
        result = await pool.run_prompt("hello again")
        assert result.finish_reason == "completed"
        assert trio.current_time() - crashed_at == pytest.approx(2.0, abs=0.1)
        assert pool.runtimes[0] is not first
        stats = pool.statistics()
        assert (stats.restarts, stats.recycled, stats.live) == (1, 0, 1)


async def test_backoff_of_repeated_crashes_resets_after_a_successful_start(autojump_clock: MockClock, pool_script: Script) -> None:
    """Each crash of a runtime that had started is followed by the first backoff delay."""
    async with open_pool(in_process(pool_script), 1, backoff=(1.5, 8.0)) as pool:
        for _ in range(3):
            with pytest.raises(TransportClosedError):
                await pool.run_prompt("CRASH")
            crashed_at = trio.current_time()
            await pool.wait_live()
            assert trio.current_time() - crashed_at == pytest.approx(1.5, abs=0.1)
        assert pool.statistics().restarts == 3


def flaky_factory(script: Script, bad_starts: dict[int, int], starts: dict[int, list[float]]) -> Any:
    """Spec factory: slot i fails its first ``bad_starts[i]`` handshakes (an effort the sim rejects)."""
    counts: collections.Counter[int] = collections.Counter()

    def spec_for(index: int) -> RuntimeSpec:
        counts[index] += 1
        starts.setdefault(index, []).append(trio.current_time())
        bad = counts[index] <= bad_starts.get(index, 0)
        return in_process(script, name=f"sim#{index}", reasoning_effort="bogus" if bad else None)

    return spec_for


async def test_failed_starts_back_off_exponentially(autojump_clock: MockClock, pool_script: Script) -> None:
    """A slot that cannot start retries after 0.5, 1, 2 s (doubling); the others serve meanwhile."""
    starts: dict[int, list[float]] = {}
    factory = flaky_factory(pool_script, {1: 3}, starts)
    async with open_pool(factory, 2, backoff=(0.5, 15.0)) as pool:
        result = await pool.run_prompt("hello")
        assert result.finish_reason == "completed"
        await pool.wait_live(2)
        gaps = [b - a for a, b in itertools.pairwise(starts[1])]
        assert gaps == pytest.approx([0.5, 1.0, 2.0], abs=0.05)
        assert len(starts[0]) == 1
        assert pool.statistics().restarts == 3


async def test_no_runtime_can_start_raises_the_start_error(autojump_clock: MockClock, pool_script: Script) -> None:
    """When every slot fails its first start, open_pool raises RuntimeStartError (bare)."""
    factory = flaky_factory(pool_script, {0: 99, 1: 99}, {})
    with pytest.raises(RuntimeStartError, match="reasoning effort"):
        async with open_pool(factory, 2):
            pytest.fail("the block must not run")


async def test_pool_gives_up_after_repeated_failed_restarts(autojump_clock: MockClock, pool_script: Script) -> None:
    """A runtime that crashed and then fails max_start_failures restarts in a row ends the pool."""
    counts = itertools.count()

    def spec_for(index: int) -> RuntimeSpec:
        return in_process(pool_script, reasoning_effort=None if next(counts) == 0 else "bogus")

    with pytest.raises(ExceptionGroup) as info:
        async with open_pool(spec_for, 1, max_start_failures=3, backoff=(0.5, 1.0)) as pool:
            with pytest.raises(TransportClosedError):
                await pool.run_prompt("CRASH")
            await trio.sleep_forever()
    assert info.group_contains(RuntimeStartError)
    assert next(counts) == 4  # the good start plus three failed restarts


async def test_abandoned_runtime_drains_then_is_recycled(autojump_clock: MockClock, pool_script: Script) -> None:
    """A cancelled run abandons its session; the runtime takes no new work, finishes what is in
    flight, and is then replaced at once (no backoff)."""
    async with open_pool(in_process(pool_script), 1, max_sessions=4, backoff=(30.0, 30.0)) as pool:
        old = pool.runtimes[0]
        slow_results: list[str] = []

        async def slow() -> None:
            slow_results.append((await pool.run_prompt("SLOW, started before the abandon")).final_response)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            await trio.sleep(0.5)
            with trio.move_on_after(1.0) as cancelled:
                await pool.run_prompt("HANG forever")
            assert cancelled.cancelled_caught
            assert len(old.abandoned) == 1
            assert pool.statistics().live == 0, "a runtime holding abandoned turns takes no new sessions"
            asked = trio.current_time()
            fresh = await pool.run_prompt("hello after the abandon")  # waits for the replacement
            # the SLOW turn (5 s, started at 0) finished on the old runtime first
            assert trio.current_time() == pytest.approx(5.0, abs=0.1)
            assert trio.current_time() > asked
        assert slow_results == ["slow done"]
        assert fresh.finish_reason == "completed"
        assert pool.runtimes[0] is not old
        assert not old.alive
        stats = pool.statistics()
        assert (stats.recycled, stats.restarts) == (1, 0)


async def test_drain_close_waits_for_sessions_in_flight(autojump_clock: MockClock, pool_script: Script) -> None:
    """aclose(drain=True) lets sessions in flight finish, refuses new ones, and returns stopped."""
    async with trio.open_nursery() as nursery:
        pool: RuntimePool = await nursery.start(RuntimePool(in_process(pool_script), 2).run)
        results: list[str] = []

        async def slow() -> None:
            results.append((await pool.run_prompt("SLOW")).final_response)

        nursery.start_soon(slow)
        await trio.sleep(1)
        await pool.aclose(drain=True)
        assert results == ["slow done"]
        assert trio.current_time() == pytest.approx(5.0, abs=0.1)
        assert pool.runtimes == []
        with pytest.raises(PoolClosedError):
            await pool.run_prompt("too late")
        await pool.aclose()  # idempotent


async def test_close_without_drain_fails_sessions_in_flight(autojump_clock: MockClock, pool_script: Script) -> None:
    """aclose(drain=False) closes the runtimes at once; their sessions get TransportClosedError."""
    async with trio.open_nursery() as nursery:
        pool: RuntimePool = await nursery.start(RuntimePool(in_process(pool_script), 2).run)
        errors: list[BaseException] = []

        async def slow() -> None:
            try:
                await pool.run_prompt("SLOW")
            except TransportClosedError as exc:
                errors.append(exc)

        nursery.start_soon(slow)
        nursery.start_soon(slow)
        await trio.sleep(1)
        await pool.aclose(drain=False)
        assert trio.current_time() < 2.0
    assert len(errors) == 2


async def test_close_interrupts_the_backoff(autojump_clock: MockClock, pool_script: Script) -> None:
    """A slot waiting out a long restart backoff does not hold up closing."""
    async with open_pool(in_process(pool_script), 1, backoff=(1000.0, 1000.0)) as pool:
        with pytest.raises(TransportClosedError):
            await pool.run_prompt("CRASH")
        assert pool.statistics().live == 0
        closing = trio.current_time()
    assert trio.current_time() - closing < 5.0


async def test_state_per_session_is_pruned(autojump_clock: MockClock, pool_script: Script) -> None:
    """After many runs with subagents and approvals nothing per session is left behind."""
    async def allow_all(request: Any) -> Decision:  # async: a sync policy runs in a thread, which autojump's clock does not wait for
        return Decision(outcome=ALLOWED_ONCE, rule="test-allow")

    async with open_pool(in_process(pool_script), 2, approvals=allow_all) as pool:
        await pool.wait_live()
        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(pool.run_prompt, "SPAWN two children" if i % 2 else "DEPLOY it")
        spawned = await pool.run_prompt("SPAWN")
        assert len(spawned.subagents) == 2
        deployed = await pool.run_prompt("DEPLOY")
        assert [d.outcome for d in deployed.approvals] == ["allowed-once"]
        for runtime in pool.runtimes:
            assert_pruned(runtime)


def assert_pruned(runtime: Runtime) -> None:
    router = runtime.router
    assert router.parents == {}
    assert router._children == {}
    assert router._subscriptions == {}
    assert runtime.approvals is not None and not any(runtime.approvals._by_session.values())
    assert runtime.connection.statistics().pending_requests == 0
    assert runtime.abandoned == set()


async def test_an_alone_lease_waits_for_an_empty_runtime_and_keeps_others_off(
    autojump_clock: MockClock, pool_script: Script
) -> None:
    """``lease(alone=True)`` on one runtime: it waits for the sessions in flight to finish, no
    new session is placed meanwhile (it drains), and none while it holds the runtime."""
    events: list[str] = []
    async with open_pool(in_process(pool_script), 1, max_sessions=4) as pool:
        await pool.wait_live()

        async def normal(name: str, delay: float) -> None:
            await trio.sleep(delay)
            async with pool.lease() as runtime:
                events.append(f"{name} in")
                await runtime.session(f"s-{name}").run("SLOW job")
                events.append(f"{name} out")

        async def alone() -> None:
            await trio.sleep(0.1)
            async with pool.lease(alone=True) as runtime:
                events.append("alone in")
                assert pool.statistics().in_flight == 1
                await runtime.session("s-alone").run("SLOW job")
                assert pool.statistics().in_flight == 1
                events.append("alone out")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(normal, "a", 0)
            nursery.start_soon(normal, "b", 0)
            nursery.start_soon(alone)
            nursery.start_soon(normal, "c", 0.2)  # arrives while the alone lease waits
        assert pool.statistics().in_flight == 0
    assert events.index("alone in") > max(events.index("a out"), events.index("b out"))
    assert events.index("c in") > events.index("alone out")


async def test_an_alone_lease_takes_an_idle_runtime_and_the_others_keep_serving(
    autojump_clock: MockClock, pool_script: Script
) -> None:
    """Two runtimes: the alone lease gets one to itself; every other session goes to the other."""
    async with open_pool(in_process(pool_script), 2, max_sessions=4) as pool:
        await pool.wait_live()
        async with pool.lease(alone=True) as mine:
            others: list[Runtime] = []

            async def normal(i: int) -> None:
                async with pool.lease() as runtime:
                    others.append(runtime)
                    await runtime.session(f"n-{i}").run("SLOW job")

            async with trio.open_nursery() as nursery:
                for i in range(6):
                    nursery.start_soon(normal, i)
                await mine.session("alone").run("SLOW job")
            assert others and all(runtime is not mine for runtime in others)
        assert pool.statistics().in_flight == 0

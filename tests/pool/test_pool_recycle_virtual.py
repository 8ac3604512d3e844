"""Recycling for long runs (issue 12 item 13), on in-process simulated runtimes in virtual time.

A runtime given ``max_sessions_per_runtime`` sessions, or whose resident memory (an injected
reader here) passes ``max_runtime_rss_mib`` as a session ends, takes no new sessions; its
replacement starts at once and serves while it finishes what it holds; then it is closed.
No session is cut, none fails, no restart (backoff) is counted.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from pool_support import in_process
from trio.testing import MockClock

from dsh_orchestra._params import ParamValueError
from dsh_orchestra.pool import RuntimePool, open_pool
from dsh_orchestra.protocol import RuntimeStartError, TransportClosedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime
from dsh_orchestra.testing._script import Script
from dsh_orchestra.testing._simulator import open_simulator_stream


async def test_recycles_after_max_sessions_per_runtime(autojump_clock: MockClock, pool_script: Script) -> None:
    """20 sessions, 4 in flight, a new runtime every 5 sessions: 4 runtimes each served exactly 5,
    every session completed on the runtime it was placed on, no restart, and the old runtime
    drained while its replacement was live."""
    served: collections.Counter[Runtime] = collections.Counter()
    overlaps: list[tuple[int, int]] = []
    async with open_pool(in_process(pool_script), 1, max_sessions=4, max_sessions_per_runtime=5) as pool:

        async def job(i: int) -> None:
            async with pool.lease() as runtime:
                served[runtime] += 1
                result = await runtime.session(f"job-{i}").run("SLOW job")
                assert runtime.alive, "a recycling runtime stays up until its sessions ended"
                stats = pool.statistics()
                if stats.draining:
                    overlaps.append((stats.live, stats.draining))
            assert result.final_response == "slow done"

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(job, i)
                await trio.sleep(0.5)
        stats = pool.statistics()
        assert len(served) == 4 and set(served.values()) == {5}
        assert (stats.recycled, stats.restarts, stats.in_flight) == (4, 0, 0)
        assert (1, 1) in overlaps, "the replacement served while the old runtime drained"
        await pool.wait_live()
        assert pool.runtimes[0] not in served, "the fifth runtime replaced the fourth"
    assert not any(runtime.alive for runtime in served)


async def test_recycling_runtime_finishes_its_sessions_while_the_replacement_serves(
    autojump_clock: MockClock, pool_script: Script
) -> None:
    """Two SLOW turns (5 s) fill a runtime's quota of 2: a third prompt at t=1 runs on the
    replacement and ends long before them; the old one closes once they are done."""
    async with open_pool(in_process(pool_script), 1, max_sessions=2, max_sessions_per_runtime=2) as pool:
        old = pool.runtimes[0]
        slow: list[str] = []

        async def run_slow() -> None:
            slow.append((await pool.run_prompt("SLOW")).final_response)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_slow)
            nursery.start_soon(run_slow)
            await trio.sleep(1)
            assert pool.statistics().draining == 1
            with pytest.raises(TransportClosedError, match="recycling"):
                async with pool.lease(old):  # pinned work cannot go to a recycling runtime
                    pass
            async with pool.lease() as fresh:
                assert fresh is not old
                assert (await fresh.session().run("hello")).finish_reason == "completed"
            assert trio.current_time() < 2.0 and old.alive
        assert slow == ["slow done", "slow done"]
        assert trio.current_time() == pytest.approx(5.0, abs=0.1)
        await trio.testing.wait_all_tasks_blocked()
        assert not old.alive
        assert pool.statistics().draining == 0 and pool.runtimes[0] is fresh and old not in pool.runtimes


async def test_the_successor_starts_ahead_so_placement_never_waits(autojump_clock: MockClock, pool_script: Script) -> None:
    """Runtimes take 3 s to start; 20 SLOW sessions (5 s each) one after the other, 10 per
    runtime: the successor is started 2 sessions ahead (a fifth of the quota), so the 20 take
    exactly 100 s: no session waits for a start. Each runtime serves exactly 10."""
    starts: list[float] = []

    @asynccontextmanager
    async def slow_start() -> AsyncIterator[trio.abc.Stream]:
        starts.append(trio.current_time())
        await trio.sleep(3)
        async with open_simulator_stream(pool_script) as stream:
            yield stream

    served: collections.Counter[Runtime] = collections.Counter()
    async with open_pool(RuntimeSpec(connect=slow_start, name="slow"), 1, max_sessions=1,
                         max_sessions_per_runtime=10) as pool:
        began = trio.current_time()
        for i in range(20):
            async with pool.lease() as runtime:
                served[runtime] += 1
                assert (await runtime.session().run(f"SLOW {i}")).final_response == "slow done"
        assert trio.current_time() - began == pytest.approx(100.0, abs=0.1)
    assert list(served.values()) == [10, 10]
    assert starts == pytest.approx([0.0, 38.0, 88.0], abs=0.1)  # at the 8th session of each: 3 + 5 * 7, 3 + 5 * 17


async def test_rss_limit_recycles_when_a_session_ends(autojump_clock: MockClock, pool_script: Script) -> None:
    """The reader is called as each session ends; a runtime reported above the limit takes no
    new session: 100 MiB more per session and a 250 MiB limit recycle every third session."""
    rss: collections.Counter[Runtime] = collections.Counter()
    served: collections.Counter[Runtime] = collections.Counter()

    def measure(runtime: Runtime) -> float:
        rss[runtime] += 100
        return float(rss[runtime])

    async with open_pool(in_process(pool_script), 1, max_sessions=1, max_runtime_rss_mib=250,
                         measure_rss=measure) as pool:
        for i in range(9):
            async with pool.lease() as runtime:
                served[runtime] += 1
                assert (await runtime.session().run(f"hello {i}")).finish_reason == "completed"
        stats = pool.statistics()
    assert list(served.values()) == [3, 3, 3]
    assert (stats.recycled, stats.restarts) == (3, 0)


async def test_unknown_rss_never_recycles(autojump_clock: MockClock, pool_script: Script) -> None:
    """A runtime without a process (in-process here) has no RSS: the default reader says None."""
    async with open_pool(in_process(pool_script), 1, max_runtime_rss_mib=1) as pool:
        first = pool.runtimes[0]
        for i in range(5):
            await pool.run_prompt(f"hello {i}")
        assert pool.runtimes == [first] and pool.statistics().recycled == 0


async def test_a_replacement_that_cannot_start_backs_off_and_the_pool_gives_up(
    autojump_clock: MockClock, pool_script: Script
) -> None:
    """The first runtime serves its quota and drains; every replacement fails to start: the
    supervisor backs off and gives up as for any failed start, after the old one closed."""
    starts: list[float] = []
    runtimes: list[Runtime] = []

    def spec_for(index: int) -> RuntimeSpec:
        starts.append(trio.current_time())
        return in_process(pool_script, name=f"sim#{index}", reasoning_effort=None if len(starts) == 1 else "bogus")

    with pytest.raises(BaseExceptionGroup) as caught:
        async with open_pool(spec_for, 1, max_sessions_per_runtime=2, max_start_failures=3,
                             backoff=(1.0, 1.0)) as pool:
            runtimes.extend(pool.runtimes)
            results = [await pool.run_prompt(f"hello {i}") for i in range(2)]
            assert {r.finish_reason for r in results} == {"completed"}
            await trio.sleep_forever()
    assert caught.group_contains(RuntimeStartError, match="reasoning effort")
    assert len(starts) == 4  # the good start, then three failed ones 1 s apart
    assert [b - a for a, b in itertools.pairwise(starts[1:])] == pytest.approx([1.0, 1.0], abs=0.05)
    assert not runtimes[0].alive


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_sessions_per_runtime", 0), ("max_sessions_per_runtime", 2.5), ("max_sessions_per_runtime", True),
     ("max_runtime_rss_mib", 0), ("max_runtime_rss_mib", -1.0), ("max_runtime_rss_mib", math.nan),
     ("max_runtime_rss_mib", math.inf), ("max_runtime_rss_mib", "500")],
)
def test_bad_limits_name_the_parameter(name: str, value: Any, pool_script: Script) -> None:
    with pytest.raises(ParamValueError) as caught:
        RuntimePool(in_process(pool_script), 1, **{name: value})
    assert caught.value.param == name and str(caught.value).startswith(f"{name} must be ")
    assert isinstance(caught.value, ValueError)

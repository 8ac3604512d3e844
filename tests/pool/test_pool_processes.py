"""RuntimePool with real simulator processes: killed runtimes, recycling, closing reaps everything.

Every test checks the process table for the runtimes it saw (and conftest checks that no child
process of the test is left).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
import trio
import trio.testing

from dsh_orchestra.pool import RuntimePool, open_pool
from dsh_orchestra.protocol import TransportClosedError
from dsh_orchestra.runtime import RuntimeSpec

from process_table import assert_gone

SpecMaker = Callable[..., RuntimeSpec]


def pids(pool: object) -> list[int]:
    found = []
    for runtime in pool.runtimes:  # type: ignore[attr-defined]
        pid = runtime.actor.pid
        assert pid is not None
        found.append(pid)
    return found


async def test_killed_runtime_is_restarted_and_its_session_fails_retryably(sim_process: SpecMaker) -> None:
    """SIGKILL of one runtime: its session in flight fails with TransportClosedError (with the
    exit status), the pool starts a new process and keeps serving on both slots."""
    with trio.fail_after(30):
        async with open_pool(sim_process(), 2, max_sessions=2, backoff=(0.1, 1.0)) as pool:
            await pool.wait_live()
            before = pids(pool)
            victim = pool.runtimes[0]
            victim_pid = victim.actor.pid
            assert victim_pid is not None
            failures: list[BaseException] = []
            prompted = trio.Event()

            async def in_flight() -> None:
                async with pool.lease(victim) as runtime:
                    session = runtime.session()
                    await session.prompt("SLOW on the victim")  # session.run(), in two steps
                    prompted.set()
                    try:
                        await session.wait()
                    except TransportClosedError as exc:
                        failures.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(in_flight)
                await prompted.wait()
                await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # the wait request is out
                os.kill(victim_pid, signal.SIGKILL)
            assert len(failures) == 1
            assert failures[0].returncode == -signal.SIGKILL  # type: ignore[attr-defined]
            assert "exit status -9" in str(failures[0])
            await pool.wait_live()
            after = pids(pool)
            assert victim_pid not in after and before[1] in after
            results = [await pool.run_prompt(f"hello {i}") for i in range(4)]
            assert {r.finish_reason for r in results} == {"completed"}
            assert pool.statistics().restarts == 1
            assert_gone(victim_pid)
            seen = set(before) | set(after)
    for pid in seen:
        assert_gone(pid)


async def test_recycled_runtime_process_is_reaped(sim_process: SpecMaker) -> None:
    """A runtime whose caller was cancelled mid-turn is replaced by a new process; the old one is
    reaped even though its turn never ends."""
    with trio.fail_after(30):
        async with open_pool(sim_process(), 1) as pool:
            old_pid = pids(pool)[0]
            with trio.move_on_after(0.5):
                await pool.run_prompt("HANG forever")
            result = await pool.run_prompt("hello")
            assert result.finish_reason == "completed"
            new_pid = pids(pool)[0]
            assert new_pid != old_pid
            assert pool.statistics().recycled == 1
            assert_gone(old_pid)
    assert_gone(new_pid)


async def test_graceful_close_leaves_no_process(sim_process: SpecMaker) -> None:
    """Leaving the block closes every runtime (shutdown ladder) and reaps every process."""
    with trio.fail_after(30):
        async with open_pool(sim_process(), 3, max_sessions=1) as pool:
            await pool.wait_live()
            async with trio.open_nursery() as nursery:
                for i in range(6):
                    nursery.start_soon(pool.run_prompt, f"hello {i}")
            seen = pids(pool)
            assert len(set(seen)) == 3
    for pid in seen:
        assert_gone(pid)


async def test_cancelled_pool_with_hung_turns_leaves_no_process(sim_process: SpecMaker) -> None:
    """Cancelling the block while turns hang in every runtime still reaps every process."""
    seen: list[int] = []
    hanging = 0
    all_hang = trio.Event()

    async def hang(pool: RuntimePool) -> None:
        nonlocal hanging
        async with pool.lease() as runtime:
            session = runtime.session()
            await session.prompt("HANG")  # session.run(), in two steps
            hanging += 1
            if hanging == 4:
                all_hang.set()
            await session.wait()

    with trio.fail_after(60):
        with trio.CancelScope() as block:
            async with open_pool(sim_process(), 2, max_sessions=2) as pool:
                await pool.wait_live()
                seen.extend(pids(pool))
                async with trio.open_nursery() as nursery:
                    for _ in range(4):
                        nursery.start_soon(hang, pool)
                    await all_hang.wait()  # two turns accepted by each runtime, none will end
                    assert pool.statistics().in_flight == 4
                    block.cancel()
    assert block.cancelled_caught
    assert len(seen) == 2
    for pid in seen:
        assert_gone(pid)


async def test_runtime_command_that_cannot_start(tmp_path: "os.PathLike[str]", sim_process: SpecMaker) -> None:
    """A command that is not a runtime: the pool raises RuntimeStartError and leaves nothing."""
    from dsh_orchestra.protocol import RuntimeStartError

    spec = sim_process().evolve(command=("/bin/sh", "-c", "echo not a runtime >&2; exit 7"))
    with trio.fail_after(30):
        with pytest.raises(RuntimeStartError, match="exit status 7"):
            async with open_pool(spec, 2):
                pytest.fail("the block must not run")

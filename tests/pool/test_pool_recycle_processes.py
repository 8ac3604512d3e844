"""Recycling for long runs with simulator processes: distinct pids, the /proc reader, nothing
left behind when the block is cancelled mid-recycle or a replacement cannot start."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
import trio
from process_table import assert_gone

from dsh_orchestra.pool import open_pool, process_tree_rss, runtime_rss_mib
from dsh_orchestra.protocol import RuntimeStartError
from dsh_orchestra.runtime import RuntimeSpec

SpecMaker = Callable[..., RuntimeSpec]


async def test_a_new_process_every_n_sessions(sim_process: SpecMaker) -> None:
    """12 sessions, 2 in flight, 4 per runtime: three processes served them, 4 each; every
    process used is reaped, the recycled ones while the pool still runs."""
    used: list[int] = []
    with trio.fail_after(60):
        async with open_pool(sim_process(), 1, max_sessions=2, max_sessions_per_runtime=4) as pool:

            async def job(i: int) -> None:
                async with pool.lease() as runtime:
                    assert runtime.actor.pid is not None
                    used.append(runtime.actor.pid)
                    assert (await runtime.session().run(f"hello {i}")).finish_reason == "completed"

            for batch in range(6):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(job, 2 * batch)
                    nursery.start_soon(job, 2 * batch + 1)
            stats = pool.statistics()
            assert (stats.recycled, stats.restarts) == (3, 0)
            assert [used.count(pid) for pid in dict.fromkeys(used)] == [4, 4, 4]
            await pool.wait_live()
            last = pool.runtimes[0].actor.pid
            assert last not in used
            for pid in dict.fromkeys(used):
                with trio.fail_after(10):
                    while pid in [r.actor.pid for r in pool.runtimes]:
                        await pool._wait_changed()  # the pool's own change event
                assert_gone(pid)
    assert last is not None
    assert_gone(last)


async def test_rss_limit_with_the_proc_reader(sim_process: SpecMaker) -> None:
    """A limit below any process's size (1 MiB): each runtime serves one session, then is replaced."""
    used: list[int] = []
    with trio.fail_after(60):
        async with open_pool(sim_process(), 1, max_sessions=1, max_runtime_rss_mib=1) as pool:
            for i in range(3):
                async with pool.lease() as runtime:
                    size = runtime_rss_mib(runtime)
                    assert size is not None and size > 1
                    assert runtime.actor.pid is not None
                    used.append(runtime.actor.pid)
                    await runtime.session().run(f"hello {i}")
            assert len(set(used)) == 3 and pool.statistics().recycled == 3
    for pid in used:
        assert_gone(pid)


def test_process_tree_rss_counts_the_children() -> None:
    """A shell whose child holds 64 MiB: the tree counts the child; a gone pid has none."""
    child = "b = bytearray(64 * 2**20); print('ready', flush=True); import sys; sys.stdin.read()"
    shell = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c \"{child}\""], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert shell.stdout is not None and shell.stdout.readline() == "ready\n"
        own = process_tree_rss(shell.pid)
        assert own is not None and own > 64 * 2**20
    finally:
        assert shell.stdin is not None
        shell.stdin.close()
        shell.wait(timeout=30)
        assert shell.stdout is not None
        shell.stdout.close()
    assert process_tree_rss(shell.pid) is None


@pytest.mark.parametrize("when", ["replacement starting", "replacement live"])
async def test_cancelled_mid_recycle_leaves_no_process(sim_process: SpecMaker, when: str) -> None:
    """The block is cancelled while the old runtime drains two SLOW turns and its replacement
    starts (or serves): both processes are reaped (conftest also checks for any child left)."""
    seen: list[int] = []
    with trio.fail_after(60):
        with trio.CancelScope() as scope:
            async with open_pool(sim_process(), 1, max_sessions=2, max_sessions_per_runtime=2) as pool:
                old = pool.runtimes[0]
                assert old.actor.pid is not None
                seen.append(old.actor.pid)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pool.run_prompt, "SLOW one")
                    nursery.start_soon(pool.run_prompt, "SLOW two")
                    while pool.statistics().draining == 0:
                        await pool._wait_changed()
                    if when == "replacement live":
                        await pool.wait_live()
                        fresh = pool.runtimes[0]
                        assert fresh is not old and fresh.actor.pid is not None
                        seen.append(fresh.actor.pid)
                    assert old.alive
                    scope.cancel()
    assert scope.cancelled_caught
    for pid in seen:
        assert_gone(pid)


async def test_a_replacement_that_cannot_start_leaves_no_process(sim_process: SpecMaker) -> None:
    """The first runtime serves its quota; every replacement's command fails: the pool gives up
    with the start error after the old process was reaped."""
    good = sim_process()
    bad = good.evolve(command=("/bin/sh", "-c", "echo not a runtime >&2; exit 7"))
    starts: list[int] = []

    def spec_for(index: int) -> RuntimeSpec:
        starts.append(index)
        return good if len(starts) == 1 else bad

    old_pid = None
    with trio.fail_after(60):
        with pytest.raises(BaseExceptionGroup) as caught:
            async with open_pool(spec_for, 1, max_sessions_per_runtime=1, max_start_failures=2,
                                 backoff=(0.05, 0.05)) as pool:
                old_pid = pool.runtimes[0].actor.pid
                assert (await pool.run_prompt("hello")).finish_reason == "completed"
                await trio.sleep_forever()
    assert caught.group_contains(RuntimeStartError, match="exit status 7")
    assert len(starts) == 3
    assert old_pid is not None
    assert_gone(old_pid)

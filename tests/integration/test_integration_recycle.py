"""Recycling on the real runtime (the bundled dsh against the scripted model, conftest
``dsh_spec``): a new process every N sessions, the old ones reaped, every turn completed, and
the /proc reader sees the runtime's real size."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
from process_table import assert_gone

from dsh_orchestra.pool import open_pool, runtime_rss_mib
from dsh_orchestra.runtime import RuntimeSpec

pytestmark = pytest.mark.integration


async def test_the_real_runtime_is_recycled_every_n_sessions(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    used: list[int] = []
    sizes: list[float] = []
    with trio.fail_after(300):
        async with open_pool(dsh_spec(), 1, max_sessions=2, max_sessions_per_runtime=3) as pool:

            async def one(i: int) -> None:
                async with pool.lease() as runtime:
                    assert runtime.actor.pid is not None
                    used.append(runtime.actor.pid)
                    result = await runtime.session().run(f"Say hello {i}")
                    assert result.finish_reason == "completed", result.error
                    size = runtime_rss_mib(runtime)
                    assert size is not None
                    sizes.append(size)

            for pair in range(4):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(one, 2 * pair)
                    nursery.start_soon(one, 2 * pair + 1)
            stats = pool.statistics()
            assert (stats.recycled, stats.restarts) == (2, 0)
            assert [used.count(pid) for pid in dict.fromkeys(used)] == [3, 3, 2]
            live = [r.actor.pid for r in pool.runtimes]
    assert min(sizes) > 50, sizes  # the real runtime is hundreds of MiB
    for pid in {*used, *live}:
        assert pid is not None
        assert_gone(pid)

"""A pool's start-up: every runtime starts at once, and work is placed on the first one ready
without waiting for the others (the goodput run's start, docs/benchmarks.md).

Ordering only: the second runtime's start is held by an event the test sets."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio
import trio.testing

from dsh_orchestra.pool import open_pool
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import Script
from dsh_orchestra.testing._simulator import open_simulator_stream


async def test_runtimes_start_together_and_work_starts_on_the_first_ready(pool_script: Script) -> None:
    entered: list[int] = []
    hold_second = trio.Event()

    def spec_for(index: int) -> RuntimeSpec:
        @asynccontextmanager
        async def connect() -> AsyncIterator[trio.abc.Stream]:
            entered.append(index)
            if index == 1:
                await hold_second.wait()
            async with open_simulator_stream(pool_script) as stream:
                yield stream

        return RuntimeSpec(connect=connect, name=f"sim#{index}")

    with trio.fail_after(30):
        async with open_pool(spec_for, 2, gateway=None) as pool:
            assert sorted(entered) == [0, 1]  # both began starting before the pool was handed out
            assert pool.statistics().live == 1 and pool.statistics().starting == 1
            result = await pool.run_prompt("hello")  # served while the second is still starting
            assert result.finish_reason == "completed"
            assert pool.statistics().live == 1
            hold_second.set()
            await pool.wait_live(2)
            assert pool.statistics().live == 2

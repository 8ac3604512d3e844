"""The start ramp (batch/_ramp.py): with a model gateway, a batch's workers start a few at a
time, more at each new model call, each further runtime ready and each item that ends.

Ordering only: each step is released by an event the test sets, and counted once every task
is blocked (MockClock, no timing asserts)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio
import trio.testing
from trio.testing import MockClock

import dsh_orchestra.batch._runner as runner_module
from dsh_orchestra.batch import Attempt, BatchItem, BatchOptions, run_batch
from dsh_orchestra.batch._ramp import StartRamp, grow_on_ready
from dsh_orchestra.gateway import Gateway, GatewayOptions
from dsh_orchestra.pool import PoolClosedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import TurnResult

from batch_support import write_dataset


@pytest.fixture
def autojump_clock() -> MockClock:
    return MockClock(autojump_threshold=0)


def turn(session_id: str) -> TurnResult:
    return TurnResult(session_id=session_id, message_id="m", final_response="ok", finish_reason="completed", error=None,
                      events=[{"type": "done"}], notifications=(), subagents=(), duration=1.0)


async def test_workers_start_first_then_grow_per_progress_and_all_when_opened() -> None:
    ramp = StartRamp(7, first=2, grow=2)
    started: list[int] = []

    async def worker(index: int) -> None:
        await ramp.wait(index)
        started.append(index)

    async with trio.open_nursery() as nursery:
        for index in range(7):
            nursery.start_soon(worker, index)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(started) == [0, 1]
        ramp.progress()
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(started) == [0, 1, 2, 3]
        ramp.open_all()
    assert sorted(started) == list(range(7)) and ramp.open
    ramp.progress()  # open: nothing changes
    assert ramp.allowed == 7
    with pytest.raises(ValueError):
        StartRamp(3, first=0)


class FakePool:
    """``size`` runtimes whose readiness the test sets (``wait_live`` as RuntimePool's)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.live = 1
        self.closed = False
        self._changed = trio.Event()

    def ready(self) -> None:
        self.live += 1
        self._changed.set()
        self._changed = trio.Event()

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    async def wait_live(self, count: int) -> None:
        while self.live < count:
            if self.closed:
                raise PoolClosedError("closing")
            await self._changed.wait()


class PoolRunnerLike:
    def __init__(self, pool: FakePool) -> None:
        self.pool = pool


async def test_each_further_runtime_ready_lets_more_workers_start() -> None:
    ramp = StartRamp(64, first=2, grow=2)
    pool = FakePool(3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(grow_on_ready, ramp, PoolRunnerLike(pool))
        await trio.testing.wait_all_tasks_blocked()
        assert ramp.allowed == 2  # the first runtime ready: the first two
        pool.ready()
        await trio.testing.wait_all_tasks_blocked()
        assert ramp.allowed == 4  # the second
        pool.ready()
    assert ramp.allowed == 6  # the third; then the watcher ends
    closing = StartRamp(64)
    closed_pool = FakePool(2)
    closed_pool.close()
    await grow_on_ready(closing, PoolRunnerLike(closed_pool))  # a closing pool ends it quietly
    assert closing.allowed == 2
    await grow_on_ready(closing, object())  # a runner without a pool: nothing to wait for


class GatedRunner:
    """Each attempt records its start, waits for the test's go, makes one "model call" at the
    run's gateway (its limiter, as the gateway does for a new call), then waits to end."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.max_lost = 1
        self.gateway: Gateway | None = None
        self.started: list[str] = []
        self.call: dict[str, trio.Event] = {}
        self.end: dict[str, trio.Event] = {}

    async def attempt(self, item: BatchItem, session_id: str) -> Attempt:
        self.started.append(item.id)
        await self.call.setdefault(item.id, trio.Event()).wait()
        assert self.gateway is not None
        ticket = await self.gateway.limiter.acquire()
        self.gateway.limiter.release(ticket, "ok")
        await self.end.setdefault(item.id, trio.Event()).wait()
        return Attempt(session_id=session_id, turn=turn(session_id))

    def pending_approvals(self) -> int:
        return 0


class InProcess:
    in_process = True

    def __init__(self, runner: GatedRunner) -> None:
        self.runner = runner

    @asynccontextmanager
    async def open(self, spec: Any, options: BatchOptions) -> AsyncIterator[GatedRunner]:
        yield self.runner


async def test_a_batch_with_a_gateway_starts_items_as_the_runtimes_reach_the_model(
    autojump_clock: MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = GatedRunner(capacity=8)
    real_gateway_for = runner_module.gateway_for

    @asynccontextmanager
    async def capturing(spec: Any, options: Any) -> AsyncIterator[Any]:
        async with real_gateway_for(spec, options) as (gateway, routed):
            runner.gateway = gateway
            yield gateway, routed

    monkeypatch.setattr(runner_module, "gateway_for", capturing)
    data = write_dataset(tmp_path / "ds.jsonl", [{"id": f"i{n}", "prompt": f"p{n}"} for n in range(10)])
    spec = RuntimeSpec(dsh_home=tmp_path / "home", cwd=tmp_path, base_url="http://127.0.0.1:9", api_key="k")
    options = BatchOptions(concurrency=8, progress="none", gateway=GatewayOptions(), sandbox="none")

    async def release(item: str, event: str) -> None:
        getattr(runner, event).setdefault(item, trio.Event()).set()
        await trio.testing.wait_all_tasks_blocked()

    async with trio.open_nursery() as nursery:
        summary: list[Any] = []

        async def run() -> None:
            summary.append(await run_batch(data, tmp_path / "out.jsonl", spec, options, executor=InProcess(runner)))

        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        assert runner.started == ["i0", "i1"]  # not all eight at once
        await release("i0", "call")  # i0's session reached the model: two more start
        assert runner.started == ["i0", "i1", "i2", "i3"]
        await release("i0", "end")  # i0 ended: two more, and i0's worker takes the next item
        assert runner.started == ["i0", "i1", "i2", "i3", "i4", "i5", "i6"]
        for n in range(10):
            await release(f"i{n}", "call")
        assert runner.started == [f"i{n}" for n in range(9)]  # every worker started: 8 in flight (i0 ended)
        for n in range(10):
            await release(f"i{n}", "end")
    assert summary[0].ok == 10 and summary[0].error == 0
    assert runner.gateway is not None and runner.gateway.limiter.on_call is None  # unhooked after the run


async def test_without_a_gateway_every_worker_starts_at_once(autojump_clock: MockClock, tmp_path: Path) -> None:
    runner = GatedRunner(capacity=8)
    data = write_dataset(tmp_path / "ds.jsonl", [{"id": f"i{n}", "prompt": f"p{n}"} for n in range(8)])
    spec = RuntimeSpec(dsh_home=tmp_path / "home", cwd=tmp_path, base_url="http://127.0.0.1:9", api_key="k")
    options = BatchOptions(concurrency=8, progress="none", gateway=None, sandbox="none")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_batch(data, tmp_path / "out.jsonl", spec, options, executor=InProcess(runner)))
        await trio.testing.wait_all_tasks_blocked()
        assert len(runner.started) == 8
        nursery.cancel_scope.cancel()


async def test_a_ramp_that_runs_out_of_items_lets_the_waiting_workers_end(autojump_clock: MockClock, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Items that never call the model (cache hits, failures): each end lets more start, and
    the worker that finds none left opens the ramp, so the run ends."""

    class NoCalls(GatedRunner):
        async def attempt(self, item: BatchItem, session_id: str) -> Attempt:
            self.started.append(item.id)
            return Attempt(session_id=session_id, turn=turn(session_id))

    runner = NoCalls(capacity=16)
    data = write_dataset(tmp_path / "ds.jsonl", [{"id": f"i{n}", "prompt": f"p{n}"} for n in range(5)])
    spec = RuntimeSpec(dsh_home=tmp_path / "home", cwd=tmp_path, base_url="http://127.0.0.1:9", api_key="k")
    options = BatchOptions(concurrency=16, progress="none", gateway=GatewayOptions(), sandbox="none")
    with trio.fail_after(60):
        summary = await run_batch(data, tmp_path / "out.jsonl", spec, options, executor=InProcess(runner))
    assert summary.ok == 5 and runner.started == [f"i{n}" for n in range(5)]

"""The run loop against executors of our own (the protocol, not the pool): a place lost and
the item run again without spending a retry, an item that keeps losing its place given up,
retries with the backoff, capacity bounding the attempts in flight, and the whole TurnResult
of the attempt reaching the loop. Virtual time throughout."""

from __future__ import annotations

import itertools
from collections import defaultdict
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.batch import Attempt, AttemptRunner, BatchItem, BatchOptions, Executor, run_batch
from dsh_orchestra.batch._runner import PLACE_LOST
from dsh_orchestra.session import TurnResult

from batch_support import by_id, write_dataset


def turn(session_id: str, text: str, finish: str = "completed") -> TurnResult:
    return TurnResult(session_id=session_id, message_id="m", final_response=text, finish_reason=finish, error=None,
                      events=[{"type": "done"}], notifications=(), subagents=(), duration=1.0)


class ScriptedRunner:
    """Attempts follow a per-item script: "lost", "retry" (a retryable failure), "fatal", or "ok"."""

    def __init__(self, script: dict[str, list[str]], capacity: int = 2, max_lost: int = 3) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.capacity = capacity
        self.max_lost = max_lost
        self.calls: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.in_flight = 0
        self.most_in_flight = 0

    async def attempt(self, item: BatchItem, session_id: str) -> Attempt:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.calls[item.id].append((trio.current_time(), session_id))
            await trio.sleep(1.0)
            step = (self.script.get(item.id) or ["ok"]).pop(0) if self.script.get(item.id) else "ok"
            if step == "lost":
                return Attempt.failed(session_id, ConnectionError("actor died"), retryable=False, lost=True)
            if step == "retry":
                return Attempt.failed(session_id, TimeoutError("slow"), retryable=True)
            if step == "fatal":
                return Attempt.failed(session_id, ValueError("bad"), retryable=False)
            return Attempt(session_id=session_id, turn=turn(session_id, f"answer {item.id}"))
        finally:
            self.in_flight -= 1

    def pending_approvals(self) -> int:
        return 0


class Scripted:
    def __init__(self, runner: ScriptedRunner) -> None:
        self.runner = runner

    @asynccontextmanager
    async def open(self, spec: Any, options: BatchOptions) -> AsyncIterator[ScriptedRunner]:
        yield self.runner


def dataset(tmp_path: Path, count: int) -> Path:
    return write_dataset(tmp_path / "ds.jsonl", [{"id": f"i{n}", "prompt": f"p{n}"} for n in range(count)])


def test_the_shipped_executors_follow_the_protocol() -> None:
    from dsh_orchestra.batch import PoolExecutor
    from dsh_orchestra.scale import RayExecutor

    assert isinstance(PoolExecutor(), Executor) and isinstance(RayExecutor(), Executor)
    assert isinstance(ScriptedRunner({}), AttemptRunner)


async def test_a_lost_place_runs_the_item_again_without_spending_a_retry(autojump_clock: MockClock, tmp_path: Path) -> None:
    runner = ScriptedRunner({"i0": ["lost", "lost", "ok"]})
    summary = await run_batch(dataset(tmp_path, 3), tmp_path / "r.jsonl", None, BatchOptions(retries=0, progress="none"),
                              executor=Scripted(runner))
    results = by_id(tmp_path / "r.jsonl")
    assert {r["status"] for r in results.values()} == {"ok"}
    assert results["i0"]["attempts"] == 3 and results["i0"]["final_response"] == "answer i0"
    assert results["i0"]["duration_s"] == pytest.approx(3.0)  # no backoff after a lost place
    assert len({session for _, session in runner.calls["i0"]}) == 3  # a fresh session each time
    assert results["i0"]["session_id"] == runner.calls["i0"][-1][1]
    assert summary.retries == 2 and summary.ok == 3


async def test_an_item_that_keeps_losing_its_place_is_given_up(autojump_clock: MockClock, tmp_path: Path) -> None:
    runner = ScriptedRunner({"i0": ["lost"] * 5}, max_lost=2)
    summary = await run_batch(dataset(tmp_path, 2), tmp_path / "r.jsonl", None, BatchOptions(progress="none"),
                              executor=Scripted(runner))
    results = by_id(tmp_path / "r.jsonl")
    assert results["i0"]["status"] == "error" and results["i0"]["error"]["type"] == PLACE_LOST
    assert results["i0"]["attempts"] == 2 and "actor died" in results["i0"]["error"]["message"]
    assert results["i0"]["final_response"] is None
    assert len(runner.calls["i0"]) == 2 and results["i1"]["status"] == "ok"
    assert (summary.retries, summary.error, summary.ok) == (1, 1, 1)


async def test_retryable_failures_back_off_and_others_do_not_retry(autojump_clock: MockClock, tmp_path: Path) -> None:
    runner = ScriptedRunner({"i0": ["retry", "retry", "ok"], "i1": ["fatal"], "i2": ["retry"] * 5})
    options = BatchOptions(retries=2, retry_backoff=2.0, retry_jitter=0.0, progress="none")
    summary = await run_batch(dataset(tmp_path, 3), tmp_path / "r.jsonl", None, options, executor=Scripted(runner))
    results = by_id(tmp_path / "r.jsonl")
    starts = [t - runner.calls["i0"][0][0] for t, _ in runner.calls["i0"]]
    assert starts == [0.0, 3.0, 8.0]  # 1 s attempt, 2 s pause, 1 s attempt, 4 s pause
    assert results["i0"]["status"] == "ok" and results["i0"]["attempts"] == 3
    assert results["i1"]["attempts"] == 1 and results["i1"]["error"] == {"type": "ValueError", "message": "bad"}
    assert results["i2"]["attempts"] == 3 and results["i2"]["error"]["type"] == "TimeoutError"
    assert summary.retries == 4


async def test_backoff_is_capped_and_jittered_downward(autojump_clock: MockClock, tmp_path: Path) -> None:
    runner = ScriptedRunner({"i0": ["retry"] * 6})
    options = BatchOptions(retries=5, retry_backoff=1.0, retry_backoff_max=3.0, retry_jitter=0.5, progress="none")
    await run_batch(dataset(tmp_path, 1), tmp_path / "r.jsonl", None, options, executor=Scripted(runner))
    times = [t for t, _ in runner.calls["i0"]]
    pauses = [b - a - 1.0 for a, b in itertools.pairwise(times)]
    plain = [1.0, 2.0, 3.0, 3.0, 3.0]
    assert len(pauses) == 5
    for pause, most in zip(pauses, plain, strict=True):
        assert most * 0.5 - 1e-9 <= pause <= most + 1e-9


async def test_capacity_bounds_the_attempts_in_flight(autojump_clock: MockClock, tmp_path: Path) -> None:
    runner = ScriptedRunner({}, capacity=3)
    await run_batch(dataset(tmp_path, 10), tmp_path / "r.jsonl", None, BatchOptions(progress="none"),
                    executor=Scripted(runner))
    assert runner.most_in_flight == 3
    assert len(by_id(tmp_path / "r.jsonl")) == 10

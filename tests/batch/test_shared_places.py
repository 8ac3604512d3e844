"""The run loop asks a runner what it shares (``SharedPlaces``: a lease for judges, the server
version), never which executor it is; a runner without those members still runs."""

from __future__ import annotations

import ast
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import trio
from trio.testing import MockClock

import dsh_orchestra.batch._runner as runner_module
from dsh_orchestra.batch import Attempt, AttemptRunner, BatchItem, BatchOptions, SharedPlaces, run_batch
from dsh_orchestra.batch._executor import runner_lease, runner_server_version
from dsh_orchestra.session import TurnResult

from batch_support import write_dataset


class Runner:
    capacity = 2
    max_lost = 1

    async def attempt(self, item: BatchItem, session_id: str, *, workspace: str | None = None,
                      alone: bool = False) -> Attempt:
        await trio.sleep(1.0)
        return Attempt(session_id=session_id, turn=TurnResult(
            session_id=session_id, message_id="m", final_response="ok", finish_reason="completed", error=None,
            events=[], notifications=(), subagents=(), duration=1.0))

    def pending_approvals(self) -> int:
        return 0


class SharingRunner(Runner):
    lease = None

    @property
    def server_version(self) -> str:
        return "9.9.9"


class Opener:
    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    @asynccontextmanager
    async def open(self, spec: Any, options: BatchOptions) -> AsyncIterator[Runner]:
        yield self.runner


def test_the_run_loop_names_no_concrete_executor() -> None:
    tree = ast.parse(Path(runner_module.__file__).read_text(encoding="utf-8"))
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert not names & {"PoolExecutor", "PoolRunner", "RayExecutor", "RayRunner"}
    assert not [node for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                and any(isinstance(a, ast.Name) and a.id == "runner" for a in node.args)]


def test_shared_places_are_optional_members() -> None:
    plain, sharing = Runner(), SharingRunner()
    assert isinstance(plain, AttemptRunner) and not isinstance(plain, SharedPlaces)
    assert isinstance(sharing, AttemptRunner) and isinstance(sharing, SharedPlaces)
    assert runner_lease(plain) is None and runner_server_version(plain) is None
    assert runner_server_version(sharing) == "9.9.9"


async def test_the_summary_takes_the_server_version_the_runner_shares(autojump_clock: MockClock, tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "ds.jsonl", [{"id": f"i{n}", "prompt": "p"} for n in range(3)])
    shared = await run_batch(data, tmp_path / "a.jsonl", None, BatchOptions(), executor=Opener(SharingRunner()))
    plain = await run_batch(data, tmp_path / "b.jsonl", None, BatchOptions(), executor=Opener(Runner()))
    assert shared.ok == plain.ok == 3
    assert shared.run is not None and shared.run["runtime"]["server_version"] == "9.9.9"
    assert plain.run is not None and plain.run["runtime"]["server_version"] is None

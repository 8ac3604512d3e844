"""Fixtures of the viewer tests.

* ``view_run`` (session): ONE real batch on the simulator with two epochs, a scorer, targets
  and choices, an approval policy, subagents, transcripts, an audit log and a summary, run
  as the ``dsh-orchestra`` command from another directory than the viewer's.
* ``viewer``: starts the viewer in this process (a thread running trio) over the paths given;
  stopped after the test. ``browser``: the system Chromium with Playwright.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))

from playwright_browser import Browser, open_browser  # noqa: E402
from report_support import POLICY, SCRIPT, cli  # noqa: E402
from view_support import RunningViewer, ViewRun, view_items  # noqa: E402


@pytest.fixture(scope="session")
def view_run(tmp_path_factory: pytest.TempPathFactory) -> ViewRun:
    directory = tmp_path_factory.mktemp("view-run")
    work = directory / "work"
    work.mkdir()
    (work / "scenario.toml").write_text(SCRIPT, encoding="utf-8")
    (work / "policy.toml").write_text(POLICY, encoding="utf-8")
    dataset = work / "dataset.jsonl"
    dataset.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in view_items()))
    (directory / "runs").mkdir()
    run = cli(
        "batch", "dataset.jsonl", "--out", "../runs/results.jsonl", "--runtime", "sim", "--script", "scenario.toml",
        "--policy", "policy.toml", "--audit", "audit.jsonl", "--summary", "../runs/summary.json", "--transcripts", "transcripts",
        "--score", "includes", "--epochs", "2", "--retries", "0", "--no-progress", cwd=work, timeout=300,
    )
    assert run.returncode == 1, run.stderr  # the failing items end in error
    return ViewRun(directory=directory, dataset=dataset, results=directory / "runs" / "results.jsonl",
                   summary=directory / "runs" / "summary.json", transcripts=work / "transcripts", audit=work / "audit.jsonl")


@pytest.fixture
def browser() -> Iterator[Browser]:
    with open_browser() as instance:
        yield instance


@pytest.fixture
def viewer() -> Iterator[Callable[..., RunningViewer]]:
    started: list[RunningViewer] = []

    def start(*paths: Path, control: Any = None) -> RunningViewer:
        instance = RunningViewer(list(paths), control)
        started.append(instance)
        return instance

    yield start
    for instance in started:
        instance.stop()

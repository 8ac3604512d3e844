"""User scorers in a box (issue 31, part 1 and 2): worker processes, timeouts, every exception
the scorer's own, return values checked and capped, stdout kept clean, forks left behind
killed, regexes bounded."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import trio

from dsh_orchestra.eval import (
    EvalItem, EvalResult, Regex, Score, ScorerCallError, ScoreValueError, ScorerSpec, bind_scorers, open_scorer_workers,
    score_attempt,
)
from dsh_orchestra.eval._checked import CUT_MARK, MAX_METADATA_BYTES, MAX_TEXT_BYTES, checked_record

from eval_support import run_cli, write_jsonl

ITEM = EvalItem(id="a", prompt="hi", target="x")
RESULT = EvalResult(final_response="x")

SCORERS = """\
import os, sys, time
from dsh_orchestra.eval import Score

def exits(item, result):
    sys.exit(3)

def interrupts(item, result):
    raise KeyboardInterrupt

def generator_exit(item, result):
    raise GeneratorExit

async def async_exits(item, result):
    sys.exit(4)

def a_set(item, result):
    return {1, 2}

def an_object(item, result):
    return Score(1, metadata={"x": object()})

def prints(item, result):
    print("hello from the scorer")
    os.write(1, b"and from its file descriptor\\n")
    return True

def hangs(item, result):
    time.sleep(600)

def dies(item, result):
    os._exit(9)

def forks(item, result):
    pid = os.fork()
    if pid == 0:
        with open(os.environ["FORK_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(600)
        os._exit(0)
    return 1

def fine(item, result):
    return Score(0.5, answer=result.final_response, explanation="ok")
"""


@pytest.fixture
def scorers_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "boxed.py").write_text(SCORERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FORK_PIDS", str(tmp_path / "fork_pids"))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("boxed", None)
    return tmp_path


# ---- return values -------------------------------------------------------------------------

def test_numbers_bools_and_numpy_scalars_are_values() -> None:
    numpy = pytest.importorskip("numpy")
    assert checked_record(numpy.int64(1), "s")["value"] == 1.0
    assert checked_record(numpy.float32(0.5), "s")["value"] == 0.5
    assert checked_record(numpy.bool_(True), "s")["value"] == 1.0
    assert checked_record(Score(numpy.float64(0.25)), "s")["value"] == 0.25
    assert checked_record(False, "s")["value"] == 0.0


@pytest.mark.parametrize("returned", [{1, 2}, "1", None, [1], Score(1, metadata={"x": object()}),
                                      Score(1, metadata={"x": {1, 2}}), Score(1, metadata=["not a dict"])])  # type: ignore[arg-type]
def test_what_json_cannot_encode_is_the_scorers_error(returned: object) -> None:
    with pytest.raises(ScoreValueError, match="'s'"):
        checked_record(returned, "s")


def test_texts_are_cut_and_big_metadata_replaced() -> None:
    record = checked_record(Score(1, answer="é" * MAX_TEXT_BYTES, explanation="e" * 1_000_000, metadata={"m": "m" * MAX_METADATA_BYTES}), "s")
    for key in ("answer", "explanation"):
        text = record[key]
        assert len(text.encode()) <= MAX_TEXT_BYTES + len(CUT_MARK) + 10 and "[... cut:" in text
    assert record["explanation"].endswith(CUT_MARK.format(more=1_000_000 - MAX_TEXT_BYTES))
    assert set(record["metadata"]) == {"error"} and "cap" in record["metadata"]["error"]
    small = checked_record(Score(1, answer="a", explanation="b", metadata={"k": [1, "2"]}), "s")
    assert small == {"value": 1.0, "answer": "a", "explanation": "b", "metadata": {"k": [1, "2"]}}


# ---- the worker pool -----------------------------------------------------------------------

async def test_every_failure_in_a_worker_is_that_calls_error(scorers_module: Path) -> None:
    async with open_scorer_workers(1) as workers:
        assert workers is not None
        expected = {"exits": "SystemExit: 3", "interrupts": "KeyboardInterrupt", "generator_exit": "GeneratorExit",
                    "async_exits": "SystemExit: 4", "a_set": "returned set", "an_object": "JSON cannot encode"}
        for name, text in expected.items():
            with pytest.raises(ScorerCallError, match=text):
                await workers.call(f"boxed:{name}", ITEM, RESULT, timeout=30)
        assert await workers.call("boxed:fine", ITEM, RESULT, timeout=30) == {
            "value": 0.5, "answer": "x", "explanation": "ok"}
        assert workers.started == 1  # one worker served them all


async def test_a_hung_or_dead_worker_is_killed_and_replaced(scorers_module: Path) -> None:
    async with open_scorer_workers(1) as workers:
        assert workers is not None
        started = time.monotonic()
        with pytest.raises(ScorerCallError, match="did not finish within 0.5 s"):
            await workers.call("boxed:hangs", ITEM, RESULT, timeout=0.5)
        assert time.monotonic() - started < 30  # the start is not on the clock; the call is
        with pytest.raises(ScorerCallError, match="exited"):
            await workers.call("boxed:dies", ITEM, RESULT, timeout=30)
        assert (await workers.call("boxed:fine", ITEM, RESULT, timeout=30))["value"] == 0.5
        assert workers.started == 3 and workers.killed == 2


async def test_what_a_scorer_forks_is_gone_when_the_pool_closes(scorers_module: Path) -> None:
    async with open_scorer_workers(1) as workers:
        assert workers is not None
        assert (await workers.call("boxed:forks", ITEM, RESULT, timeout=30))["value"] == 1.0
        assert (await workers.call("boxed:fine", ITEM, RESULT, timeout=30))["value"] == 0.5  # the fork did not answer
        await _until(lambda: _written(scorers_module / "fork_pids"))  # the child has written its pid (not only opened the file)
    pid = int((scorers_module / "fork_pids").read_text().split()[0])
    await _until(lambda: not _alive(pid))


async def _until(condition: Callable[[], bool]) -> None:
    """Poll a condition another process makes true (no event to wait on), at most 30 s."""
    with trio.fail_after(30):
        while not condition():  # noqa: ASYNC110 - another process's doing: nothing to wait on
            await trio.sleep(0.05)


def _written(path: Path) -> bool:
    """A whole line in the file (its writer opens it first, then writes)."""
    try:
        return path.read_text().endswith("\n")
    except FileNotFoundError:
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


# ---- in-process (--scorer-workers 0) and through score_attempt -----------------------------

def _specs(*names: str, **settings: float) -> list[ScorerSpec]:
    return [ScorerSpec(f"boxed:{n}", "python", {"function": f"boxed:{n}", **settings}) for n in names]


@pytest.mark.parametrize("pool", [0, 1])
async def test_score_attempt_records_every_failure_and_goes_on(scorers_module: Path, pool: int) -> None:
    names = ("exits", "interrupts", "generator_exit", "async_exits", "a_set", "an_object", "fine")
    async with open_scorer_workers(pool) as workers:
        bound = bind_scorers(_specs(*names), workers=workers, timeout=30)
        scores = (await score_attempt(bound, ITEM, RESULT)).scores
    assert scores["boxed:fine"]["value"] == 0.5
    for name in names[:-1]:
        assert scores[f"boxed:{name}"]["value"] is None and scores[f"boxed:{name}"]["explanation"]
    assert scores["boxed:exits"]["explanation"] == "SystemExit: 3"
    assert scores["boxed:interrupts"]["explanation"] == "KeyboardInterrupt"


async def test_in_process_a_blocking_sync_scorer_is_abandoned_at_its_timeout(scorers_module: Path) -> None:
    release = threading.Event()

    def blocks(item: object, result: object) -> int:
        release.wait(60)
        return 1

    spec = ScorerSpec("blocks", "python", {"function": blocks, "timeout": 0.3})
    bound = bind_scorers([spec], timeout=60)
    try:
        with trio.fail_after(20):  # the event loop kept running: the timeout fired
            scores = (await score_attempt(bound, ITEM, RESULT)).scores
    finally:
        release.set()
    assert scores["blocks"]["value"] is None and "did not finish within 0.3 s" in scores["blocks"]["explanation"]


async def test_a_scorers_own_timeout_wins(scorers_module: Path) -> None:
    async with open_scorer_workers(1) as workers:
        bound = bind_scorers(_specs("hangs", timeout=0.5), workers=workers, timeout=600)
        with trio.fail_after(60):
            scores = (await score_attempt(bound, ITEM, RESULT)).scores
    assert "did not finish within 0.5 s" in scores["boxed:hangs"]["explanation"]


# ---- part 2: regexes -----------------------------------------------------------------------

async def test_a_catastrophic_regex_is_that_scorers_error() -> None:
    # "(a|aa)+$" backtracks in the regex package too ("^(a+)+$" it sees through: no match, at once)
    bound = bind_scorers([ScorerSpec("regex:bad", "regex", {"pattern": "(a|aa)+$", "timeout": 0.3})])
    with trio.fail_after(20):
        scores = (await score_attempt(bound, ITEM, EvalResult(final_response="a" * 60 + "!"))).scores
    assert scores["regex:bad"]["value"] is None and "TimeoutError" in scores["regex:bad"]["explanation"]
    with pytest.raises(TimeoutError):  # called directly, it is bounded too
        Regex("(a|aa)+$", timeout=0.2)(ITEM, EvalResult(final_response="a" * 60 + "!"))
    quick = bind_scorers([ScorerSpec("regex:ok", "regex", {"pattern": "a+", "fullmatch": True})])
    assert (await score_attempt(quick, ITEM, EvalResult(final_response="aaa"))).scores["regex:ok"]["value"] == 1.0


# ---- the CLI -------------------------------------------------------------------------------

def test_batch_stdout_holds_only_the_summary_and_scorer_failures_are_counted(scorers_module: Path) -> None:
    write_jsonl(scorers_module / "data.jsonl", [{"id": f"q{i}", "prompt": "hi", "target": "x"} for i in range(3)])
    run = run_cli(["batch", "data.jsonl", "--out", "r.jsonl", "--no-progress", "--score", "boxed:prints",
                   "--score", "boxed:exits", "--score", "boxed:interrupts", "--score", "boxed:hangs",
                   "--scorer-timeout", "1", "--json"], cwd=scorers_module)
    assert run.returncode == 1, run.stderr  # three scorers produced no value on any item (docs/batch.md#exit-status)
    summary = json.loads(run.stdout)
    assert summary["ok"] == 3 and "hello from the scorer" in run.stderr and "from its file descriptor" in run.stderr
    lines = [json.loads(line) for line in (scorers_module / "r.jsonl").read_text().splitlines()]
    assert [line["scores"]["boxed:prints"]["value"] for line in lines] == [1.0] * 3
    assert all(line["scores"]["boxed:hangs"]["value"] is None for line in lines)


@pytest.mark.parametrize(("flag", "value"), [("--scorer-workers", "-1"), ("--scorer-timeout", "0"), ("--scorer-timeout", "nan")])
def test_bad_scorer_flags_exit_2(tmp_path: Path, flag: str, value: str) -> None:
    write_jsonl(tmp_path / "data.jsonl", [{"id": "q", "prompt": "hi"}])
    run = run_cli(["batch", "data.jsonl", "--out", "r.jsonl", flag, value], cwd=tmp_path)
    assert run.returncode == 2 and flag in run.stderr and "Traceback" not in run.stderr


def test_scoring_file_timeout_is_checked(tmp_path: Path) -> None:
    from dsh_orchestra.eval import ScoringError, parse_scoring

    assert parse_scoring({"scorers": {"s": {"kind": "python", "function": "m:f", "timeout": 5}}}).scorers["s"].settings["timeout"] == 5.0
    with pytest.raises(ScoringError, match="timeout must be a positive number"):
        parse_scoring({"scorers": {"s": {"kind": "python", "function": "m:f", "timeout": -1}}})


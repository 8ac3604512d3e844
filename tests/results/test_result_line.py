"""ResultLine (the typed result line), the one reader ``read_results`` and the one tally."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

import dsh_orchestra
from dsh_orchestra.batch import Tally
from dsh_orchestra.eval import EvalTally, line_fields, make_plan
from dsh_orchestra.eval import Price
from dsh_orchestra.results import (
    CONVERTER, ApprovalRecord, QuestionRecord, ResultError, ResultLine, ResultsFileError, SubagentRecord,
    Usage, read_results,
)

WRITTEN = (b'{"id":"a","status":"ok","session_id":"s","final_response":"Paris","finish_reason":"completed",'
           b'"subagents":[{"child_session_id":"c","status":"ok","stop_reason":"completed","text":"t"}],'
           b'"approvals":[{"tool_name":"bash","call_id":"k","outcome":"rejected","rule":"default"}],'
           b'"questions":[{"id":"q","question":"?","outcome":"answered","selected":["x"],"custom":null,"answered_by":"auto"}],'
           b'"attempts":2,"duration_s":0.5,"error":null,"metadata":{"kind":"geo"},"epoch":2,'
           b'"scores":{"exact":{"value":1.0,"answer":null,"explanation":null},"j":{"value":null,"answer":"x","explanation":"e","metadata":{"m":1}}},'
           b'"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12},"cost_usd":0.5,'
           b'"judge_usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2},"judge_cost_usd":0.25,"workspace":"/w"}')


def test_the_root_exports_it() -> None:
    assert dsh_orchestra.ResultLine is ResultLine and ResultLine.__module__ == "dsh_orchestra"


def test_typed_fields_of_a_written_line() -> None:
    line = ResultLine.from_json(orjson.loads(WRITTEN))
    assert line.subagents == (SubagentRecord("c", "ok", "completed", "t"),)
    assert line.approvals == (ApprovalRecord("bash", "k", "rejected", "default"),)
    assert line.questions == (QuestionRecord("q", "?", "answered", ("x",), None, "auto"),)
    assert line.error is None and line.usage == Usage(10, 2, 12) and line.judge_usage == Usage(1, 1, 2)
    assert line.scores == {"exact": {"value": 1.0, "answer": None, "explanation": None},
                           "j": {"value": None, "answer": "x", "explanation": "e", "metadata": {"m": 1}}}
    assert line.score_value("exact") == 1.0 and line.score_value("absent") is None
    assert (line.epoch, line.cost_usd, line.judge_cost_usd, line.workspace) == (2, 0.5, 0.25, "/w")


def test_built_line_encodes_to_the_same_bytes_through_the_converter() -> None:
    read = ResultLine.from_json(orjson.loads(WRITTEN))
    built = ResultLine(**{f: getattr(read, f) for f in attrs_fields() if f != "source"})
    assert built == read and built.source is None
    assert orjson.dumps(built.to_json()) == WRITTEN
    assert orjson.dumps(CONVERTER.unstructure(built)) == WRITTEN
    assert CONVERTER.structure(orjson.loads(WRITTEN), ResultLine) == read


def attrs_fields() -> list[str]:
    import attrs

    return [f.name for f in attrs.fields(ResultLine)]


def test_a_read_line_gives_back_what_it_was_read_from() -> None:
    """Keys of later versions (and number spellings) survive a rewrite."""
    raw = {"id": "a", "status": "error", "later": {"x": 1}, "duration_s": 1, "error": {"type": "T", "message": "m"}}
    line = ResultLine.from_json(raw)
    assert line.extra == {"later": {"x": 1}} and line.duration_s == 1.0 and line.error == ResultError("T", "m")
    assert orjson.dumps(line.to_json()) == orjson.dumps(raw)
    assert line.usage is None and line.epoch_number == 1


def test_of_attempt_is_the_old_result_line_with_the_evaluation_fields() -> None:
    turn = SimpleNamespace(
        final_response="hi", finish_reason="completed",
        subagents=(SimpleNamespace(child_session_id="c", status="ok", stop_reason="completed", text="t"),),
        approvals=(SimpleNamespace(tool_name="bash", call_id="k", outcome="rejected", rule="default"),),
        questions=(SimpleNamespace(question_id="q", question="?", outcome="answered", selected=["x"], custom=None, answered_by="auto"),),
    )
    plan = make_plan(["exact"], epochs=2, prices=None)
    usage = Usage(10, 2, 12)
    scores = {"exact": {"value": 1.0, "answer": None, "explanation": None}}
    fields = line_fields(plan, usage, scores, None, 2, Price(1.0, 2.0))
    line = ResultLine.of_attempt("a", status="ok", session_id="s", turn=turn, attempts=1, duration_s=0.1234567,  # type: ignore[arg-type]
                                 error=None, metadata={}, epoch=2, scores=scores, usage=usage,
                                 cost_usd=Price(1.0, 2.0).cost(usage))
    data = line.to_json()
    assert list(data)[:12] == ["id", "status", "session_id", "final_response", "finish_reason", "subagents", "approvals",
                               "questions", "attempts", "duration_s", "error", "metadata"]
    assert data["duration_s"] == 0.123457 and data["questions"][0]["selected"] == ["x"]
    assert {k: data[k] for k in fields} == fields and list(fields) == ["epoch", "scores", "usage", "cost_usd"]
    failed = ResultLine.of_attempt("b", status="error", session_id=None, turn=None, attempts=3, duration_s=1.0,
                                   error={"type": "TimeoutError", "message": "m"}, metadata={"k": 1})
    assert failed.to_json()["error"] == {"type": "TimeoutError", "message": "m"} and "usage" not in failed.to_json()


def _write(path: Path, rows: list[Any], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows) + tail)
    return path


def test_read_results_streams_and_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.jsonl", [{"id": "a", "status": "ok"}, {"id": "b", "status": "error"}], b'{"id": "c", "st')
    before = path.read_bytes()
    stream = read_results(path)
    first = next(iter(stream))
    assert first.id == "a" and stream.number == 1
    lines = list(read_results(path))
    assert [line.id for line in lines] == ["a", "b"] and path.read_bytes() == before
    repaired = read_results(path, repair=True)
    assert len(list(repaired)) == 2 and repaired.torn == len(b'{"id": "c", "st') and repaired.count == 2
    assert path.read_bytes() == before[: -repaired.torn]
    assert list(read_results(tmp_path / "absent.jsonl")) == []


def test_read_results_refuses_what_is_not_a_result(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.jsonl", [{"id": "a", "status": "ok"}, {"id": "b"}, {"id": "c", "status": "ok"}])
    with pytest.raises(ResultsFileError, match="line 2 is not a result line: missing required field 'status'") as caught:
        list(read_results(path, repair=True))
    assert caught.value.line == 2 and caught.value.detail is None
    bad_json = tmp_path / "j.jsonl"
    bad_json.write_bytes(b'{"id": "a", "status": "ok"}\nnot json\n')
    with pytest.raises(ResultsFileError, match="line 2 is not a result line: not valid JSON") as caught:
        list(read_results(bad_json))
    assert caught.value.detail is not None
    assert [line.id for line in read_results(path, check=None)] == ["a", "b", "c"]


def test_one_tally_counts_summary_metrics_and_budget_once() -> None:
    plan = make_plan(["exact"], group_by="kind", prices=None)
    tally = Tally(plan)
    lines = [ResultLine.from_json(orjson.loads(WRITTEN)),
             ResultLine(id="b", status="error", finish_reason="error", duration_s=2.0, usage=Usage(5, 5, 10), cost_usd=1.0,
                        scores={"exact": {"value": None, "answer": None, "explanation": "x"}}, metadata={"kind": "math"})]
    tally.add(lines[0])
    tally.add(lines[1], this_run=True)
    assert (tally.ok, tally.error, list(tally.durations)) == (1, 1, [0.5, 2.0])
    assert tally.usage == Usage(15, 7, 22) and tally.cost_usd == 1.5 and tally.judge_usage == Usage(1, 1, 2)
    assert (tally.run_lines, tally.run_tokens, tally.run_cost) == (1, 10, 1.0)  # what the budgets read
    assert tally.finish_reasons == {"completed": 1, "error": 1} and tally.approval_outcomes == {"rejected": 1}
    assert tally.to_json()["scores"]["exact"]["n"] == 1 and set(tally.to_json()["groups"]) == {"geo", "math"}
    summary = tally.summary(total=2, resumed=1, processed=1, duration_s=1.0, retries=0)
    assert summary.p50_s == 1.25 and summary.ok == 1
    assert isinstance(tally, EvalTally)

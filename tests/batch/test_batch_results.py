"""The results file: whole lines, torn-tail repair, and the summary arithmetic."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_orchestra.batch import ResultsWriter, Tally, read_results, summarize
from dsh_orchestra.batch._summary import percentile
from dsh_orchestra.batch._summary import Outcome


def line(item_id: str, **extra: object) -> dict[str, object]:
    return {"id": item_id, "status": "ok", "finish_reason": "completed", "duration_s": 1.0, "approvals": [], **extra}


def test_writer_appends_whole_lines_and_reader_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with ResultsWriter(path) as writer:
        writer.write(line("a"))
        writer.write(line("b", text="ünïcode \n inside"))
    with ResultsWriter(path) as writer:  # appends
        writer.write(line("c"))
    data = path.read_bytes()
    assert data.count(b"\n") == 3 and data.endswith(b"\n")
    done, torn = read_results(path)
    assert list(done) == ["a", "b", "c"] and torn == 0
    assert done["b"]["text"] == "ünïcode \n inside"


@pytest.mark.parametrize(
    "tail",
    [b'{"id": "c", "sta', b"{", b'{"i', b"   "],
)
def test_torn_last_line_is_cut(tmp_path: Path, tail: bytes) -> None:
    """A last line without its newline that is not JSON, the start of a result line, is torn:
    resume cuts it and reruns it."""
    path = tmp_path / "r.jsonl"
    good = orjson.dumps(line("a")) + b"\n" + orjson.dumps(line("b")) + b"\n"
    path.write_bytes(good + tail)
    done, torn = read_results(path, repair=False)
    assert list(done) == ["a", "b"] and torn == len(tail)
    assert path.read_bytes() == good + tail
    done, torn = read_results(path)
    assert path.read_bytes() == good
    assert read_results(path) == (done, 0)


@pytest.mark.parametrize("tail", [b"garbage", b"\xff\xfe", b'"id": "c"', b"[1, "])
def test_a_cut_last_line_that_is_no_result_is_refused_not_cut(tmp_path: Path, tail: bytes) -> None:
    """What a crash cannot leave (issue 31 item 7): skipped by a reader, refused by repair, the file unchanged."""
    path = tmp_path / "r.jsonl"
    good = orjson.dumps(line("a")) + b"\n" + orjson.dumps(line("b")) + b"\n"
    path.write_bytes(good + tail)
    done, torn = read_results(path, repair=False)
    assert list(done) == ["a", "b"] and torn == len(tail)
    with pytest.raises(ValueError, match="line 3 is not a result line: not valid JSON .*not a result line cut short"):
        read_results(path)
    assert path.read_bytes() == good + tail


def test_only_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"id": "a"')
    assert read_results(path) == ({}, 10)
    assert path.read_bytes() == b""


def test_missing_and_empty_files(tmp_path: Path) -> None:
    assert read_results(tmp_path / "absent.jsonl") == ({}, 0)
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert read_results(tmp_path / "empty.jsonl") == ({}, 0)


@pytest.mark.parametrize(
    ("middle", "message"),
    [(b"{broken", "line 2 is not a result line: not valid JSON"), (b"[1, 2]", "line 2 is not a result line"),
     (b'{"status": "ok"}', "line 2 is not a result line")],
)
def test_corrupt_complete_line_is_refused(tmp_path: Path, middle: bytes, message: str) -> None:
    """Damage in the middle of the file is not a crash's doing: refuse rather than guess."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(line("a")) + b"\n" + middle + b"\n" + orjson.dumps(line("c")) + b"\n")
    with pytest.raises(ValueError, match=message):
        read_results(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    ids=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=12, unique=True),
    cut=st.floats(min_value=0, max_value=1),
)
def test_any_prefix_repairs_to_its_complete_lines(tmp_path: Path, ids: list[str], cut: float) -> None:
    """A kill can stop the file at any byte: the repair keeps exactly the complete lines (a
    whole line that only lacks its newline included: its newline is restored)."""
    path = tmp_path / "prefix.jsonl"
    lines = [orjson.dumps(line(i, metadata={"n": n})) + b"\n" for n, i in enumerate(ids)]
    data = b"".join(lines)
    prefix = data[: int(len(data) * cut)]
    path.write_bytes(prefix)
    complete = prefix.count(b"\n")
    whole = complete + 1 if prefix + b"\n" == b"".join(lines[: complete + 1]) else complete
    done, torn = read_results(path)
    assert list(done) == ids[:whole]
    assert path.read_bytes() == b"".join(lines[:whole])
    assert torn == (0 if whole > complete else len(prefix) - len(path.read_bytes()))


def test_percentile() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([float(i) for i in range(1, 101)], 0.95) == pytest.approx(95.05)


def test_summary_counts() -> None:
    lines = [
        line("a"),
        line("b", status="error", finish_reason="error", duration_s=3.0),
        line("c", finish_reason="max-tokens", approvals=[{"outcome": "allowed-once"}, {"outcome": "rejected"}]),
        line("d", status="error", finish_reason=None, duration_s=5.0, approvals=[{"outcome": "rejected"}]),
    ]
    summary = summarize([Outcome.of(x) for x in lines], total=5, resumed=1, processed=3, duration_s=2.0, retries=4)
    data = summary.to_json()
    assert data["total"] == 5 and data["ok"] == 2 and data["error"] == 2 and data["resumed"] == 1
    assert data["items_per_s"] == 1.5
    assert data["p50_s"] == 2.0 and data["p95_s"] == pytest.approx(4.7)
    assert data["finish_reasons"] == {"completed": 1, "error": 1, "max-tokens": 1, "none": 1}
    assert data["approval_outcomes"] == {"allowed-once": 1, "rejected": 2}
    tally = Tally()
    for x in lines:
        tally.add_line(x)
    assert tally.summary(total=5, resumed=1, processed=3, duration_s=2.0, retries=4) == summary


def test_outcome_of_odd_lines_does_not_raise() -> None:
    """Resumed lines written by another version may lack fields or carry odd types."""
    outcome = Outcome.of({"id": "x", "duration_s": "slow", "approvals": "none", "finish_reason": 3})
    assert (outcome.duration_s, outcome.approval_outcomes, outcome.finish_reason) == (0.0, (), None)


FULL = {"id": "a", "status": "ok", "session_id": "s", "final_response": "x", "finish_reason": "completed",
        "subagents": [{"child_session_id": "c", "status": "ok", "stop_reason": "completed", "text": "t"}],
        "approvals": [{"tool_name": "bash", "call_id": None, "outcome": "rejected", "rule": "default"}],
        "attempts": 1, "duration_s": 0.5, "error": None, "metadata": {}}


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"id": "x", "prompt": "a dataset line"}, "'status'"),
        ({**FULL, "id": 7}, "'id'"),
        ({**FULL, "id": ""}, "'id'"),
        ({**FULL, "status": "done"}, "'status'"),
        ({**FULL, "final_response": 3}, "'final_response'"),
        ({**FULL, "finish_reason": ["completed"]}, "'finish_reason'"),
        ({**FULL, "session_id": {}}, "'session_id'"),
        ({**FULL, "attempts": "1"}, "'attempts'"),
        ({**FULL, "attempts": 0}, "'attempts'"),
        ({**FULL, "attempts": True}, "'attempts'"),
        ({**FULL, "duration_s": "0.5"}, "'duration_s'"),
        ({**FULL, "duration_s": -1}, "'duration_s'"),
        ({**FULL, "error": "boom"}, "'error'"),
        ({**FULL, "error": {"type": 3, "message": "m"}}, "'error.type'"),
        ({**FULL, "metadata": []}, "'metadata'"),
        ({**FULL, "subagents": {}}, "'subagents'"),
        ({**FULL, "subagents": ["x"]}, "'subagents[0]'"),
        ({**FULL, "subagents": [{"text": 5}]}, "'subagents[0].text'"),
        ({**FULL, "approvals": [{"outcome": 1}]}, "'approvals[0].outcome'"),
        ([FULL], "JSON object"),
    ],
)
def test_only_result_objects_of_the_schema_are_accepted(tmp_path: Path, value: object, field: str) -> None:
    """Anything but a result line is refused with file, line and field, wherever it is (also
    last, also without its newline), and the file is left byte-for-byte unchanged."""
    from dsh_orchestra.batch import ResultsFileError
    from dsh_orchestra.results import result_problem

    assert result_problem(FULL) is None and field in (result_problem(value) or "")
    good = orjson.dumps({**FULL, "id": "first"}) + b"\n"
    for data in (good + orjson.dumps(value) + b"\n" + good.replace(b"first", b"third"),
                 good + orjson.dumps(value) + b"\n", good + orjson.dumps(value)):
        path = tmp_path / "r.jsonl"
        path.write_bytes(data)
        with pytest.raises(ResultsFileError, match=rf"r\.jsonl: line 2 is not a result line: .*{re.escape(field[1:-1])}") as caught:
            read_results(path)
        assert caught.value.line == 2 and path.read_bytes() == data


def test_old_and_newer_result_lines_are_accepted(tmp_path: Path) -> None:
    """Lines of earlier versions (only some of today's fields) and of later ones (fields this
    version does not know, e.g. scores) are results."""
    path = tmp_path / "r.jsonl"
    lines = [{"id": "old", "status": "ok"}, {"id": "older", "status": "error", "error": None},
             {**FULL, "id": "newer", "scores": {"exact": {"value": 1}}, "usage": {"total_tokens": 3}, "epoch": 2}]
    path.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in lines))
    done, torn = read_results(path)
    assert list(done) == ["old", "older", "newer"] and torn == 0 and done["newer"]["epoch"] == 2


def test_a_whole_last_line_without_newline_is_kept_and_its_newline_restored(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    first, last = orjson.dumps({**FULL, "id": "a"}) + b"\n", orjson.dumps({**FULL, "id": "b"})
    path.write_bytes(first + last)
    assert read_results(path, repair=False) == ({"a": {**FULL, "id": "a"}, "b": {**FULL, "id": "b"}}, 0)
    assert path.read_bytes() == first + last  # reading alone changes nothing
    done, torn = read_results(path)
    assert list(done) == ["a", "b"] and torn == 0
    assert path.read_bytes() == first + last + b"\n"
    assert read_results(path) == (done, 0) and path.read_bytes() == first + last + b"\n"
    path.write_bytes(first + last + b"\r\n\n  ")  # a blank torn tail is cut
    read_results(path)
    assert path.read_bytes() == first + last + b"\r\n\n"

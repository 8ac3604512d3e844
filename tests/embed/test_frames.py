"""Results as tables (``eval.load_results``, ``summary_frame``, ``comparison_frame``), checked
field by field against the results file; the ``export`` command; the notebook and terminal
reprs of the result types."""

from __future__ import annotations

import csv
import html
import io
import math
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_orchestra import sync
from dsh_orchestra.cli import main as cli_main
from dsh_orchestra.eval import Comparison, RescoreError, comparison_frame, load_results, summary_frame

from .embed_support import sim_spec, write_dataset

PRICES = '["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 0.5\noutput_per_mtok = 2.0\n'

HAND_WRITTEN = [
    {"id": "x", "epoch": 1, "status": "error", "session_id": None, "final_response": None, "finish_reason": None,
     "attempts": 3, "duration_s": 1.5, "error": {"type": "TurnFailed", "message": "the model <failed>"},
     "metadata": {"nested": {"a": [1, 2]}, "mixed": 1}, "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
     "scores": {"judge": {"value": None, "answer": None, "explanation": "no answer"}},
     "judge_usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}, "judge_cost_usd": 0.25},
    {"id": "x", "epoch": 2, "status": "ok", "final_response": "B", "finish_reason": "completed", "error": None,
     "metadata": {"mixed": "one"}, "scores": {"judge": {"value": 1.0, "answer": "B"}}, "cost_usd": 0.5},
    {"id": "x", "epoch": 1, "status": "ok", "final_response": "a repeat of (x, 1): the first line wins"},
]


def flattened(line: dict[str, Any], column: str) -> Any:
    """What ``column`` of ``line``'s row must hold, read from the line itself."""
    def json_text(value: Any) -> Any:
        return orjson.dumps(value).decode() if isinstance(value, (list, dict)) else value

    if column.startswith("score."):
        name, _, part = column.removeprefix("score.").partition(".answer")
        score = (line.get("scores") or {}).get(name) or {}
        return score.get("answer") if column.endswith(".answer") else score.get("value")
    if column.startswith("metadata."):
        return json_text((line.get("metadata") or {}).get(column.removeprefix("metadata.")))
    if column.startswith(("usage.", "judge_usage.")):
        group, key = column.split(".")
        return (line.get(group) or {}).get(key)
    if column.startswith("error."):
        return (line.get("error") or {}).get(column.removeprefix("error."))
    if column == "epoch":
        return line.get("epoch", 1)
    return line.get(column)


def check_against_file(path: Path) -> None:
    """Every row and every column of load_results(path), against the file's lines."""
    raw = [orjson.loads(text) for text in path.read_bytes().splitlines() if text.strip()]
    first: dict[tuple[str, int], dict[str, Any]] = {}
    for line in raw:
        first.setdefault((line["id"], line.get("epoch", 1)), line)
    frame = load_results(path)
    rows = frame.rows()
    assert [(r["id"], r["epoch"]) for r in rows] == list(first)  # one row per (id, epoch), file order
    scorers = list(dict.fromkeys(n for line in first.values() for n in (line.get("scores") or {})))
    keys = list(dict.fromkeys(k for line in first.values() for k in (line.get("metadata") or {})))
    for name in scorers:
        assert f"score.{name}" in frame.names and f"score.{name}.answer" in frame.names
    assert [n for n in frame.names if n.startswith("metadata.")] == [f"metadata.{k}" for k in keys]
    for column in frame.names:
        expected = [flattened(first[(row["id"], row["epoch"])], column) for row in rows]
        types = {type(v) for v in expected if v is not None}
        if types == {int, float}:  # the documented rule of one type per column
            expected = [None if v is None else float(v) for v in expected]
        elif len(types) > 1:
            expected = [v if v is None or isinstance(v, str) else orjson.dumps(v).decode() for v in expected]
        assert [row[column] for row in rows] == expected, column
    for library in ("arrow", "polars", "pandas"):
        assert_same_table(frame, library)


def assert_same_table(frame: Any, library: str) -> None:
    rows = frame.rows()
    if library == "arrow":
        table = frame.to_arrow()
        assert table.column_names == frame.names and table.num_rows == len(rows)
        converted = table.to_pylist()
    elif library == "polars":
        table = frame.to_polars()
        assert table.columns == frame.names
        converted = table.to_dicts()
    else:
        table = frame.to_pandas()
        assert list(table.columns) == frame.names
        converted = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                     for r in table.astype(object).to_dict("records")]
    for got, want in zip(converted, rows, strict=True):
        for column in frame.names:
            value, expected = got[column], want[column]
            if isinstance(expected, int) and not isinstance(expected, bool) and isinstance(value, float):
                value = int(value)  # pandas: an int column with a null is float
            if expected is None:
                assert value is None or (isinstance(value, float) and math.isnan(value)), (library, column)
            else:
                assert value == expected, (library, column, value, expected)


@pytest.fixture
def batch_run(tmp_path: Path) -> tuple[Path, Any]:
    dataset = write_dataset(tmp_path)
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    from dsh_orchestra.eval import load_prices

    results = tmp_path / "results.jsonl"
    summary = sync.run_batch(dataset, results, sim_spec(tmp_path), runtimes=1, progress="none", epochs=2,
                             scorers=["exact", "includes"], group_by="topic", prices=load_prices(prices))
    return results, summary


def test_a_batch_results_file_as_tables_field_by_field(batch_run: tuple[Path, Any]) -> None:
    results, summary = batch_run
    check_against_file(results)
    frame = load_results(results)
    assert len(frame) == 6 and {r["cost_usd"] for r in frame.rows()} != {None}
    assert frame.names[:10] == ["id", "epoch", "status", "finish_reason", "error.type", "error.message", "attempts",
                                "duration_s", "session_id", "final_response"]
    assert frame.to_arrow().schema.field("error.type").type == "string"  # all null, still text


def test_hand_written_lines_errors_judges_nested_metadata_and_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in HAND_WRITTEN) + b'{"id": "torn", "sta')
    check_against_file_lines = [orjson.loads(t) for t in path.read_bytes().splitlines()[:-1]]
    complete = tmp_path / "complete.jsonl"
    complete.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in check_against_file_lines))
    check_against_file(complete)
    frame = load_results(path)  # the torn last line is skipped
    assert [r["id"] for r in frame.rows()] == ["x", "x"]
    row = frame.rows()[0]
    assert (row["error.type"], row["error.message"], row["judge_usage.total_tokens"], row["judge_cost_usd"]) == \
        ("TurnFailed", "the model <failed>", 15, 0.25)
    assert row["metadata.nested"] == '{"a":[1,2]}'
    assert frame.to_arrow().schema.field("metadata.mixed").type == "string"  # 1 and "one": kept as text
    assert frame.to_polars()["metadata.mixed"].to_list() == ["1", "one"]
    with pytest.raises(RescoreError, match="does not exist"):
        load_results(tmp_path / "missing.jsonl")


def test_summary_and_comparison_frames(batch_run: tuple[Path, Any], tmp_path: Path) -> None:
    results, summary = batch_run
    frame = summary_frame(summary)
    rows = frame.rows()
    expected = [(None, name, m) for name, m in summary.scores.items()]
    expected += [(group, name, m) for group, by in summary.groups.items() for name, m in by.items()]
    assert [(r["group"], r["scorer"]) for r in rows] == [(g, n) for g, n, _ in expected]
    for row, (_, _, metrics) in zip(rows, expected, strict=True):
        assert (row["mean"], row["stderr"], row["n"]) == (metrics["mean"], metrics["stderr"], metrics["n"])
        assert [row["ci95.low"], row["ci95.high"]] == metrics["ci95"]
    assert summary_frame(summary.to_json()).rows() == rows
    assert_same_table(frame, "polars")
    comparison = sync.compare_runs(results, results)
    assert isinstance(comparison, Comparison) and isinstance(comparison, dict)
    compared = comparison_frame(comparison).rows()
    assert [r["scorer"] for r in compared] == ["exact", "includes"]
    for row in compared:
        entry = comparison["scorers"][row["scorer"]]
        assert (row["n"], row["mean_base"], row["diff"], row["p_value"]) == (entry["n"], entry["mean_base"], entry["diff"], entry["p_value"])
        assert (row["regressions"], row["improvements"]) == (len(entry["regressions"]), len(entry["improvements"]))
    assert comparison.to_frame().rows() == compared
    assert_same_table(comparison.to_frame(), "pandas")


def test_a_missing_library_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(orjson.dumps(HAND_WRITTEN[1]) + b"\n")
    frame = load_results(path)
    monkeypatch.setitem(sys.modules, "polars", None)  # as if not installed
    with pytest.raises(ImportError, match=r"to_polars\(\) needs polars.*pip install 'dsh-orchestra\[data\]'"):
        frame.to_polars()
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert cli_main(["export", str(path), "--format", "parquet", "--out", str(tmp_path / "t.parquet")]) == 2
    assert not (tmp_path / "t.parquet").exists()
    assert cli_main(["export", str(path), "--format", "csv", "--out", str(tmp_path / "t.csv")]) == 0  # csv needs no extra


def test_export_writes_the_same_table(batch_run: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, _ = batch_run
    frame = load_results(results)
    assert cli_main(["export", str(results), "--format", "parquet", "--out", str(tmp_path / "t.parquet")]) == 0
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "t.parquet").equals(frame.to_arrow())
    assert cli_main(["export", str(results), "--format", "csv", "--out", str(tmp_path / "t.csv")]) == 0
    read = list(csv.reader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert read[0] == frame.names
    for cells, row in zip(read[1:], frame.rows(), strict=True):
        assert cells == ["" if row[n] is None else str(row[n]) for n in frame.names]
    capsys.readouterr()
    assert cli_main(["export", str(results), "--format", "csv", "--out", str(results)]) == 2  # an output that is an input
    assert "same file" in capsys.readouterr().err
    assert cli_main(["export", str(tmp_path / "nope.jsonl"), "--format", "csv", "--out", str(tmp_path / "n.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["export", str(results), "--format", "csv", "--out", str(tmp_path / "no" / "dir.csv")]) == 2
    with pytest.raises(SystemExit) as bad_format:
        cli_main(["export", str(results), "--format", "xlsx", "--out", str(tmp_path / "t.xlsx")])
    assert bad_format.value.code == 2


def test_reprs_are_compact_escaped_and_fit_a_terminal(batch_run: tuple[Path, Any], tmp_path: Path) -> None:
    results, summary = batch_run
    with sync.open_runtime(sim_spec(tmp_path)) as runtime:
        turn = runtime.session().run("<script>alert(1)</script> " + "long " * 50)
    for value in (turn, summary, sync.compare_runs(results, results), load_results(results)):
        text = repr(value)
        assert all(len(line) <= 100 for line in text.splitlines()), text
        page = value._repr_html_()
        assert "<script>" not in page and page.startswith("<table")
    assert "&lt;script&gt;" in turn._repr_html_()
    assert repr(turn).startswith(f"TurnResult(session {turn.session_id!r}, completed")
    assert repr(summary).startswith("BatchSummary: 6 results, 6 ok, 0 error")
    assert html.escape("echo: alpha") in load_results(results)._repr_html_()

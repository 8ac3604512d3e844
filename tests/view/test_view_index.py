"""The results index: offsets found as the file grows, a torn last line waits for its newline,
a rewritten file is indexed again, lines are read on demand; the queries' filters, sorting and
paging over items with epochs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_orchestra.view import ResultsIndex
from dsh_orchestra.view._query import QueryError, query_items, run_stats


def line(item_id: str, **fields: Any) -> bytes:
    value: dict[str, Any] = {"id": item_id, "status": "ok", "final_response": f"answer of {item_id}", "finish_reason": "completed",
                             "duration_s": 1.0, "metadata": {}}
    value.update(fields)
    return orjson.dumps(value) + b"\n"


def indexed(path: Path) -> ResultsIndex:
    index = ResultsIndex(path)
    index.refresh()
    while index.parse(3):
        pass
    return index


def test_grows_with_the_file_and_waits_for_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(line("a") + line("b"))
    index = indexed(path)
    assert len(index) == 2 and index.parsed == 2
    assert not index.refresh()  # nothing new
    torn = line("c")
    with open(path, "ab") as handle:
        handle.write(torn[:10])
    assert not index.refresh() and len(index) == 2 and index.pending == 10
    with open(path, "ab") as handle:
        handle.write(torn[10:] + line("d"))
    assert index.refresh() and len(index) == 4 and index.pending == 0
    while index.parse():
        pass
    assert [v["id"] for v in index.lines([0, 2, 3])] == ["a", "c", "d"]
    assert index.generation == 0


def test_a_bounded_refresh_indexes_whole_lines_a_step_at_a_time(tmp_path: Path) -> None:
    """``refresh(max_bytes)`` stops after about that many bytes at a line's end (``unread``:
    what is left); a line longer than the bound is read whole; a torn last line still waits."""
    path = tmp_path / "r.jsonl"
    lines = [line(f"i{n:03d}") for n in range(100)] + [line("long", final_response="x" * 5000)] + [line("z")]
    path.write_bytes(b"".join(lines))
    size = path.stat().st_size
    index = ResultsIndex(path)
    assert index.refresh(max_bytes=1000)
    first = len(index)
    assert 0 < first < 100 and index.unread == size - index.offsets[-1] - len(lines[first - 1]) and index.pending == 0
    steps = 1
    while index.unread:
        assert index.refresh(max_bytes=1000)
        steps += 1
    assert len(index) == 102 and steps > 5
    while index.parse(7):
        pass
    assert [v["id"] for v in index.lines([0, 99, 100, 101])] == ["i000", "i099", "long", "z"]
    assert index.lines([100])[0]["final_response"] == "x" * 5000
    # the bound is smaller than the long line: it is still read whole, at once
    again = ResultsIndex(path)
    while again.refresh(max_bytes=10) or again.unread:
        pass
    assert list(again.offsets) == list(index.offsets)
    with open(path, "ab") as handle:
        handle.write(line("torn")[:9])
    assert not index.refresh(max_bytes=1000) and index.pending == 9 and index.unread == 0


def test_a_rewritten_file_is_indexed_again(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(line("a") + line("b") + line("c"))
    index = indexed(path)
    path.write_bytes(line("x") + line("y", status="error"))  # shorter: cut and rewritten
    assert index.refresh() and index.generation == 1 and len(index) == 2
    while index.parse():
        pass
    assert [v["id"] for v in index.lines([0, 1])] == ["x", "y"]
    # the same length, other bytes: noticed by the bytes before the end
    path.write_bytes(line("p") + line("q", status="error"))
    assert index.refresh() and index.generation == 2
    # replaced by another file (a new inode)
    other = tmp_path / "other.jsonl"
    other.write_bytes(line("m") + line("n") + line("o"))
    os.replace(other, path)
    assert index.refresh() and index.generation == 3 and len(index) == 3


def test_a_line_that_is_not_a_result_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(line("a") + b"[1, 2]\n" + b"\n" + line("b"))
    index = indexed(path)
    assert len(index) == 3 and index.bad_lines == 1 and "line 2" in (index.problem or "")


def epochs_file(tmp_path: Path) -> ResultsIndex:
    rows = []
    for i in range(10):
        for epoch in (1, 2):
            ok = not (i == 3 and epoch == 2)
            rows.append(line(f"item-{i}", epoch=epoch, status="ok" if ok else "error", duration_s=float(i + epoch),
                             error=None if ok else {"type": "TurnFailed", "message": "x"}, finish_reason="completed" if ok else "error",
                             scores={"exact": {"value": 1 if (i + epoch) % 3 else 0}}, metadata={"topic": "ab"[i % 2]},
                             usage={"total_tokens": 10 * i}, final_response="The <b>answer</b> is FORTY" if i == 7 else f"answer {i}"))
    path = tmp_path / "epochs.jsonl"
    path.write_bytes(b"".join(rows))
    return indexed(path)


def ids(page: dict[str, Any], index: ResultsIndex) -> list[str]:
    return [index.line(lines[0])["id"] for lines in page["items"]]


def test_items_reduce_epochs_filter_sort_and_page(tmp_path: Path) -> None:
    index = epochs_file(tmp_path)
    cache: dict[str, Any] = {}
    page = query_items(index, {"limit": "4"}, cache)
    assert page["total"] == 10 and ids(page, index) == ["item-0", "item-1", "item-2", "item-3"]
    assert [len(lines) for lines in page["items"]] == [2, 2, 2, 2]
    assert ids(query_items(index, {"offset": "8", "limit": "4"}, cache), index) == ["item-8", "item-9"]
    # an item is listed when any epoch matches
    assert ids(query_items(index, {"status": "error"}, cache), index) == ["item-3"]
    assert ids(query_items(index, {"error": "TurnFailed"}, cache), index) == ["item-3"]
    assert query_items(index, {"error": "none"}, cache)["total"] == 10
    assert query_items(index, {"finish_reason": "error"}, cache)["total"] == 1
    # score filters: value 0 at (i + epoch) % 3 == 0
    zero = sorted({f"item-{i}" for i in range(10) for e in (1, 2) if (i + e) % 3 == 0})
    assert sorted(ids(query_items(index, {"score.exact": "<1"}, cache), index)) == zero
    assert sorted(ids(query_items(index, {"score.exact": "0", "epoch": "1"}, cache), index)) == sorted(
        f"item-{i}" for i in range(10) if (i + 1) % 3 == 0)
    assert query_items(index, {"meta.topic": "b"}, cache)["total"] == 5
    assert ids(query_items(index, {"q": "forty"}, cache), index) == ["item-7"]
    assert ids(query_items(index, {"q": "<b>ANSWER"}, cache), index) == ["item-7"]
    assert ids(query_items(index, {"q": "item-9"}, cache), index) == ["item-9"]
    # sorting: by the mean over epochs, missing last; by tokens descending
    assert ids(query_items(index, {"sort": "duration_s", "order": "desc", "limit": "2"}, cache), index) == ["item-9", "item-8"]
    assert ids(query_items(index, {"sort": "tokens", "order": "desc", "limit": "1"}, cache), index) == ["item-9"]
    assert ids(query_items(index, {"sort": "id", "order": "desc", "limit": "1"}, cache), index) == ["item-9"]
    by_score = ids(query_items(index, {"sort": "score:exact", "limit": "10"}, cache), index)
    means = {f"item-{i}": sum(1 if (i + e) % 3 else 0 for e in (1, 2)) / 2 for i in range(10)}
    assert [means[i] for i in by_score] == sorted(means.values())


def test_bad_query_parameters_are_named(tmp_path: Path) -> None:
    index = epochs_file(tmp_path)
    for params, needle in (({"limit": "0"}, "limit"), ({"offset": "x"}, "offset"), ({"score.nope": "1"}, "nope"),
                           ({"score.exact": "big"}, "score filter"), ({"sort": "colour"}, "sort"), ({"order": "up"}, "order")):
        with pytest.raises(QueryError, match=needle):
            query_items(index, params, {})


def test_running_stats(tmp_path: Path) -> None:
    index = epochs_file(tmp_path)
    stats = run_stats(index, {})
    assert stats["lines"] == 20 and stats["items"] == 10 and stats["ok"] == 19 and stats["error"] == 1
    assert stats["errors"] == {"TurnFailed": 1} and stats["epochs"] == [1, 2]
    per_item = [sum(1 if (i + e) % 3 else 0 for e in (1, 2)) / 2 for i in range(10)]
    assert stats["scores"]["exact"]["mean"] == pytest.approx(sum(per_item) / 10)
    assert stats["scores"]["exact"]["n"] == 10
    assert stats["metadata_keys"] == ["topic"]


def test_while_a_big_file_is_read_pages_use_the_lines_read_so_far(tmp_path: Path) -> None:
    """Above a backlog of 20,000 lines, the groups and counts may be up to 2 s old (a request
    does not regroup a million lines at each step of the first read); a page stays consistent."""
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(line(f"i{n:05d}", epoch=1 + n % 2, status="ok" if n % 5 else "error") for n in range(30_000)))
    index = ResultsIndex(path)
    index.refresh()
    cache: dict[str, Any] = {}
    index.parse(4000)
    first = query_items(index, {"limit": "3", "status": "error", "sort": "duration_s"}, cache)
    assert first["total"] == 800 and len(first["items"]) == 3
    index.parse(4000)  # still a large backlog: the groups of the first 4,000 lines serve
    assert query_items(index, {"limit": "3", "status": "error"}, cache)["total"] == 800
    assert run_stats(index, cache)["parsed"] == 8000
    while index.parse(5000):
        pass
    assert query_items(index, {"status": "error"}, cache)["total"] == 6000
    assert run_stats(index, cache)["error"] == 6000

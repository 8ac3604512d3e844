"""Issue 30 part 2: compare keeps the regressions and improvements as positions into the paired
ids (``SortedIds``, 4 bytes an id) until it writes them, a chunk at a time; the document it
writes is the same, byte for byte, as with lists of strs (``--json``, and the text)."""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from dsh_orchestra.cli import main
from dsh_orchestra.eval import _idlist, _metrics, compare_runs, read_run
from dsh_orchestra.eval._idlist import SortedIds, json_chunks
from dsh_orchestra.cli._compare import render_text


def _lines(rnd: random.Random, n: int, *, ids: list[str], errors: float = 0.0, levels: bool = False) -> list[dict[str, Any]]:
    out = []
    for item_id in ids[:n]:
        if rnd.random() < errors:
            out.append({"id": item_id, "status": "error", "error": {"type": "Boom", "message": "boom"}, "scores": {"f1": {"value": None}}})
            continue
        f1 = rnd.choice([0.0, 0.5, 1.0]) if levels else rnd.random()
        exact = float(rnd.random() < 0.5)
        missing = rnd.random() < 0.05
        out.append({"id": item_id, "status": "ok", "scores": {"f1": {"value": None if missing else f1},
                                                              "exact": {"value": exact}}})
    return out


def _ids(rnd: random.Random, n: int, kind: str) -> list[str]:
    if kind == "unicode":  # not ASCII: ids kept as objects; sorted by code point
        return [f"{rnd.choice(['é', 'z', 'a', 'Ω', '中'])}-{i:05d}" for i in range(n)]
    return [f"item-{i:05d}" for i in range(n)]


CASES = [
    ("continuous, same order", 3_000, "ascii", 0.0, False, False),
    ("errors (strict lists), shuffled candidate", 2_500, "ascii", 0.08, True, False),
    ("unicode ids, errors", 2_000, "unicode", 0.05, True, False),
    ("three levels", 4_000, "ascii", 0.0, False, True),
]


@pytest.mark.parametrize(("name", "n", "kind", "errors", "shuffle", "levels"), CASES, ids=[c[0] for c in CASES])
def test_positions_write_the_same_bytes(name: str, n: int, kind: str, errors: float, shuffle: bool, levels: bool) -> None:
    rnd = random.Random(n)
    ids = _ids(rnd, n + 50, kind)
    base = _lines(rnd, n, ids=ids, errors=errors, levels=levels)
    candidate = _lines(rnd, n, ids=ids[40:], errors=errors, levels=levels)  # some ids in one run only
    if shuffle:
        rnd.shuffle(candidate)
    plain = compare_runs(base, candidate, seed=3)
    _metrics._INTERVALS.clear()
    held = compare_runs(base, candidate, seed=3, _id_positions=True)
    entries = [held["scorers"][s] for s in held["scorers"]]
    assert all(isinstance(e["regressions"], SortedIds) for e in entries)
    if errors:
        assert any(isinstance(e["strict"]["regressions"], SortedIds) and e["strict"]["n"] != e["n"] for e in entries)
    assert b"".join(held.json_chunks()) == orjson.dumps(plain)
    assert render_text(held) == render_text(plain)
    for name_, entry in plain["scorers"].items():
        assert held["scorers"][name_]["regressions"] == entry["regressions"]  # SortedIds == its list
        assert list(held["scorers"][name_]["improvements"]) == entry["improvements"]


def test_the_same_from_columns(tmp_path: Path) -> None:
    rnd = random.Random(7)
    ids = _ids(rnd, 3_000, "ascii")
    paths = []
    for what in ("base", "cand"):
        path = tmp_path / f"{what}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in _lines(rnd, 3_000, ids=ids, errors=0.03)))
        paths.append(str(path))
    runs = [read_run(p, unique=True, line_usage=False) for p in paths]
    plain = compare_runs(*runs, seed=1)
    held = compare_runs(*runs, seed=1, _id_positions=True)
    assert b"".join(held.json_chunks()) == orjson.dumps(plain)


def test_sorted_ids_read_like_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = np.array([b"c", b"a", b"d", b"b", b"e"], dtype=np.bytes_)
    held = SortedIds(ids, np.array([1, 3, 0, 4], dtype=np.int32))
    assert len(held) == 4 and held[0] == "a" and held[-1] == "e" and held[1:3] == ["b", "c"]
    assert held == ["a", "b", "c", "e"] and held != ["a", "b", "c"] and held != "abce"
    assert held == SortedIds(ids, np.array([1, 3, 0, 4])) and held != SortedIds(ids, np.array([1, 3, 0, 2]))
    monkeypatch.setattr(_idlist, "CHUNK", 3)
    assert list(held.chunks(3)) == [["a", "b", "c"], ["e"]]
    assert b"".join(json_chunks({"x": [held, SortedIds(ids, np.zeros(0, dtype=np.int32))], "y": 1.5})) == \
        orjson.dumps({"x": [["a", "b", "c", "e"], []], "y": 1.5})


def test_the_cli_writes_the_same_document(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    rnd = random.Random(9)
    ids = _ids(rnd, 1_500, "unicode")
    paths = []
    for what in ("base", "cand"):
        path = tmp_path / f"{what}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in _lines(rnd, 1_500, ids=ids, errors=0.05)))
        paths.append(str(path))
    assert main(["compare", *paths, "--json"]) == 0
    written = capsysbinary.readouterr().out
    runs = [read_run(p, unique=True, line_usage=False) for p in paths]
    expected = orjson.dumps(compare_runs(*runs, labels=(paths[0], paths[1]))) + b"\n"
    assert written == expected


def test_positions_hold_a_small_part_of_the_lists_memory() -> None:
    n = 60_000
    rnd = np.random.default_rng(11)
    ids = np.array([f"item-{i:07d}".encode() for i in range(n)], dtype=np.bytes_)
    base, candidate = rnd.choice([0.0, 0.5, 1.0], n), rnd.choice([0.0, 0.5, 1.0], n)  # 2/3 of the items change
    from dsh_orchestra.eval._compare import _id_order, compare_arrays

    retained = []
    for order in (None, _id_order(ids)):
        gc.collect()
        tracemalloc.start()
        try:
            entry = compare_arrays(ids, base, candidate, seed=1, _order=order)
            size, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        retained.append(size)
        del entry
    lists, positions = retained
    assert positions < 6 * n  # 4 bytes a changed id (2/3 of the n), and a few small objects
    assert lists > 10 * positions  # a str and a pointer per id


def test_the_document_keeps_and_writes_a_few_bytes_an_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A continuous scorer in two different runs: nearly every item is a regression or an
    # improvement. Kept as strs, the lists cost ~74 bytes a line; as positions ~6 (measured at
    # 50,000 lines). Written a chunk at a time, the writing holds one chunk (and a few small
    # pieces: ~23 bytes a line at 30,000), not the document's bytes (~166).
    n = 30_000
    rnd = random.Random(12)
    paths = []
    for what in ("base", "cand"):
        path = tmp_path / f"{what}.jsonl"
        path.write_bytes(b"".join(orjson.dumps({"id": f"item-{i:07d}", "status": "ok", "scores": {
            "f1": {"value": rnd.random()}, "exact": {"value": float(rnd.random() < 0.5)}}}) + b"\n" for i in range(n)))
        paths.append(path)
    runs = [read_run(p, unique=True, line_usage=False) for p in paths]
    monkeypatch.setattr(_idlist, "CHUNK", 2_048)
    b"".join(compare_runs(*runs, seed=2, _id_positions=True).json_chunks())  # (what is imported and cached once)
    measured = {}
    for held in (True, False):
        _metrics._INTERVALS.clear()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            doc = compare_runs(*runs, seed=2, _id_positions=held)
            kept = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.reset_peak()
            start = tracemalloc.get_traced_memory()[0]
            written = sum(len(chunk) for chunk in doc.json_chunks()) if held else len(orjson.dumps(doc))
            writing = tracemalloc.get_traced_memory()[1] - start
        finally:
            tracemalloc.stop()
        measured[held] = (kept / n, writing / n, written)
    assert measured[True][2] == measured[False][2]  # the same document
    assert measured[True][0] < 12 and measured[False][0] > 50  # bytes kept a line
    assert measured[True][1] < 40 and measured[False][1] > 2 * measured[True][1]  # bytes a line held while writing

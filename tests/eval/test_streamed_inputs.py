"""``score`` and ``compare`` on inputs read as columns, without per-line objects (issue 30 part 2):

* ``batch.index_dataset`` (the dataset validated once, then read item by item) holds what
  ``load_dataset`` gives, refuses what it refuses with the same message, and tells apart ids
  whose 64-bit hashes are equal (hashes forced to collide);
* ``rescore`` with the index (items numbered by position in the tally) writes the same bytes and
  the same summary as with a dict of the items (items keyed by id), on shuffled lines, epochs,
  a repeated (id, epoch), items missing from the results, errored lines and groups of mixed
  JSON types;
* ``compare`` gives the same document whatever the candidate's line order (pairing without
  sorting when both runs hold the same items in the same order), and its columns that are
  constants until a line needs them (epochs, statuses, costs) read like full columns;
* the traced memory of both per line stays bounded (tracemalloc: deterministic, not timed).
"""

from __future__ import annotations

import math
import random
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import trio

from dsh_orchestra.batch import DatasetError, index_dataset, load_dataset
from dsh_orchestra.batch import _index
from dsh_orchestra.eval import ScoreTally, compare_runs, make_plan, read_run, rescore
from dsh_orchestra.eval._compare import _fsum
from dsh_orchestra.results import TallyLine

SCORERS = ["exact", "includes", "numeric", "f1"]
GROUPS: list[Any] = [7, "7", None, "x", True, {"a": 1}]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def dataset_rows(items: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(items):
        row: dict[str, Any] = {"id": f"item-{i}", "prompt": f"what is {i}?", "target": str(i)}
        if i % 7 == 0:
            row["target"] = [str(i), f"{i}.0"]
        if i % 5 != 0:
            row["metadata"] = {"level": GROUPS[i % len(GROUPS)]}
        if i % 11 == 0:
            row["prompt"] = [{"type": "text", "text": f"q {i}"}]
        if i % 13 == 0:
            row["choices"] = ["a", "b"]
        rows.append(row)
    return rows


def result_rows(items: int, seed: int, epochs: int = 3) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(items):
        if i % 17 == 3:
            continue  # an item of the dataset with no line
        for epoch in range(1, rnd.randint(1, epochs) + 1):
            status = "error" if rnd.random() < 0.1 else "ok"
            response = rnd.choice([str(i), f"it is {i}", "no idea", f"{i}.0 maybe", ""])
            line: dict[str, Any] = {
                "id": f"item-{i}", "status": status, "session_id": f"s{i}", "final_response": response,
                "finish_reason": "completed" if status == "ok" else None, "subagents": [], "approvals": [],
                "questions": [], "attempts": 1, "duration_s": rnd.uniform(0.1, 2.0),
                "error": {"type": "E", "message": "m"} if status == "error" else None, "metadata": {},
                "epoch": epoch, "usage": {"input_tokens": rnd.randint(1, 99), "output_tokens": 5, "total_tokens": 120},
            }
            out.append(line)
    rnd.shuffle(out)
    out.insert(len(out) // 2, dict(out[3], final_response="repeat"))  # a repeated (id, epoch): the first counts
    return out


@pytest.fixture(params=["real", "colliding"])
def hashes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The index with Python's hash, and with a hash that puts ids in three buckets only."""
    if request.param == "colliding":
        monkeypatch.setattr(_index, "id_hash", lambda item_id: len(item_id) % 3)
    return str(request.param)


# ---- the dataset index --------------------------------------------------------------------


def test_the_index_holds_what_load_dataset_gives(tmp_path: Path, hashes: str) -> None:
    rows = dataset_rows(60)
    rows[4]["extra_key_zzz"] = 1  # an unknown key: kept out, reported
    path = tmp_path / "ds.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(row) for row in rows[:30]) + b"\n\n   \n"
                     + b"\n".join(orjson.dumps(row) for row in rows[30:]) + b"\n")
    items, unknown = load_dataset(path)
    with index_dataset(path) as index:
        assert len(index) == len(items)
        assert sorted(index) == sorted(item.id for item in items)
        for item in reversed(items):  # any order; each read back from its line, line numbers included
            assert index[item.id] == item
            assert item.id in index
        positions = sorted(p for p in (index.position(item.id) for item in items) if p is not None)
        assert positions == list(range(len(items)))
        assert index.position("item-999") is None and "item-999" not in index and 5 not in index
        with pytest.raises(KeyError):
            index["nope"]
        assert index.unknown == unknown
        assert index.targets == sum(1 for item in items if item.target is not None)
        assert index.metadata_keys == {"level": sum(1 for item in items if "level" in item.metadata)}


@pytest.mark.parametrize("case", ["duplicates", "bad and duplicate lines", "empty"])
def test_the_index_refuses_what_load_dataset_refuses(tmp_path: Path, hashes: str, case: str) -> None:
    rows: list[Any] = dataset_rows(12)
    if case == "duplicates":
        rows += [rows[3], dict(rows[5], prompt="again"), rows[3]]
    elif case == "bad and duplicate lines":
        rows = [rows[0], {"prompt": "no id"}, rows[1], rows[0], ["not an object"], {"id": "x", "prompt": 3}, rows[1], rows[2]]
    else:
        rows = []
    path = write_jsonl(tmp_path / "ds.jsonl", rows)
    with pytest.raises(DatasetError) as expected:
        load_dataset(path)
    with pytest.raises(DatasetError) as found:
        index_dataset(path)
    assert str(found.value) == str(expected.value)
    assert found.value.problems == expected.value.problems


# ---- score: the index and position-numbered tally against a dict of items --------------------


def _score(results: Path, items: Any, out: Path, plan: Any) -> dict[str, Any]:
    report = trio.run(lambda: rescore(results, items, out, plan, argv=["score"], scorer_workers=0))
    for key in ("start_time", "end_time"):
        report["run"].pop(key)
    return report


@pytest.mark.parametrize("reducer", ["mean", "pass@2", "mode"])
def test_rescore_with_the_index_writes_what_a_dict_of_items_gives(tmp_path: Path, hashes: str, reducer: str) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", dataset_rows(90))
    results = write_jsonl(tmp_path / "results.jsonl", result_rows(90, seed=3))
    plan = make_plan(SCORERS, epochs=3, reducer=reducer, group_by="level", seed=5)
    items, _ = load_dataset(dataset)
    expected = _score(results, {item.id: item for item in items}, tmp_path / "dict.jsonl", plan)
    with index_dataset(dataset) as index:
        found = _score(results, index, tmp_path / "index.jsonl", plan)
    assert (tmp_path / "index.jsonl").read_bytes() == (tmp_path / "dict.jsonl").read_bytes()
    assert found == expected
    assert found["groups"] and found["items"] == 90 - len(range(3, 90, 17))
    assert any("epochs" in entry for entry in found["scores"].values())


def test_rescore_one_epoch_per_item_with_the_index(tmp_path: Path, hashes: str) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", dataset_rows(70))
    rows = [dict(row, epoch=1) for row in result_rows(70, seed=8, epochs=1)[:-1]]  # (no repeat)
    for row in rows:
        del row["epoch"]
    results = write_jsonl(tmp_path / "results.jsonl", rows)
    plan = make_plan(SCORERS, group_by="level")
    items, _ = load_dataset(dataset)
    expected = _score(results, {item.id: item for item in items}, tmp_path / "dict.jsonl", plan)
    with index_dataset(dataset) as index:
        assert _score(results, index, tmp_path / "index.jsonl", plan) == expected
    assert (tmp_path / "index.jsonl").read_bytes() == (tmp_path / "dict.jsonl").read_bytes()


def test_a_tally_numbered_by_item_equals_one_keyed_by_id() -> None:
    lines = [TallyLine(row | {"scores": {"a": {"value": float(k % 3 == 0)}, "b": {"value": None, "error": row["status"] == "error"}}})
             for k, row in enumerate(result_rows(50, seed=1))]
    for line in lines:
        line.metadata = {"level": GROUPS[hash(line.id) % len(GROUPS)]}
    by_id = ScoreTally(["a", "b"], reducer="mean", group_by="level")
    by_number = ScoreTally(["a", "b"], reducer="mean", group_by="level")
    numbers: dict[str, int] = {}
    for line in lines:
        by_id.add(line)
        by_number.add(line, item=numbers.setdefault(line.id, 1000 - 7 * len(numbers)))
    reduced = by_id.reduced()
    assert by_number.reduced() == reduced and by_number.reduced().failed == reduced.failed
    assert by_number.scores() == by_id.scores() == by_id.scores(reduced)
    assert by_number.groups() == by_id.groups() == by_id.groups(reduced)
    assert by_number.group_counts() == by_id.group_counts()
    with pytest.raises(ValueError, match="item= for every line or for none"):
        by_number.add(lines[0])
    with pytest.raises(ValueError, match="item= for every line or for none"):
        by_id.add(lines[0], item=1)


# ---- compare ------------------------------------------------------------------------------


def compare_rows(items: int, seed: int, *, late: bool) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for i in range(items):
        line: dict[str, Any] = {
            "id": f"c{i:04d}", "status": "ok", "session_id": f"s{i}", "final_response": "x", "finish_reason": "completed",
            "subagents": [], "approvals": [], "questions": [], "attempts": 1, "duration_s": round(rnd.uniform(0.1, 3), 3),
            "error": None, "metadata": {},
            "scores": {"exact": {"value": float(rnd.random() < 0.5)}, "f1": {"value": rnd.choice([1.0, 2 / 3, 0.5])}},
            "usage": {"input_tokens": rnd.randint(1, 9), "output_tokens": 2, "total_tokens": 100 + i % 3},
        }
        if late and i >= items - 5:  # the first epoch other than 1, status other than ok, cost: near the end
            line["cost_usd"] = 0.5
            line["epoch"] = 1 if i % 2 else 2
            if i == items - 2:
                line["status"] = "error"
                line["scores"] = {"exact": {"value": None, "error": True}}
        out.append(line)
    return out


@pytest.mark.parametrize("late", [False, True])
def test_compare_does_not_depend_on_the_candidate_order(tmp_path: Path, late: bool) -> None:
    base_rows, candidate_rows = compare_rows(300, 1, late=late), compare_rows(300, 2, late=late)
    base = write_jsonl(tmp_path / "base.jsonl", base_rows)
    same_order = write_jsonl(tmp_path / "cand.jsonl", candidate_rows)
    shuffled_rows = list(candidate_rows)
    random.Random(4).shuffle(shuffled_rows)
    shuffled = write_jsonl(tmp_path / "shuffled.jsonl", shuffled_rows)
    columns = read_run(base, unique=True)
    first = compare_runs(columns, read_run(same_order, unique=True), labels=("b", "c"))
    second = compare_runs(columns, read_run(shuffled, unique=True), labels=("b", "c"))
    assert dict(first) == dict(second)
    assert dict(first) == dict(compare_runs(base_rows, shuffled_rows, labels=("b", "c")))  # decoded lines
    assert first["pairs"] == 300 - (1 if late else 0) + (1 if late else 0)


def test_constant_columns_read_like_full_ones(tmp_path: Path) -> None:
    rows = compare_rows(40, 3, late=True)
    run = read_run(write_jsonl(tmp_path / "r.jsonl", rows), unique=True)
    assert run.epochs.tolist() == [row.get("epoch", 1) for row in rows]
    assert [run.status_names[c] for c in run.statuses.tolist()] == [row["status"] for row in rows]
    assert [None if math.isnan(v) else v for v in run.cost.tolist()] == [row.get("cost_usd") for row in rows]
    plain = read_run(write_jsonl(tmp_path / "p.jsonl", compare_rows(40, 3, late=False)), unique=True)
    assert plain.epochs.tolist() == [1] * 40 and plain.statuses.tolist() == [0] * 40
    assert np.isnan(plain.cost).all() and plain.max_epoch() == 1 and plain.unique


def test_a_duplicate_after_blank_lines_names_its_own_line(tmp_path: Path) -> None:
    rows = compare_rows(6, 5, late=False)
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(row) for row in rows[:3]) + b"\n\n\n"
                     + b"\n".join(orjson.dumps(row) for row in [*rows[3:], rows[1]]) + b"\n")
    with pytest.raises(ValueError, match=r"line 9 is not a result line: id 'c0001' \(epoch 1\) is already on an earlier line"):
        read_run(path, unique=True)


@pytest.mark.parametrize("values", [
    [3.0, 1e15, 2.0**52, -7.0, 0.0],
    [float(v) for v in range(5000)],
    [2.0**60, 1.0, 1.0],
    [0.1, 0.2, 0.3, 1e16],
    [],
])
def test_sums_of_whole_numbers_equal_fsum(values: list[float]) -> None:
    array = np.asarray(values, dtype=np.float64)
    assert _fsum(array) == math.fsum(values)
    assert math.copysign(1.0, _fsum(array)) == math.copysign(1.0, math.fsum(values))


# ---- memory (tracemalloc: what Python and numpy allocate; deterministic) ------------------


def _peak(run: Any) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def _files(directory: Path, n: int) -> tuple[Path, Path]:
    directory.mkdir()
    dataset = write_jsonl(directory / "ds.jsonl", [{"id": f"item-{i:07d}", "prompt": "q", "target": "42"} for i in range(n)])
    rows = [{"id": f"item-{i:07d}", "status": "ok", "session_id": "s", "final_response": "42" if i % 3 else "no",
             "finish_reason": "completed", "subagents": [], "approvals": [], "questions": [], "attempts": 1,
             "duration_s": 1.5 + i % 7, "error": None, "metadata": {},
             "scores": {name: {"value": float(i % 3 != 0)} for name in SCORERS},
             "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}} for i in range(n)]
    return dataset, write_jsonl(directory / "results.jsonl", rows)


def test_score_and_compare_hold_bytes_not_objects_per_line(tmp_path: Path) -> None:
    plan = make_plan(SCORERS)
    peaks = []
    for n in (200, 20_000):  # (the first: what is imported and cached once)
        dataset, results = _files(tmp_path / str(n), n)

        def score(dataset: Path = dataset, results: Path = results) -> None:
            with index_dataset(dataset) as index:
                trio.run(lambda: rescore(results, index, tmp_path / "out.jsonl", plan, scorer_workers=0))

        def compare(results: Path = results) -> None:
            compare_runs(read_run(results, unique=True), read_run(results, unique=True))

        peaks.append((_peak(score) / n, _peak(compare) / n))
    score_peak, compare_peak = peaks[-1]
    # Measured: score ~200, compare ~260 bytes a line; the paths they replaced held the
    # items, their ids and lists of every value (over 500 bytes a line each).
    assert score_peak < 300
    assert compare_peak < 350


def test_small_inputs_leave_malloc_alone(tmp_path: Path) -> None:
    from dsh_orchestra.cli._memory import map_large_blocks

    small = write_jsonl(tmp_path / "small.jsonl", [{"id": "a"}])
    assert map_large_blocks(str(small), None, str(tmp_path / "missing.jsonl")) is False

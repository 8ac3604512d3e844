"""``dsh-orchestra merge`` / ``merge_results``: shard results into one file, each (id, epoch) once.

The shards are real ``--shard I/N`` runs (the in-process simulator on trio's MockClock); the
merged file is checked against the same batch run unsharded, and its summary against the
summary of that one file (``batch --resume`` over it: nothing left to do, the same results).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings, strategies as st
from trio.testing import MockClock

from dsh_orchestra.batch import MergeError, merge_results, run_batch
from dsh_orchestra.cli import main as cli_main

from batch_support import in_process, lines_of, write_dataset

SCORING = '[regex.word]\npattern = "^[a-z]+"\n'
METRICS = ("ok", "error", "p50_s", "p95_s", "finish_reasons", "approval_outcomes", "usage", "scores", "groups")


def dataset_rows(count: int = 30) -> list[dict[str, Any]]:
    kinds = ["plain", "TICK", "E400", "ECHO", "LONG"]
    return [{"id": f"q-{i:03d}", "prompt": f"{kinds[i % len(kinds)]} {i}", "target": "answer" if i % 2 else "tock",
             "metadata": {"kind": kinds[i % len(kinds)]}} for i in range(count)]


def options(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    (tmp_path / "scoring.toml").write_text(SCORING)
    return dict(progress="none", retries=0, scorers=["exact", "includes", "regex:word"], scoring=tmp_path / "scoring.toml",
                epochs=2, group_by="kind", seed=7, **extra)


async def sharded(tmp_path: Path, dataset: Path, count: int) -> list[Path]:
    shards = []
    for index in range(count):
        out = tmp_path / f"shard-{index}.jsonl"
        await run_batch(dataset, out, in_process(), shard=(index, count), **options(tmp_path))
        shards.append(out)
    return shards


def merge(*args: str) -> int:
    return cli_main(["merge", *args])


async def test_shards_merge_into_the_dataset_s_order_with_the_summary_of_one_run(
        autojump_clock: MockClock, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", dataset_rows())
    shards = await sharded(tmp_path, dataset, 3)
    whole = tmp_path / "whole.jsonl"
    await run_batch(dataset, whole, in_process(), **options(tmp_path))

    status = merge(*map(str, reversed(shards)), "--out", str(tmp_path / "merged.jsonl"), "--dataset", str(dataset),
                   "--summary", str(tmp_path / "merged-summary.json"), "--group-by", "kind", "--seed", "7")
    assert status == 0, capsys.readouterr().err
    merged = lines_of(tmp_path / "merged.jsonl")
    # the dataset's order, each id with its epochs; the same outcomes and scores as one run
    assert [(line["id"], line["epoch"]) for line in merged] == [(row["id"], e) for row in dataset_rows() for e in (1, 2)]
    keep = ("status", "final_response", "finish_reason", "scores", "metadata")
    one = {(line["id"], line["epoch"]): {k: line[k] for k in keep} for line in lines_of(whole)}
    assert [{k: line[k] for k in keep} for line in merged] == [one[(line["id"], line["epoch"])] for line in merged]
    printed = json.loads(capsys.readouterr().out)
    assert printed["merged"] == {"shards": 3, "lines": 60, "duplicates": 0, "torn": [], "missing": []}
    # the summary of the merged file as one run has it (batch --resume over it: nothing left to do)
    again = await run_batch(dataset, tmp_path / "merged.jsonl", in_process(), resume=True, **options(tmp_path))
    one_run = again.to_json()
    written = json.loads((tmp_path / "merged-summary.json").read_text())
    for key in METRICS:
        assert written[key] == one_run[key], key
    assert written["scores"]["exact"]["n"] == 24 and written["error"] == 12 and set(written["groups"]) == {"plain", "TICK", "E400", "ECHO", "LONG"}


@pytest.fixture(scope="module")
def run_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """The lines of one scored run with epochs (made once for the property test)."""
    import trio

    root = tmp_path_factory.mktemp("merge-lines")
    dataset = write_dataset(root / "ds.jsonl", dataset_rows(12))
    trio.run(lambda: run_batch(dataset, root / "r.jsonl", in_process(), **options(root)), clock=MockClock(autojump_threshold=0))
    return (root / "r.jsonl").read_bytes().splitlines(keepends=True)


@settings(max_examples=40)
@given(data=st.data())
def test_any_sharding_and_any_order_merge_to_the_same_bytes(run_lines: list[bytes], tmp_path_factory: pytest.TempPathFactory,
                                                            data: st.DataObject) -> None:
    root = tmp_path_factory.mktemp("prop")
    count = data.draw(st.integers(1, 5), label="shards")
    ids = sorted({orjson.loads(line)["id"] for line in run_lines})
    owner = dict(zip(ids, data.draw(st.lists(st.integers(0, count - 1), min_size=len(ids), max_size=len(ids)), label="owner"), strict=True))
    copies = data.draw(st.lists(st.integers(0, count - 1), max_size=6), label="duplicated into")
    parts: list[list[bytes]] = [[] for _ in range(count)]
    for line in run_lines:  # a shard holds every epoch of its ids, as --shard I/N runs do
        parts[owner[orjson.loads(line)["id"]]].append(line)
    for index, shard in enumerate(copies):  # an id's lines also in a second shard (a copy) are written once
        parts[shard].extend(line for line in run_lines if orjson.loads(line)["id"] == ids[index % len(ids)])
    parts = [data.draw(st.permutations(part), label=f"order of shard {i}") for i, part in enumerate(parts)]
    files = []
    for index, part in enumerate(parts):
        if part:
            path = root / f"s{index}.jsonl"
            path.write_bytes(b"".join(part))
            files.append(path)
    files = data.draw(st.permutations(files), label="shard order")
    report = merge_results(files, root / "out.jsonl")
    want = sorted(run_lines, key=lambda line: (orjson.loads(line)["id"], orjson.loads(line).get("epoch", 1)))
    assert (root / "out.jsonl").read_bytes() == b"".join(want)
    assert report.lines == len(run_lines)


def write(path: Path, lines: list[dict[str, Any]] | str) -> Path:
    path.write_text(lines if isinstance(lines, str) else "".join(json.dumps(line) + "\n" for line in lines))
    return path


def line(item_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": item_id, "status": "ok", "final_response": "x", "duration_s": 0.1, **extra}


def refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> str:
    status = merge(*args)
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()  # nothing written
    return err


def test_bad_shards_are_refused_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out.jsonl")
    good = write(tmp_path / "good.jsonl", [line("a"), line("b")])
    notes = write(tmp_path / "notes.jsonl", [line("c"), {"note": "not a result"}])
    assert "notes.jsonl: line 2 is not a result line" in refused(capsys, tmp_path, str(good), str(notes), "--out", out)
    empty = write(tmp_path / "empty.jsonl", "")
    assert "empty.jsonl: holds no result line" in refused(capsys, tmp_path, str(good), str(empty), "--out", out)
    other = write(tmp_path / "other.jsonl", [line("c"), line("b", final_response="y")])
    err = refused(capsys, tmp_path, str(good), str(other), "--out", out)
    assert "other.jsonl: line 2: id 'b' epoch 1 is also at" in err and "good.jsonl: line 2" in err
    assert "does not exist" in refused(capsys, tmp_path, str(good), str(tmp_path / "nope.jsonl"), "--out", out)
    assert "SHARD 1" in refused(capsys, tmp_path, str(good), "--out", str(good))  # the output is an input
    write(tmp_path / "out.jsonl", [line("z")])
    assert merge(str(good), "--out", out) == 2 and "already exists" in capsys.readouterr().err
    assert (tmp_path / "out.jsonl").read_text() == json.dumps(line("z")) + "\n"  # not overwritten


def test_configurations_and_epochs_must_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out.jsonl")
    a = write(tmp_path / "a.jsonl", [line("a")])
    b = write(tmp_path / "b.jsonl", [line("b")])
    (tmp_path / "a.jsonl.run.json").write_text(json.dumps({"scorers": ["exact"], "model": "m1"}))
    (tmp_path / "b.jsonl.run.json").write_text(json.dumps({"scorers": ["exact"], "model": "m2"}))
    err = refused(capsys, tmp_path, str(a), str(b), "--out", out)
    assert "different configurations (model differ" in err
    (tmp_path / "b.jsonl.run.json").write_text(json.dumps({"scorers": ["exact"], "model": "m1"}))
    assert merge(str(a), str(b), "--out", out) == 0
    assert json.loads((tmp_path / "out.jsonl.run.json").read_text()) == {"scorers": ["exact"], "model": "m1"}
    (tmp_path / "out.jsonl").unlink()
    c = write(tmp_path / "c.jsonl", [line("c", epoch=1), line("c", epoch=2)])
    assert "highest epoch is 1, another shard's 2" in refused(capsys, tmp_path, str(a), str(c), "--out", out)


def test_the_dataset_orders_and_lists_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out.jsonl")
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": i, "prompt": "p"} for i in ("c", "a", "b", "d")])
    one = write(tmp_path / "one.jsonl", [line("a"), line("c")])
    # a torn last line is left out, as --resume leaves it: that item has no line
    two = write(tmp_path / "two.jsonl", json.dumps(line("b")) + "\n" + json.dumps(line("d"))[:-5])
    err = refused(capsys, tmp_path, str(one), str(two), "--out", out, "--dataset", str(dataset))
    assert "1 item(s) of the dataset have no line in any shard: 'd'" in err and "--allow-missing" in err
    assert merge(str(one), str(two), "--out", out, "--dataset", str(dataset), "--allow-missing") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["merged"]["missing"] == [{"id": "d", "epoch": 1}] and printed["merged"]["torn"] == [str(two)]
    assert [x["id"] for x in lines_of(tmp_path / "out.jsonl")] == ["c", "a", "b"]
    (tmp_path / "out.jsonl").unlink()
    stranger = write(tmp_path / "stranger.jsonl", [line("zz")])
    assert "id(s) 'zz' are not in the dataset" in refused(capsys, tmp_path, str(one), str(stranger), "--out", out,
                                                          "--dataset", str(dataset), "--allow-missing")


def test_the_python_api_raises_merge_error(tmp_path: Path) -> None:
    with pytest.raises(MergeError, match="at least one shard"):
        merge_results([], tmp_path / "out.jsonl")
    a = write(tmp_path / "a.jsonl", [line("a")])
    with pytest.raises(MergeError, match=r"epoch_reducer='pass@2' needs k <= the epochs in the shards \(1\)"):
        from dsh_orchestra.eval import make_plan

        merge_results([a], tmp_path / "out.jsonl", plan=make_plan((), epochs=2, reducer="pass@2"))

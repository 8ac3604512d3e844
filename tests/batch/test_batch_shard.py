"""Sharding: a stable hash of the id splits a dataset into N disjoint shards that cover it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from trio.testing import MockClock

from dsh_orchestra.batch import in_shard, parse_shard, run_batch, stable_hash

from batch_support import by_id, in_process, items, lines_of, write_dataset


@pytest.mark.parametrize(("text", "expected"), [("0/1", (0, 1)), ("0/4", (0, 4)), ("3/4", (3, 4)), ("12/100", (12, 100))])
def test_parse_shard(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["", "1", "4/4", "5/4", "-1/4", "1/0", "0/-2", "a/b", "1/2/3", "1.5/4", "/4", "1/"])
def test_bad_shard_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="I/N with 0 <= I < N"):
        parse_shard(text)


def test_stable_hash_is_the_same_everywhere() -> None:
    """Fixed values (sha256 of the UTF-8 id, first 8 bytes) and the same in a fresh interpreter."""
    assert stable_hash("item-1") == int.from_bytes(__import__("hashlib").sha256(b"item-1").digest()[:8], "big")
    code = "from dsh_orchestra.batch import stable_hash; print(stable_hash('item-1'), stable_hash('名前'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert other.stdout.split() == [str(stable_hash("item-1")), str(stable_hash("名前"))]


@given(ids=st.lists(st.text(min_size=1), unique=True, max_size=50), count=st.integers(min_value=1, max_value=16))
def test_shards_partition_any_ids(ids: list[str], count: int) -> None:
    """Every id is in exactly one shard of N."""
    for item_id in ids:
        assert sum(in_shard(item_id, (i, count)) for i in range(count)) == 1
    assert all(in_shard(i, None) for i in ids)


def test_shards_are_balanced() -> None:
    ids = [f"id-{n}" for n in range(4000)]
    sizes = [sum(in_shard(i, (s, 4)) for i in ids) for s in range(4)]
    assert sum(sizes) == 4000 and min(sizes) > 850


async def test_concatenated_shard_results_give_each_id_once(autojump_clock: MockClock, tmp_path: Path) -> None:
    """Three independent runs with --shard I/3 (no coordinator): concatenated, every id once."""
    dataset = write_dataset(tmp_path / "ds.jsonl", items(60))
    combined: list[dict[str, object]] = []
    for index in range(3):
        out = tmp_path / f"shard-{index}.jsonl"
        summary = await run_batch(dataset, out, in_process(), shard=(index, 3), progress="none")
        shard_lines = lines_of(out)
        assert summary.total == len(shard_lines) > 0
        assert all(in_shard(str(line["id"]), (index, 3)) for line in shard_lines)
        combined.extend(shard_lines)
    (tmp_path / "all.jsonl").write_text("".join(__import__("json").dumps(x) + "\n" for x in combined))
    assert set(by_id(tmp_path / "all.jsonl")) == {f"item-{i:05d}" for i in range(60)}

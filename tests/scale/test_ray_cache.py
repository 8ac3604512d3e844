"""The response cache with ``--epochs N`` under ``--ray``: node gateways key it by the item's epoch
as the local gateway does (the driver tells the node's gateway the session's epoch before the
attempt). The real runtime on the scripted model, through the CLI, one local Ray instance.

``test_epochs_record_and_replay_on_ray_as_on_one_machine``: three items (one spawning a
subagent: its calls take its parent's epoch) over two epochs:

* recorded on Ray (``--cache-mode record``): one cache entry per call the model answered, so
  the two epochs' identical requests are two entries (they were one before);
* replayed on Ray with the model stopped: every line's ``final_response`` and ``scores`` byte
  for byte the recorded run's, every call a cache hit, none upstream;
* replayed by the same batch without Ray from that cache: every call a hit too (the node
  gateways' keys are the local gateway's);
* recorded on Ray with ``--cache-epochs shared``: the second epoch's requests identical to the
  first's share its entries, the same entries as the same batch without Ray records.
"""

from __future__ import annotations

import json
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.gateway import CACHE_FILE_NAME
from dsh_orchestra.testing import open_fake_model, parse_script

from scale_support import RayCluster, real_batch, write_dataset
from scored_scenario_support import SCRIPT

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.integration]

KEY = "sk-raycache-test-real-key-0123456789abcdef"
ITEMS = [{"id": "a", "prompt": "What is the capital of France?", "target": "Paris"},
         {"id": "b", "prompt": "What is 6 x 7?", "target": "42"},
         {"id": "c", "prompt": "SPAWN a reviewer", "target": "children done"}]


async def batch(tmp_path: Path, name: str, base_url: str, ray: str | None, *flags: str) -> trio.CompletedProcess[bytes]:
    """``batch --runtime dsh --epochs 2 --score includes`` into ``NAME.jsonl`` (summary ``NAME.json``)."""
    home = tmp_path / "home"  # one home for every run (one after the other): the requests do not differ by it
    home.mkdir(exist_ok=True)
    return await real_batch(tmp_path, f"{name}.jsonl", f"{name}.json", str(home), "--epochs", "2", "--score", "includes",
                            *flags, key=KEY, base_url=base_url, ray=ray)


def answers(path: Path) -> dict[tuple[str, int], bytes]:
    """Each (id, epoch)'s final response and scores, as bytes."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(line["status"] == "ok" for line in lines), lines
    return {(line["id"], line["epoch"]): json.dumps([line["final_response"], line["scores"]]).encode() for line in lines}


def keys(cache: Path) -> set[str]:
    with sqlite3.connect(cache / CACHE_FILE_NAME) as db:
        return {key for (key,) in db.execute("SELECT key FROM entries")}


def model_of(tmp_path: Path, name: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((tmp_path / f"{name}.json").read_text())["model"]
    return summary


async def test_epochs_record_and_replay_on_ray_as_on_one_machine(ray_cluster: RayCluster, tmp_path: Path) -> None:
    write_dataset(tmp_path / "ds.jsonl", ITEMS)
    cache, shared = tmp_path / "record", tmp_path / "shared"
    requests: dict[str, int] = {}
    for name, ray, flags in (("record", ray_cluster.address, ()), ("shared", ray_cluster.address, ("--cache-epochs", "shared")),
                             ("local-shared", None, ("--cache-epochs", "shared"))):
        # a model of its own for each recording: its tool-use ids count from 1 again
        async with open_fake_model(parse_script(tomllib.loads(SCRIPT))) as model:
            base_url = model.base_url
            done = await batch(tmp_path, name, base_url, ray, "--cache", str(tmp_path / name), "--cache-mode", "record",
                               *flags)
            assert done.returncode == 0, done.stderr.decode()[-3000:]
            requests[name] = len(model.requests)
    calls = requests["record"]
    assert requests["shared"] == requests["local-shared"] == calls  # record mode reads nothing
    want = answers(tmp_path / "record.jsonl")
    assert sorted(want) == [(i, e) for i in "abc" for e in (1, 2)]
    assert calls >= 2 * 4  # a, b and the spawning item's parent and child, in each epoch
    assert len(keys(cache)) == calls  # each epoch's calls are entries of their own
    # shared: the second epoch's requests that are identical to the first's (a's, b's, the spawning
    # item's first) are the same entries, on Ray as without it
    assert len(keys(shared)) <= calls - 3 and keys(shared) == keys(tmp_path / "local-shared")
    assert model_of(tmp_path, "record")["upstream_calls"] == calls

    # the model is stopped: nothing can be sent upstream
    for name, ray in (("replay", ray_cluster.address), ("local-replay", None)):
        done = await batch(tmp_path, name, base_url, ray, "--cache", str(cache), "--cache-mode", "replay")
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        assert answers(tmp_path / f"{name}.jsonl") == want  # byte for byte, each epoch
        counted = model_of(tmp_path, name)
        assert counted["calls"] == counted["cache_hits"] == calls and counted["upstream_calls"] == 0
        assert counted["errors"] == 0
    assert len(keys(cache)) == calls  # replay wrote nothing

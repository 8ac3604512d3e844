"""Learned pacing on a node gateway under ``--ray`` (one local Ray instance, the real runtime,
the CLI): a batch against the fake model's quota (``rate_limit``) absorbs the quota's 429s
without a herd after each hold: no call is passed back to the runtime, every item ends ok, and
the 429s stay few (the node gateway before learned pacing: about one per call, bench/ray_pace.py
and docs/benchmarks.md), each of them counted by the gateway (the model's count)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh_orchestra.testing import open_fake_model

from scale_support import RayCluster, lines_of, real_batch, write_dataset

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.integration]

KEY = "sk-raypace-test-real-key-0123456789abcdef"
ITEMS = 60
RATE = 10.0


async def test_a_node_gateway_paces_after_429s_instead_of_passing_them_back(ray_cluster: RayCluster, tmp_path: Path) -> None:
    write_dataset(tmp_path / "ds.jsonl", [{"id": f"q{i:02d}", "prompt": f"question {i}"} for i in range(ITEMS)])
    async with open_fake_model(rate_limit=RATE) as model:
        done = await real_batch(tmp_path, "r.jsonl", "summary.json", str(tmp_path / "home-{actor}"), "--runtimes", "2",
                                "--concurrency", "32", key=KEY, base_url=model.base_url, ray=ray_cluster.address)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        limited, answered = model.rate_limited, len(model.spans)
    lines = lines_of(tmp_path / "r.jsonl")
    assert sorted(line["id"] for line in lines) == [f"q{i:02d}" for i in range(ITEMS)]
    assert all(line["status"] == "ok" and line["attempts"] == 1 for line in lines)
    totals = json.loads((tmp_path / "summary.json").read_text())["model"]
    assert totals["nodes"] == 1 and answered == ITEMS
    assert totals["calls"] == totals["upstream_calls"] == ITEMS  # no 429 passed back to a runtime
    assert limited > 0, "the quota was never reached: nothing measured"
    assert totals["retries"] == limited <= ITEMS // 3, f"{limited} 429s for {ITEMS} calls"  # few (5-10 seen; main: 65), every one absorbed

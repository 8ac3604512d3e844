"""Evaluations on Ray: the same scores, usage, epochs and workspaces as on the local pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.scale import RayExecutor

from scale_support import RayCluster, by_id, lines_of, sim_spec, write_dataset

ray = pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra: pip install '.[test,ray]')")
pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance at a time (tests/conftest.py)


def scored(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["id"], line.get("epoch"), line["status"], line["scores"], line["usage"], line.get("cost_usd"))


async def test_scores_epochs_usage_and_workspaces_on_ray(ray_cluster: RayCluster, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"id": f"r{i}", "prompt": ["TICK", "E400", "SPAWN", "plain"][i % 4] + f" {i}", "target": "tock",
             "metadata": {"k": i % 2}} for i in range(8)]
    dataset = write_dataset(tmp_path / "ds.jsonl", rows)
    prices = tmp_path / "prices.toml"
    prices.write_text('["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 1.0\noutput_per_mtok = 3.0\n')
    (tmp_path / "rayscorer.py").write_text(
        "from dsh_orchestra.eval import Score\n"
        "def has_template(item, result):\n"
        "    return (result.workspace / 'seed.txt').read_text() == 'seed'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    template = tmp_path / "template"
    template.mkdir()
    (template / "seed.txt").write_text("seed")
    options = dict(progress="none", retries=0, scorers=["exact", "includes", "rayscorer:has_template"], epochs=2,
                   epoch_reducer="max", group_by="k", prices=prices, workspace_template=template)
    for name in ("local", "ray"):
        (tmp_path / name).mkdir()
    local = await run_batch(dataset, tmp_path / "local.jsonl", sim_spec(tmp_path / "local"), BatchOptions(**options))
    on_ray = await run_batch(dataset, tmp_path / "ray.jsonl", sim_spec(tmp_path / "ray"), BatchOptions(**options),
                             executor=RayExecutor(actors=2, runtimes_per_actor=1))
    want = sorted(scored(line) for line in lines_of(tmp_path / "local.jsonl"))
    got = sorted(scored(line) for line in lines_of(tmp_path / "ray.jsonl"))
    assert got == want and len(got) == 16
    assert {line["scores"]["rayscorer:has_template"]["value"] for line in lines_of(tmp_path / "ray.jsonl") if line["status"] == "ok"} == {1.0}
    assert on_ray.to_json()["scores"] == local.to_json()["scores"]
    assert on_ray.to_json()["groups"] == local.to_json()["groups"]
    assert on_ray.usage == local.usage and on_ray.usage["total_tokens"] > 0
    assert on_ray.cost_usd == pytest.approx(local.cost_usd)
    assert on_ray.run is not None and on_ray.run["epochs"] == 2

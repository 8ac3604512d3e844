"""The recycling options reach the pools the Ray actors host (``HostConfig.for_items``): on a
``PoolHost`` without Ray, and in a batch on a small local Ray instance."""

from __future__ import annotations

from pathlib import Path

import pytest
from scale_support import (
    RayCluster,
    by_id,
    our_runtimes,
    sim_spec,
    tick_items,
    write_dataset,
)

from dsh_orchestra.batch import BatchItem, BatchOptions
from dsh_orchestra.scale import HostConfig, PoolHost, run_batch_ray, split_spec


def test_a_host_recycles_its_runtimes(tmp_path: Path) -> None:
    options = BatchOptions(max_sessions_per_runtime=3, max_runtime_rss_mib=8192, retries=5)
    actor_spec, _, secrets = split_spec(sim_spec(tmp_path))
    config = HostConfig.for_items(actor_spec, options, slot=0, runtimes=1, in_flight=1)
    assert (config.options.max_sessions_per_runtime, config.options.max_runtime_rss_mib) == (3, 8192)
    host = PoolHost(config, secrets)
    host.start()
    try:
        attempts = [host.process(BatchItem(id=f"h{n}", prompt=f"TICK {n}"), f"session-h{n}") for n in range(7)]
        assert host.statistics()["recycled"] == 2
    finally:
        host.close()
    assert all(a.error is None and a.turn is not None and a.turn.finish_reason == "completed" for a in attempts)
    assert our_runtimes(tmp_path) == []


async def test_a_batch_on_ray_recycles_the_actors_runtimes(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """12 items on 2 actors of 1 runtime, 3 sessions per runtime: every item ok in one attempt,
    and at least 5 runtime processes were started (each start notes its pid in a file)."""
    pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra)")
    started = tmp_path / "started.txt"
    base = sim_spec(tmp_path)
    spec = base.evolve(command=("/bin/sh", "-c", f'echo $$ >> "{started}"; exec "$@"', "sh", *base.argv()))
    dataset = write_dataset(tmp_path / "ds.jsonl", tick_items(12))
    summary = await run_batch_ray(dataset, tmp_path / "r.jsonl", spec, BatchOptions(
        progress="none", max_sessions_per_runtime=3), actors=2, runtimes_per_actor=1)
    results = by_id(tmp_path / "r.jsonl")
    assert (summary.ok, summary.retries) == (12, 0)
    assert {(r["status"], r["attempts"]) for r in results.values()} == {("ok", 1)}
    assert len(set(started.read_text().split())) >= 5

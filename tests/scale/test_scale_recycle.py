"""The recycling options reach the pools the Ray actors host (``HostConfig.for_items``), tested
on a ``PoolHost`` without Ray."""

from __future__ import annotations

from pathlib import Path

from scale_support import our_runtimes, sim_spec

from dsh_orchestra.batch import BatchItem, BatchOptions
from dsh_orchestra.scale import HostConfig, PoolHost, split_spec


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

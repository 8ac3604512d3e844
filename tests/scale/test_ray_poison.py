"""A poison item on Ray actors: the same outcome as on the local pool (the actors run
``attempt_on_pool``, which reports the runtime's death in the picklable ``Attempt``; the run
loop on the driver asks for ``alone`` attempts). One actor with one runtime, four in flight."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from dsh_orchestra.batch import ALONE_AFTER, RUNTIME_CRASHED, BatchOptions
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.scale import run_batch_ray

from poison_support import POISON_SCRIPT, poison_rows
from scale_support import ENV, RayCluster, by_id, write_dataset

ray = pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra: pip install '.[test,ray]')")
pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance at a time (tests/conftest.py)


async def test_a_poison_item_fails_alone_on_ray(ray_cluster: RayCluster, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", poison_rows(8))
    script = tmp_path / "script.toml"
    script.write_text(POISON_SCRIPT)
    home = tmp_path / "dsh-home"
    home.mkdir()
    spec = RuntimeSpec.simulator(script=script, dsh_home=home, cwd=tmp_path, env=dict(ENV),
                                 shutdown_timeout=0.5, eof_grace=0.5, terminate_grace=0.5)
    out = tmp_path / "r.jsonl"
    with trio.fail_after(300):
        summary = await run_batch_ray(dataset, out, spec, BatchOptions(
            retries=1, retry_backoff=0.05, concurrency=4, progress="none"), actors=1, runtimes_per_actor=1)
    results = by_id(out)
    poison = results.pop("poison")
    assert {r["status"] for r in results.values()} == {"ok"}
    assert poison["status"] == "error" and poison["error"]["type"] == RUNTIME_CRASHED
    assert poison["attempts"] == ALONE_AFTER + 2
    assert "exit status 3" in poison["error"]["message"]
    assert summary.ok == 8 and summary.error == 1

"""`ctl concurrency N` on a batch of the REAL runtime whose model calls go through the model
gateway (on by default for the real dsh) on the scripted fake model: the batch's limit and the
gateway's model concurrency both become N (the gateway's fixed at N), as the run's summary says."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.batch import BatchOptions, ControlError, run_batch, send_command
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script

from batch_support import by_id, script_of, write_dataset

pytestmark = pytest.mark.integration

SLOW_SCRIPT = """
default_reply = "slow answer"

[[rules]]
name = "slow"
match = "SLOW"
reply = "slow answer"
delay = 1.0
"""


@pytest.fixture
def model_script() -> Script:
    return script_of(SLOW_SCRIPT)


async def test_ctl_concurrency_sets_the_gateway_limit(tmp_path: Path, fake_model: FakeModelServer,
                                                      dsh_spec: Callable[..., RuntimeSpec]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": f"slow-{i}", "prompt": f"SLOW {i}"} for i in range(8)])
    out = tmp_path / "results.jsonl"
    answers: list[dict[str, Any]] = []

    async def retune() -> None:
        while True:  # the control socket is there once the runtime started and the first items go
            try:
                status = await trio.to_thread.run_sync(partial(send_command, out, "status"))
            except ControlError:
                await trio.sleep(0.2)
                continue
            if status["model_concurrency"] is not None and status["in_flight"]:
                break
            await trio.sleep(0.2)
        answers.append(status)
        answers.append(await trio.to_thread.run_sync(partial(send_command, out, "concurrency", 1)))

    with trio.fail_after(240):  # a dsh start took 37-60+ s under disk contention
        async with trio.open_nursery() as nursery:
            nursery.start_soon(retune)
            summary = await run_batch(dataset, out, dsh_spec(), BatchOptions(runtimes=1, progress="none", timeout=60, control=True))
    before, after = answers
    assert before["model_concurrency"] == 8  # the gateway's auto start (docs/gateway.md)
    assert after["concurrency"] == 1 and after["model_concurrency"] == 1
    assert summary.ok == 8 and all(r["status"] == "ok" for r in by_id(out).values())
    concurrency = summary.model["concurrency"] if summary.model else {}
    assert concurrency["mode"] == "fixed" and concurrency["final"] == 1  # the gateway ran on at 1
    assert [limit for _, limit in concurrency["changes"]][-1] == 1

"""One batch end to end on the real bundled runtime (``dsh --profile sdk``) with the scripted model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script

from batch_support import RESULT_KEYS, by_id, script_of, write_dataset

pytestmark = pytest.mark.integration

REAL_SCRIPT = """
default_reply = "real answer"

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children done"

[[rules.spawn]]
description = "child task"
prompt = "CHILD: review the file"
reply = "child reviewed"

[[rules]]
name = "bad-request"
match = "E400"
fail = "http-400"

[[rules]]
name = "long"
match = "LONG"
reply = "cut"
max_tokens = true
"""


@pytest.fixture
def model_script() -> Script:
    return script_of(REAL_SCRIPT)


async def test_batch_on_the_real_runtime(tmp_path: Path, fake_model: FakeModelServer,
                                         dsh_spec: Callable[..., RuntimeSpec]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [
        *({"id": f"plain-{i}", "prompt": f"question {i}", "metadata": {"i": i}} for i in range(4)),
        {"id": "spawn", "prompt": "SPAWN one child"},
        {"id": "bad", "prompt": "E400 now"},
        {"id": "long", "prompt": "LONG please"},
        {"id": "own", "prompt": "question own", "session_id": "real-own-session"},
    ])
    out = tmp_path / "results.jsonl"
    with trio.fail_after(240):  # a dsh start took 37-60+ s under disk contention
        summary = await run_batch(dataset, out, dsh_spec(), BatchOptions(runtimes=2, progress="none", timeout=60))
    results = by_id(out)
    # "model": the item's calls through the model gateway (on by default for the real dsh)
    assert len(results) == 8 and all(list(r) == [*RESULT_KEYS, "model"] for r in results.values())
    for i in range(4):
        plain = results[f"plain-{i}"]
        assert (plain["status"], plain["final_response"], plain["finish_reason"]) == ("ok", "real answer", "completed")
        assert plain["metadata"] == {"i": i} and plain["attempts"] == 1
    spawn = results["spawn"]
    assert spawn["status"] == "ok" and spawn["final_response"] == "children done"
    [child] = spawn["subagents"]
    assert (child["status"], child["stop_reason"], child["text"]) == ("ok", "completed", "child reviewed")
    bad = results["bad"]
    assert bad["status"] == "error" and bad["finish_reason"] == "error"
    assert bad["error"]["type"] == "TurnFailed" and bad["error"]["message"].startswith("INVALID_REQUEST")
    assert results["long"]["finish_reason"] == "max-tokens" and results["long"]["status"] == "ok"
    assert results["own"]["session_id"] == "real-own-session" and results["own"]["status"] == "ok"
    assert (summary.total, summary.ok, summary.error) == (8, 7, 1)
    assert summary.finish_reasons == {"completed": 6, "error": 1, "max-tokens": 1}
    sessions = {r.session_id for r in fake_model.requests}
    assert {results[k]["session_id"] for k in results} <= sessions

"""Scoring batches on the real runtime (bundled ``dsh``) driven by the scripted model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script, load_script

from eval_support import lines_of, write_jsonl

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CODING = ROOT / "recipes" / "eval_coding"


@pytest.fixture
def model_script() -> Script:
    return load_script(CODING / "scenario.toml")


async def test_eval_coding_on_the_real_runtime_fixes_the_bug(
    tmp_path: Path, fake_model: FakeModelServer, dsh_spec: Callable[..., RuntimeSpec], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scripted model's ``write`` lands in the item's own workspace copy; the scorer's tests pass."""
    monkeypatch.syspath_prepend(str(CODING))
    dataset = write_jsonl(tmp_path / "ds.jsonl", [
        {"id": "fix", "prompt": "FIX: the tests in test_calc.py fail. Fix the bug in calc.py.", "metadata": {"tests": "test_calc"}},
        {"id": "check", "prompt": "CHECK: read calc.py", "metadata": {"tests": "test_calc.AddTest"}},
    ])
    out = tmp_path / "results.jsonl"
    with trio.fail_after(120):
        summary = await run_batch(dataset, out, dsh_spec(), BatchOptions(
            progress="none", timeout=90, scorers=["checks:tests_pass"], workspace_template=CODING / "template",
            keep_workspaces=True,
        ))
    lines = {line["id"]: line for line in lines_of(out)}
    fix = lines["fix"]
    assert fix["status"] == "ok", fix
    assert fix["scores"]["checks:tests_pass"]["value"] == 1.0, fix["scores"]
    assert "a - b" in (Path(fix["workspace"]) / "calc.py").read_text()
    assert "b - a" in (CODING / "template" / "calc.py").read_text()  # the template is untouched
    assert lines["check"]["scores"]["checks:tests_pass"]["value"] == 1.0
    assert summary.scores["checks:tests_pass"]["mean"] == 1.0
    assert all(line["usage"]["total_tokens"] > 0 for line in lines.values())

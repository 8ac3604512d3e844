"""The eval_coding recipe's scorer: run the item's tests in the item's own workspace copy."""

from __future__ import annotations

import subprocess
import sys

from dsh_orchestra.eval import Score


def tests_pass(item, result):
    """1 when ``python -m unittest <metadata.tests>`` passes in the item's workspace, else 0."""
    if result.workspace is None:
        return Score(None, explanation="no workspace: run the batch with --workspace-template template")
    tests = item.metadata.get("tests", "test_calc")
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "-q", tests], cwd=result.workspace,
        capture_output=True, text=True, timeout=60,
    )
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return Score(1 if done.returncode == 0 else 0, answer=last, explanation=f"unittest {tests}: exit {done.returncode}")

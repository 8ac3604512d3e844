"""docs/examples/durable_workflow.py (shown in docs/workflows.md) runs and prints what the docs say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "durable_workflow.py"
DOC = EXAMPLE.parents[1] / "workflows.md"


def test_the_durable_example_runs() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "interrupted [('approve:0', ('yes', 'no'))]",
        "resumed draft",
        "started approve",
        "finished approve",
        "started publish",
        "finished publish",
        "ok published",
    ]


def test_the_docs_embed_the_example_verbatim() -> None:
    doc = DOC.read_text(encoding="utf-8")
    body = EXAMPLE.read_text(encoding="utf-8")
    start = body.index("wf = Workflow(")
    end = body.index('\n\nif __name__')
    assert body[start:end].strip() in doc

"""The programs of docs/examples/ run and print what their documents say, and the documents quote
them verbatim (the notebook: tests/embed/test_notebook.py; rayjob.yaml: tests/scale/test_cluster_docs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from contained_tmp import contained_tmp
from docs_blocks import ROOT


@attrs.frozen
class Example:
    name: str
    document: str
    quoted: tuple[str, str | None]  # the part the document quotes: from this text to that one (None: the end)
    prints: list[str]
    timeout: float

    @property
    def path(self) -> Path:
        return ROOT / "docs" / "examples" / self.name


EXAMPLES = [
    pytest.param(Example("runtime_quickstart.py", "runtime.md", ("async def main()", None), [
        "turn (1,) completed 'Hello from the fake model'",
        "turn (2, 3) 'the helper is done' child said '3 files'",
        "no session/query: unknown DeepSeek Harness SDK runtime method: session/query",
        "resumed turn (4,) completed",
    ], timeout=240), marks=pytest.mark.integration, id="runtime_quickstart"),  # a dsh start took 37-60+ s under disk contention
    pytest.param(Example("durable_workflow.py", "workflows.md", ("wf = Workflow(", "\n\nif __name__"), [
        "interrupted [('approve:0', ('yes', 'no'))]",
        "resumed draft",
        "started approve",
        "finished approve",
        "started publish",
        "finished publish",
        "ok published",
    ], timeout=120), id="durable_workflow"),
]


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_runs_and_prints_what_the_docs_say(example: Example, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(example.path)], capture_output=True, text=True, timeout=example.timeout,
                          cwd=tmp_path, stdin=subprocess.DEVNULL, env={**os.environ, **contained_tmp(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == example.prints


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_document_quotes_the_example_verbatim(example: Example) -> None:
    """The document shows the example file; they must not drift apart."""
    body = example.path.read_text(encoding="utf-8")
    start, end = example.quoted
    quoted = body[body.index(start): body.index(end) if end is not None else None].strip()
    assert quoted in (ROOT / "docs" / example.document).read_text(encoding="utf-8")


def test_every_example_program_is_here() -> None:
    assert sorted(p.name for p in (ROOT / "docs" / "examples").glob("*.py")) == sorted(e.values[0].name for e in EXAMPLES)

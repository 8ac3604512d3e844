"""docs/examples/runtime_quickstart.py (shown in docs/runtime.md) runs and prints what the docs say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "runtime_quickstart.py"
DOC = EXAMPLE.parents[1] / "runtime.md"


async def test_the_quickstart_example_runs() -> None:
    with trio.fail_after(240):  # a dsh start took 37-60+ s under disk contention
        done = await trio.run_process([sys.executable, str(EXAMPLE)], capture_stdout=True, capture_stderr=True,
                                      check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == [
        "turn (1,) completed 'Hello from the fake model'",
        "turn (2, 3) 'the helper is done' child said '3 files'",
        "no session/query: unknown DeepSeek Harness SDK runtime method: session/query",
        "resumed turn (4,) completed",
    ]


def test_the_docs_embed_the_example_verbatim() -> None:
    """docs/runtime.md quotes the example file; they must not drift apart."""
    doc = DOC.read_text(encoding="utf-8")
    body = EXAMPLE.read_text(encoding="utf-8")
    start = body.index("async def main()")
    assert body[start:].strip() in doc

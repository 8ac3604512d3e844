"""The batch notices any change to its results file it did not make (issue 31, part 4): its own
identity, size and modification time after each write; a change stops the run (CLI: exit 75)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from dsh_orchestra.batch import BatchOptions, ResultsTamperedError, ResultsWriter, run_batch
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script

from batch_support import script_of

CLI_ENV = {"DSH_TELEMETRY_MODE": "DISABLED"}


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


@pytest.mark.parametrize("change", ["append", "truncate", "replace", "remove"])
def test_the_writer_notices_what_it_did_not_write(tmp_path: Path, change: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "old", "status": "ok"}\n')  # a resumed file: its size at open is ours
    with ResultsWriter(path) as writer:
        writer.write({"id": "a", "status": "ok"})
        writer.check()
        if change == "append":
            with path.open("a") as f:
                f.write('{"id": "forged", "status": "ok"}\n')
        elif change == "truncate":
            os.truncate(path, 3)
        elif change == "replace":
            (tmp_path / "new").write_text("x")
            os.replace(tmp_path / "new", path)
        else:
            path.unlink()
        with pytest.raises(ResultsTamperedError, match="changed by something other than this batch"):
            writer.write({"id": "b", "status": "ok"})
    if change == "append":
        assert '"b"' not in path.read_text()  # nothing more is written into a file not ours


TAMPERING_SCORER = """\
import os
def tamper(item, result):
    if item.id == "q1":
        with open(os.environ["RESULTS"], "a") as f:
            f.write('{"id": "q9", "status": "ok"}\\n')
    return 1
"""


def test_cli_exits_75_when_something_else_writes_the_results(tmp_path: Path) -> None:
    (tmp_path / "tamper.py").write_text(TAMPERING_SCORER)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "prompt": "hi"}) + "\n" for i in range(4)))
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())", "batch", "data.jsonl",
         "--out", "r.jsonl", "--no-progress", "--score", "tamper:tamper", "--concurrency", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, **CLI_ENV, "RESULTS": str(tmp_path / "r.jsonl"), "PYTHONPATH": str(tmp_path)})
    assert run.returncode == 75, run.stderr
    assert "was changed by something other than this batch" in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""  # no summary claiming success


# ---- the real runtime: an agent's write tool writes over the results file ------------------
# (the runtime asks no approval for a write inside its working directory; its write tool wants
# the file read first, so the scripted model reads it, then writes)

@pytest.fixture
def model_script(workspace: Path) -> Script:
    return script_of(f"""
default_reply = "fine"

[[rules]]
name = "tamper"
match = "TAMPER"
reply = "I wrote the results"

[[rules.tools]]
name = "read"
input = {{ file_path = "{workspace / 'results.jsonl'}" }}

[[rules.tools]]
name = "write"
input = {{ file_path = "{workspace / 'results.jsonl'}", content = "{{\\"id\\": \\"forged\\", \\"status\\": \\"ok\\"}}\\n" }}
""")


@pytest.mark.integration
async def test_an_agent_writing_the_results_file_is_detected(workspace: Path, fake_model: FakeModelServer,
                                                             dsh_spec: Callable[..., RuntimeSpec]) -> None:
    dataset = workspace.parent / "ds.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in [
        {"id": "plain", "prompt": "hello"}, {"id": "bad", "prompt": "TAMPER please"}, {"id": "after", "prompt": "hello"}]))
    out = workspace / "results.jsonl"
    with trio.fail_after(240):
        try:
            await run_batch(dataset, out, dsh_spec(), BatchOptions(progress="none", concurrency=1, timeout=60,
                                                                   sandbox="none"))  # no sandbox: detected
        except BaseException as exc:  # noqa: BLE001 - the group's leaf is checked
            caught: BaseException | None = exc
        else:
            caught = None
    assert caught is not None and isinstance(_leaf(caught), ResultsTamperedError)
    lines = out.read_text().splitlines()
    assert '"forged"' in out.read_text() and not any('"after"' in line for line in lines)  # stopped at the next write

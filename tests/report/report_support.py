"""Shared pieces of the report tests: the simulator scenario and dataset, ``cli``, ``SimRun``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import orjson

SCRIPT = r'''
default_reply = "Hello from the fake model"

[[rules]]
name = "xss"
match = "XSS"
reply = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\"> & done"

[[rules]]
name = "approve"
match = "APPROVE"
reply = "approval was {outcome}"
approval = {tool = "bash", reason = "x"}

[[rules]]
name = "deny"
match = "DENY"
reply = "write was {outcome}"
approval = {tool = "write", reason = "y"}

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children done"
[[rules.spawn]]
description = "review the code"
prompt = "child task"
reply = "child says hi"
[[rules.spawn]]
description = "test the code"
prompt = "child task two"
reply = "second child"

[[rules]]
name = "<img src=x onerror=window.pwned=4>"
match = "FAIL"
fail = "http-400"

[[rules]]
name = "slow"
regex = "^SLOW"
reply = "done slowly"
delay = 0.25

[[rules]]
name = "medium"
regex = "^MEDIUM"
reply = "done"
delay = 0.08

[[rules]]
name = "hang"
match = "HANG"
hang = true
'''

POLICY = '''
default = "rejected"

[[rules]]
name = "allow-bash"
outcome = "allowed-once"
tools = "bash"
'''

XSS_ID = "<svg onload=window.pwned=5>"

# The per-item --timeout of the simulator run: only hang-1 may reach it. A slow item needs 0.25 s
# alone; on a loaded 2-core CI machine one took over 1.5 s (the bound before), so the margin is wide.
HANG_TIMEOUT = 8


def dataset_items() -> list[dict[str, Any]]:
    """The dataset of the simulator run: plain, slow, approvals, subagents, failures, markup."""
    items: list[dict[str, Any]] = [{"id": f"plain-{i:02d}", "prompt": f"hello {i}", "metadata": {"n": i}} for i in range(14)]
    items += [{"id": f"medium-{i}", "prompt": f"MEDIUM {i}"} for i in range(6)]
    items += [{"id": f"slow-{i}", "prompt": f"SLOW {i}"} for i in range(3)]
    items += [
        {"id": "xss-response", "prompt": "XSS please </script><script>window.pwned=3</script><!--"},
        {"id": "approve-1", "prompt": "APPROVE me"},
        {"id": "approve-2", "prompt": "APPROVE me too"},
        {"id": "deny-1", "prompt": "DENY me"},
        {"id": "spawn-1", "prompt": "SPAWN two"},
        {"id": "fail-1", "prompt": "FAIL now"},
        {"id": XSS_ID, "prompt": "FAIL with markup in the id"},
        {"id": "hang-1", "prompt": "HANG forever"},
        {"id": "dir/../escape", "prompt": "hello with a path in the id"},
    ]
    return items


@attrs.frozen
class SimRun:
    directory: Path
    dataset: Path
    results: Path
    summary: Path
    audit: Path
    transcripts: Path
    report: Path
    returncode: int
    stderr: str

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.results.read_bytes().splitlines() if line.strip()]


def cli(*args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the ``dsh-orchestra`` command (the console script next to this python, else the module)."""
    script = Path(sys.executable).with_name("dsh-orchestra")
    command = [str(script)] if script.exists() else [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED"}
    return subprocess.run([*command, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)

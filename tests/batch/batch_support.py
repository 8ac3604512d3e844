"""Helpers of the batch tests: scripts, datasets, runtime specs and the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import Script, parse_script
from dsh_orchestra.testing._simulator import open_simulator_stream

BATCH_SCRIPT = """
default_reply = "answer"

[[rules]]
name = "echo"
match = "ECHO"
reply = "echo: {prompt}"

[[rules]]
name = "tick"
match = "TICK"
reply = "tock"
delay = 0.02

[[rules]]
name = "slow"
match = "SLOW"
reply = "slow done"
delay = 0.3

[[rules]]
name = "hang"
match = "HANG"
hang = true

[[rules]]
name = "bad-request"
match = "E400"
fail = "http-400"

[[rules]]
name = "long"
match = "LONG"
reply = "and then"
max_tokens = true

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children done"

[[rules.spawn]]
description = "child task"
prompt = "CHILD: review"
reply = "child says hi"

[[rules]]
name = "deploy"
match = "DEPLOY"
reply = "deploy was {outcome}"
approval = { tool = "bash", reason = "needs network" }

[[rules]]
name = "choose"
match = "CHOOSE"
reply = "you picked {answer}"
question = { id = "q1", question = "Which one?", options = ["alpha", "beta"] }
"""

RESULT_KEYS = [
    "id", "status", "session_id", "final_response", "finish_reason", "subagents", "approvals", "questions",
    "attempts", "duration_s", "error", "metadata", "usage",
]
SUMMARY_KEYS = {
    "total", "ok", "error", "resumed", "duration_s", "items_per_s", "p50_s", "p95_s", "finish_reasons",
    "approval_outcomes",
}

ALLOW_BASH = """
default = "rejected"

[[rules]]
name = "allow-bash"
outcome = "allowed-once"
tools = ["bash"]
"""

CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]


def script_of(text: str = BATCH_SCRIPT) -> Script:
    return parse_script(tomllib.loads(text), source="<test>")


def in_process(text: str = BATCH_SCRIPT, **kwargs: Any) -> RuntimeSpec:
    """The simulator in this process (virtual time works); nothing persists between runtimes."""
    script = script_of(text)
    return RuntimeSpec(connect=lambda: open_simulator_stream(script), name="sim", **kwargs)


def in_process_store(store: Path, text: str = BATCH_SCRIPT) -> RuntimeSpec:
    """In-process simulators sharing one session store (like runtimes sharing a DSH_HOME)."""
    script = script_of(text)
    return RuntimeSpec(connect=lambda: open_simulator_stream(script, store=store), name="sim")


def write_script(directory: Path, text: str = BATCH_SCRIPT) -> Path:
    path = directory / "script.toml"
    path.write_text(text)
    return path


def sim_process(directory: Path, text: str = BATCH_SCRIPT) -> RuntimeSpec:
    """The simulator as processes (``python -m dsh_orchestra.testing sim``) in a fresh DSH_HOME."""
    home = directory / "dsh-home"
    home.mkdir(exist_ok=True)
    return RuntimeSpec.simulator(
        script=write_script(directory, text), dsh_home=home, cwd=directory,
        env={"DSH_TELEMETRY_MODE": "DISABLED"}, shutdown_timeout=0.5, eof_grace=0.5, terminate_grace=0.5,
    )


def write_dataset(path: Path, items: Iterable[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in items))
    return path


def items(count: int, prompt: str = "hello", **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"item-{i:05d}", "prompt": f"{prompt} {i}", **extra} for i in range(count)]


def lines_of(path: Path) -> list[dict[str, Any]]:
    """Every line of a results file, parsed (each must be complete JSON)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_id(path: Path) -> dict[str, dict[str, Any]]:
    results = lines_of(path)
    found = {r["id"]: r for r in results}
    assert len(found) == len(results), "an id appears more than once"
    return found


def cli_args(dataset: Path, out: Path, directory: Path, *extra: str, script_text: str = BATCH_SCRIPT) -> list[str]:
    """``batch`` arguments on the simulator with the batch script and a DSH_HOME in ``directory``."""
    home = directory / "dsh-home"
    home.mkdir(exist_ok=True)
    return ["batch", str(dataset), "--out", str(out), "--runtime", "sim",
            "--script", str(write_script(directory, script_text)), "--dsh-home", str(home), *extra]


def run_cli(args: Sequence[str], *, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """The CLI as a real subprocess."""
    full_env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", **(env or {})}
    return subprocess.run([*CLI, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def result(item_id: str) -> dict[str, object]:
    return {"id": item_id, "status": "ok", "session_id": "s", "final_response": "x", "finish_reason": "completed",
            "subagents": [], "approvals": [], "attempts": 1, "duration_s": 0.1, "error": None, "metadata": {}}


class Scene:
    """A directory with a dataset, a results file, a policy, a summary and an audit log, and a
    runtime command that leaves a marker when it starts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dataset = write_dataset(root / "ds.jsonl", items(2))
        self.results = root / "res.jsonl"
        self.results.write_bytes(b"".join(orjson.dumps(result(f"item-0000{i}")) + b"\n" for i in range(2)))
        self.summary = root / "summary.json"
        self.summary.write_text('{"total": 2, "ok": 2, "error": 0}\n')
        self.audit = root / "audit.jsonl"
        self.audit.write_text("")
        self.policy = root / "policy.toml"
        self.policy.write_text('default = "rejected"\n')
        self.script = write_script(root)
        self.marker = root / "started"
        self.home = root / "home"
        self.home.mkdir()
        self.files = [self.dataset, self.results, self.summary, self.audit, self.policy, self.script]
        self.before = {path: path.read_bytes() for path in self.files}

    def runtime(self) -> list[str]:
        sim = shlex.join([sys.executable, "-m", "dsh_orchestra.testing", "sim", "--script", str(self.script)])
        command = f"sh -c {shlex.quote(f'touch {shlex.quote(str(self.marker))}; exec {sim}')}"
        return ["--runtime-command", command, "--dsh-home", str(self.home)]

    def batch(self, *extra: str, out: Path | None = None) -> list[str]:
        return ["batch", str(self.dataset), "--out", str(out or self.root / "new.jsonl"), *self.runtime(), "--no-progress", *extra]

    def unchanged(self) -> None:
        for path, data in self.before.items():
            assert path.read_bytes() == data, f"{path} was changed"
        assert not self.marker.exists(), "a runtime was started"
        assert not (self.root / "new.jsonl").exists()

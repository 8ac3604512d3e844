"""Helpers of the scale-out tests: the scenario, datasets, specs, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import orjson
import psutil
import trio

from dsh_orchestra.runtime import RuntimeSpec

SCRIPT = """
default_reply = "answer to {prompt}"

[[rules]]
name = "tick"
match = "TICK"
reply = "tock"
delay = 0.1

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
name = "hang"
match = "HANG"
hang = true

[[rules]]
name = "ask"
match = "ASK"
question = { id = "env", question = "Which environment?", options = ["staging", "production"] }
reply = "deploying to {answer}"
"""

POLICY = """
default = "rejected"

[[rules]]
name = "allow-bash"
outcome = "allowed-once"
tools = ["bash"]
"""

@attrs.frozen
class RayCluster:
    """The module's Ray instance: its address and its directory (logs under ``session_latest``)."""

    address: str
    temp_dir: Path

    @property
    def logs(self) -> Path:
        return self.temp_dir / "session_latest" / "logs"


CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]
ENV = {"DSH_TELEMETRY_MODE": "DISABLED"}


def write_script(directory: Path, text: str = SCRIPT) -> Path:
    path = directory / "script.toml"
    path.write_text(text)
    return path


def sim_spec(directory: Path, **kwargs: Any) -> RuntimeSpec:
    """The simulator as processes, with its script and a DSH_HOME in ``directory``."""
    home = directory / "dsh-home"
    home.mkdir(exist_ok=True)
    env = {**ENV, **kwargs.pop("env", {})}
    return RuntimeSpec.simulator(script=write_script(directory), dsh_home=home, cwd=directory, env=env,
                                 shutdown_timeout=0.5, eof_grace=0.5, terminate_grace=0.5, **kwargs)


def write_dataset(path: Path, items: Iterable[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in items))
    return path


def mixed_items() -> list[dict[str, Any]]:
    """Every kind of outcome: ok, turn failures, max-tokens, subagents, approvals, questions."""
    kinds = ["TICK", "E400", "LONG", "SPAWN", "DEPLOY", "ASK", "plain"]
    return [{"id": f"m-{i:03d}", "prompt": f"{kinds[i % len(kinds)]} {i}", "metadata": {"n": i}} for i in range(28)]


def tick_items(count: int) -> list[dict[str, Any]]:
    return [{"id": f"t-{i:04d}", "prompt": f"TICK {i}"} for i in range(count)]


def lines_of(path: Path) -> list[dict[str, Any]]:
    """Every line of a results file, parsed (each must be complete JSON)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_id(path: Path) -> dict[str, dict[str, Any]]:
    """The results by id; fails when an id appears twice."""
    results = lines_of(path)
    found = {r["id"]: r for r in results}
    assert len(found) == len(results), "an id appears more than once"
    return found


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def cli_args(dataset: Path, out: Path, directory: Path, *extra: str) -> list[str]:
    """``batch`` arguments on the simulator with the test script and a DSH_HOME in ``directory``."""
    home = directory / "dsh-home"
    home.mkdir(exist_ok=True)
    return ["batch", str(dataset), "--out", str(out), "--runtime", "sim",
            "--script", str(write_script(directory)), "--dsh-home", str(home), "--no-progress", *extra]


def cli_env() -> dict[str, str]:
    return {**os.environ, **ENV}


async def real_batch(tmp_path: Path, out: str, summary: str, home: str, *flags: str, key: str, base_url: str,
                     ray: str | None = None) -> subprocess.CompletedProcess[bytes]:
    """``batch ds.jsonl --runtime dsh`` in ``tmp_path`` into ``out`` (summary ``summary``, DSH_HOME
    ``home``) against the model at ``base_url`` with ``key`` as the real key, offline; on Ray at
    ``ray`` with one actor when given. Bounded at 300 s."""
    env = {**cli_env(), "DEEPSEEK_API_KEY": key, "DEEPSEEK_BASE_URL": base_url,
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    where = ["--ray", ray, "--ray-actors", "1"] if ray is not None else []
    args = ["batch", "ds.jsonl", "--out", out, "--runtime", "dsh", "--dsh-home", home, "--workspace", str(tmp_path),
            "--no-progress", "--summary", summary, "--timeout", "120", "--retries", "0", *where, *flags]
    with trio.fail_after(300):
        return await trio.run_process([*CLI, *args], cwd=tmp_path, env=env, capture_stdout=True, capture_stderr=True,
                                      check=False)


def our_runtimes(directory: Path) -> list[psutil.Process]:
    """Live simulator processes started for this test (their argv names its script)."""
    needle = str(directory)
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or ())
            if needle in cmdline and "dsh_orchestra.testing" in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            pass
    return found


def wait_until(condition: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def run_cli(args: list[str], *, cwd: Path, timeout: float = 120, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The CLI as a subprocess (``unset``: environment variables it must not inherit)."""
    env = {k: v for k, v in cli_env().items() if k not in unset}
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def running(process: psutil.Process) -> bool:
    """Alive and not a zombie (an orphan's corpse is init's to reap)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(processes: list[psutil.Process], timeout: float, what: str) -> None:
    """Wait for ``processes`` to end; kill what is left and fail, naming them."""
    deadline = time.monotonic() + timeout
    while (alive := [p for p in processes if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    names = []
    for process in alive:
        try:
            names.append(" ".join(process.cmdline())[:200] or process.name())
            process.kill()
        except psutil.Error:
            pass
    assert not alive, f"{what}: {names}"

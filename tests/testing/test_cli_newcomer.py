"""A newcomer's first commands, through the installed ``dsh-orchestra`` console script.

``sim`` takes its own options and ends cleanly at end of input; global options work after the
subcommand; mistakes are caught before any runtime starts (exit 2, the flag named, no results
file); a rerun with nothing left to do says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONSOLE = Path(sys.executable).parent / "dsh-orchestra"


def run(*args: str, cwd: Path, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED"}
    env.pop("DSH_HOME", None)
    return subprocess.run([str(CONSOLE), *args], cwd=cwd, input=stdin, capture_output=True, env=env, timeout=timeout)


def frame(id: int, method: str, params: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode() + b"\n"


def test_the_console_script_is_installed() -> None:
    assert CONSOLE.is_file()


def test_sim_help_and_options_through_the_console_script(tmp_path: Path) -> None:
    done = run("sim", "--help", cwd=tmp_path)
    assert done.returncode == 0 and b"--script FILE" in done.stdout and b"--store DIR" in done.stdout
    (tmp_path / "s.toml").write_text('default_reply = "scripted"\n')
    greet = frame(1, "initialize", {"cwd": str(tmp_path), "provider": "deepseek-official", "model": "deepseek-v4-flash"})
    done = run("sim", "--script", "s.toml", "--store", "store", "--profile", "sdk", cwd=tmp_path, stdin=greet)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    # At end of input the simulator exits at once, like dsh: a reply still queued may be dropped.
    assert all(json.loads(line)["id"] == 1 for line in done.stdout.splitlines())


def test_sim_exits_0_at_end_of_input_right_after_a_burst(tmp_path: Path) -> None:
    burst = frame(1, "initialize", {"cwd": str(tmp_path), "provider": "deepseek-official", "model": "deepseek-v4-flash"})
    burst += b"".join(frame(n, "session/prompt", {"sessionId": f"s{n}", "contentBlocks": [{"type": "text", "text": "hi"}]})
                      for n in range(2, 60))
    for _ in range(3):  # it raced: repeat
        done = run("--log-level", "info", "sim", "--store", "store", cwd=tmp_path, stdin=burst)
        assert done.returncode == 0, done.stderr.decode()
        assert b"Traceback" not in done.stderr


def test_sim_usage_errors_exit_2(tmp_path: Path) -> None:
    done = run("sim", "--script", "missing.toml", "--store", "store", cwd=tmp_path, stdin=b"")
    assert done.returncode == 2 and b"missing.toml" in done.stderr
    assert run("sim", "--bogus", cwd=tmp_path, stdin=b"").returncode == 2


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "ds.jsonl"
    path.write_text('{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": "ho"}\n')
    return path


def test_global_options_after_the_subcommand(tmp_path: Path, dataset: Path) -> None:
    done = run("batch", "ds.jsonl", "--out", "r.jsonl", "--no-progress", "--log-level", "info", "--log-file", "log.jsonl",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "log.jsonl").read_text().count('"level":"info"') >= 1
    before = run("--log-level", "debug", "policy", "replay", "--help", cwd=tmp_path)
    after = run("policy", "replay", "--help", "--log-level", "debug", cwd=tmp_path)
    assert before.returncode == after.returncode == 0
    bad = run("batch", "ds.jsonl", "--out", "x.jsonl", "--log-level", "loud", cwd=tmp_path)
    assert bad.returncode == 2 and b"--log-level" in bad.stderr and not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--script", "missing.toml"], b"--script 'missing.toml' does not exist"),
        (["--script", "."], b"--script '.' is not a file"),
        (["--script", "bad.toml"], b"--script 'bad.toml': "),
        (["--workspace", "nowhere"], b"--workspace 'nowhere' does not exist"),
        (["--workspace", "ds.jsonl"], b"--workspace 'ds.jsonl' is a file, not a directory"),
    ],
)
def test_mistakes_are_caught_before_any_runtime_starts(tmp_path: Path, dataset: Path, extra: list[str], message: bytes) -> None:
    (tmp_path / "bad.toml").write_text("rules = 3\n")
    done = run("batch", "ds.jsonl", "--out", "r.jsonl", "--no-progress", *extra, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr
    assert not (tmp_path / "r.jsonl").exists()  # no empty results file left behind


def test_a_runtime_that_cannot_start_leaves_no_empty_results_file(tmp_path: Path, dataset: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run("batch", "ds.jsonl", "--out", "r.jsonl", "--no-progress", "--dsh-home", str(home),
               "--runtime-command", "/bin/sh -c 'exit 7'", cwd=tmp_path)
    assert done.returncode == 2 and b"could not start" in done.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_the_summary_says_where_the_results_went_and_when_nothing_was_left(tmp_path: Path, dataset: Path) -> None:
    first = run("batch", "ds.jsonl", "--out", "r.jsonl", "--no-progress", "--json", cwd=tmp_path)
    summary = json.loads(first.stdout)
    assert first.returncode == 0 and summary["results"] == str(tmp_path / "r.jsonl") and summary["items_per_s"] > 0
    assert "note" not in summary
    again = run("batch", "ds.jsonl", "--out", "r.jsonl", "--no-progress", "--resume", "--json", cwd=tmp_path)
    summary = json.loads(again.stdout)
    assert again.returncode == 0 and summary["processed"] == 0 and summary["items_per_s"] is None
    note = f"nothing left to do: all 2 items were already in {tmp_path / 'r.jsonl'}"
    assert summary["note"] == note and again.stderr.decode().strip().endswith(note)

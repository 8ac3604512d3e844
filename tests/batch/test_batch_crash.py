"""Crash safety with the CLI as a real subprocess on simulator processes.

* SIGKILL of the orchestrator at random points, five times, each followed by ``--resume``:
  after every kill the results file holds only valid complete lines (at most a torn tail), and
  in the end every dataset id appears exactly once.
* SIGKILL of one runtime process mid-run: the batch still completes, the affected items took
  more than one attempt.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psutil

from dsh_orchestra.batch import read_results

from batch_support import CLI, by_id, cli_args, items, write_dataset

ENV = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED"}


def wait_for_lines(path: Path, count: int, process: subprocess.Popen[bytes], timeout: float = 30) -> bool:
    """Poll until ``path`` holds ``count`` newline-terminated lines; False when the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.005)
    raise AssertionError(f"{path} did not reach {count} lines in {timeout} s")


def kill_and_reap(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the orchestrator; its runtimes see end of input and exit on their own."""
    try:
        runtimes = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        runtimes = []
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while (alive := [p for p in runtimes if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.01)
    for leftover in alive:  # they must not outlive the orchestrator; clean up, then fail
        leftover.kill()
    assert not alive, f"runtimes outlived the killed orchestrator: {[p.pid for p in alive]}"


def running(process: psutil.Process) -> bool:
    """Alive and not a zombie (an orphan's corpse is init's to reap)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def open_turn_of(simulator: psutil.Process) -> str | None:
    """A session whose turn the simulator has begun and not ended, read from its store
    (docs/simulator.md, Persistence: a snapshot per session says whether a turn is open, and an
    owner mark ``<name>.owner`` names the simulator's pid; the store is never behind what the
    client saw, so the client has not seen that turn end either). None when it has none."""
    store = Path(simulator.environ()["DSH_HOME"]) / "sim-sessions"
    for mark in store.glob("*.json.owner"):
        try:
            if mark.read_text(encoding="ascii").strip() != str(simulator.pid):
                continue
            snapshot = json.loads(mark.with_suffix("").read_bytes())
        except (OSError, ValueError):
            continue  # a mark or snapshot of a session that just closed
        if snapshot.get("open_turn"):
            return str(snapshot["id"])
    return None


def kill_mid_turn(simulator: psutil.Process, orchestrator: subprocess.Popen[bytes], timeout: float = 60) -> str:
    """SIGKILL ``simulator`` while it holds a turn the client is waiting for.

    Killing "after N results" is not enough: on a loaded machine the orchestrator lags and the
    simulator may have written every turn it held and be idle, so no item would be retried. So
    the simulator is stopped (SIGSTOP: no turn of it can end any more), its store is read, and
    it is killed only when a turn is open; else it continues and the check is made again.
    Returns the id of the open session.
    """
    deadline = time.monotonic() + timeout
    while True:
        assert orchestrator.poll() is None, "the batch ended before its runtime could be killed mid-turn"
        simulator.suspend()
        try:
            held = open_turn_of(simulator)
        except BaseException:
            simulator.resume()
            raise
        if held is not None:
            simulator.kill()  # SIGKILL works on a stopped process
            return held
        simulator.resume()
        assert time.monotonic() < deadline, f"no open turn in the simulator's store within {timeout} s"
        time.sleep(0.001)


def test_resume_after_sigkill_at_random_points(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # Each round kills at 5-50 results past the last, plus what is written before the kill lands
    # (the 0-50 ms below, and the poll's lag: on a loaded machine up to a second, at up to 400
    # results/s). With 300 items five rounds could use up the dataset before the fifth kill; 1000
    # leave room for that lag (the final run does the rest in a few seconds).
    total = 1000
    dataset = write_dataset(tmp_path / "ds.jsonl", items(total, "TICK"))
    out = tmp_path / "results.jsonl"
    args = [*cli_args(dataset, out, tmp_path), "--runtimes", "2", "--concurrency", "8", "--resume", "--no-progress", "--json"]
    kills = 0
    history = []
    for _ in range(5):
        before = out.read_bytes().count(b"\n") if out.exists() else 0
        target = before + rng.randint(5, 50)
        process = subprocess.Popen([*CLI, *args], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        try:
            if wait_for_lines(out, target, process):
                time.sleep(rng.uniform(0, 0.05))  # anywhere, also in the middle of a write
                kill_and_reap(process)
                kills += 1
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        done, torn = read_results(out, repair=False)  # raises if a complete line is not valid
        history.append((seed, before, len(done), torn))
        assert len(done) == out.read_bytes()[: len(out.read_bytes()) - torn].count(b"\n"), history
    assert kills == 5, f"every round should have been killed mid-run: {history}"
    final = subprocess.run([*CLI, *args], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, (final.stderr, history)
    summary = json.loads(final.stdout)
    assert summary["total"] == total and summary["ok"] == total and summary["resumed"] > 0
    results = by_id(out)  # asserts each id appears once
    assert set(results) == {f"item-{i:05d}" for i in range(total)}, history
    assert {r["status"] for r in results.values()} == {"ok"}


def test_runtime_killed_mid_run_costs_only_retries(tmp_path: Path) -> None:
    total = 120
    dataset = write_dataset(tmp_path / "ds.jsonl", items(total, "SLOWISH"))
    script = "[[rules]]\nname = \"slowish\"\nmatch = \"SLOWISH\"\nreply = \"ok\"\ndelay = 0.1\n"
    out = tmp_path / "results.jsonl"
    args = [*cli_args(dataset, out, tmp_path, script_text=script), "--runtimes", "2", "--concurrency", "8",
            "--no-progress", "--json"]
    process = subprocess.Popen([*CLI, *args], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for_lines(out, 20, process)
        runtimes = [p for p in psutil.Process(process.pid).children()
                    if "dsh_orchestra.testing" in " ".join(p.cmdline())]
        assert len(runtimes) == 2
        victim = runtimes[0]
        kill_mid_turn(victim, process)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert not psutil.pid_exists(victim.pid), "the killed runtime was reaped"
    results = by_id(out)
    assert len(results) == total and {r["status"] for r in results.values()} == {"ok"}
    retried = [r for r in results.values() if r["attempts"] > 1]
    assert retried, "the items in flight on the killed runtime must have been retried"
    summary = json.loads(stdout)
    assert summary["retries"] == sum(r["attempts"] - 1 for r in results.values()) >= len(retried)

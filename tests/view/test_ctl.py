"""`dsh-orchestra ctl` on a REAL simulator batch: status, concurrency, pause (nothing starts),
resume, stop (exit 130 as Ctrl-C, --resume finishes); a run that is not running exits 2; the
socket is private."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from report_support import cli

from dsh_orchestra.batch._control import send_command

SCENARIO = '''
[[rules]]
name = "slow"
regex = "^SLOW"
reply = "done slowly"
delay = 0.8
'''
ITEMS = 90  # 0.8 s each: at concurrency 1 the run lasts far longer than a loaded machine takes to start `ctl`
DEADLINE = 120.0


def status(results: Path) -> dict[str, Any]:
    return send_command(results, "status")


def wait_until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def lines(results: Path) -> int:
    return sum(1 for line in results.read_bytes().splitlines() if line.strip()) if results.exists() else 0


def start_batch(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    dataset = tmp_path / "dataset.jsonl"
    dataset.write_bytes(b"".join(orjson.dumps({"id": f"slow-{i:02d}", "prompt": f"SLOW {i}"}) + b"\n" for i in range(ITEMS)))
    results = tmp_path / "results.jsonl"
    script = Path(sys.executable).with_name("dsh-orchestra")
    process = subprocess.Popen(
        [str(script), "batch", str(dataset), "--out", str(results), "--runtime", "sim", "--script", str(tmp_path / "scenario.toml"),
         "--concurrency", "3", "--no-progress", "--retries", "0", *extra],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "DSH_TELEMETRY_MODE": "DISABLED"},
    )
    note = Path(str(results) + ".lock")

    def ready() -> bool:
        try:
            return "control" in orjson.loads(note.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return False
    try:
        wait_until(ready, "the control socket in the lock note")
    except BaseException:
        process.kill()
        process.communicate()
        raise
    return process, results


def test_pause_resume_concurrency_stop_and_resume(tmp_path: Path) -> None:
    process, results = start_batch(tmp_path)
    try:
        assert status(results)["concurrency"] == 3
        # one at a time first (over the socket, at once): the run outlasts the slow `ctl` starts below
        assert send_command(results, "concurrency", 1)["concurrency"] == 1
        shown = cli("ctl", results, "status", "--json", timeout=60)
        assert shown.returncode == 0, shown.stderr
        first = json.loads(shown.stdout)
        assert first["state"] == "running" and first["total"] == ITEMS and first["concurrency"] == 1 and first["capacity"] == 3
        note = orjson.loads(Path(str(results) + ".lock").read_bytes())
        socket_path = Path(note["control"])
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700

        wait_until(lambda: status(results)["in_flight"] <= 1, "at most one item in flight")

        paused = cli("ctl", results, "pause", timeout=60)
        assert paused.returncode == 0 and "paused" in paused.stdout
        wait_until(lambda: status(results)["in_flight"] == 0, "the item in flight to finish")
        held = lines(results)
        assert held < ITEMS
        # paused: nothing starts (three item lengths: an item would have finished)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert status(results)["in_flight"] == 0
            time.sleep(0.1)
        assert lines(results) == held and status(results)["done"] == held

        assert send_command(results, "resume")["state"] == "running"
        assert send_command(results, "concurrency", 2)["concurrency"] == 2  # slow enough that `ctl stop` finds it running
        wait_until(lambda: lines(results) > held, "a new line after resume")

        stopped = cli("ctl", results, "stop", "--json", timeout=60)
        assert stopped.returncode == 0 and json.loads(stopped.stdout)["state"] == "stopping"
        _, stderr = process.communicate(timeout=DEADLINE)
        assert process.returncode == 130, stderr
        assert "interrupted; results written so far are kept" in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    kept = lines(results)
    assert kept < ITEMS
    # the run is over: ctl says so, exit 2
    gone = cli("ctl", results, "status", timeout=60)
    assert gone.returncode == 2 and "no batch is running" in gone.stderr
    # --resume finishes it, every id once
    finished = cli("batch", tmp_path / "dataset.jsonl", "--out", results, "--runtime", "sim", "--script", tmp_path / "scenario.toml",
                   "--concurrency", "6", "--no-progress", "--resume", cwd=tmp_path, timeout=300)
    assert finished.returncode == 0, finished.stderr
    ids = [orjson.loads(line)["id"] for line in results.read_bytes().splitlines() if line.strip()]
    assert sorted(ids) == [f"slow-{i:02d}" for i in range(ITEMS)]


def test_ctl_without_a_running_batch(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_bytes(orjson.dumps({"id": "a", "status": "ok"}) + b"\n")
    done = cli("ctl", results, "status", timeout=60)
    assert done.returncode == 2 and "no batch is running on" in done.stderr and "Traceback" not in done.stderr
    Path(str(results) + ".lock").write_bytes(orjson.dumps({"pid": 2 ** 22 + 12345, "host": "x"}))  # a pid no process has
    dead = cli("ctl", results, "pause", timeout=60)
    assert dead.returncode == 2 and "is gone" in dead.stderr
    bad = cli("ctl", results, "concurrency", timeout=60)
    assert bad.returncode == 2 and "concurrency needs N" in bad.stderr


def test_the_viewer_buttons(tmp_path: Path, browser: Any, viewer: Any) -> None:
    """A live run's page has the control buttons; they act on the batch; a stopped run ends as finished."""
    process, results = start_batch(tmp_path)
    try:
        v = viewer(tmp_path)
        page = browser.new_page(1280, 1000)
        page.page.on("dialog", lambda dialog: dialog.accept())  # the Stop button asks first
        page.goto(v.page("/run/0"))
        page.wait_for("document.getElementById('control') && !document.getElementById('control').hidden", timeout=30)
        page.wait_for("(document.getElementById('run-state') || {}).textContent === 'live'")  # the head comes by its own request: rows may be first
        page.wait_for("document.getElementById('card-progress') !== null", timeout=10)
        assert page.evaluate("document.querySelector('#card-progress .v').textContent").endswith(f"/ {ITEMS}")
        page.click("#ctl-pause")
        page.wait_for("document.getElementById('control-state').textContent.startsWith('paused')", timeout=10)
        assert send_command(results, "status")["paused"] is True
        page.click("#ctl-resume")
        page.wait_for("document.getElementById('control-state').textContent.startsWith('running')", timeout=10)
        page.page.fill("#ctl-limit", "2")
        page.click("#ctl-concurrency")
        page.wait_for("document.getElementById('control-state').textContent.includes('limit 2')", timeout=10)
        assert send_command(results, "status")["concurrency"] == 2
        page.click("#ctl-stop")
        process.communicate(timeout=DEADLINE)
        assert process.returncode == 130
        page.wait_for("(document.getElementById('run-state') || {}).textContent === 'finished'", timeout=10)
        page.wait_for("document.getElementById('control').hidden", timeout=10)
        assert page.problems() == []
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

"""A killed run leaves nothing to accumulate: temporary DSH_HOMEs carry their owner's pid, and
the next run removes those whose owner is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dsh_orchestra._scratch import scratch_dir, scratch_root, sweep_scratch
from dsh_orchestra.cli import main

from batch_support import items, write_dataset


def test_the_next_run_removes_the_homes_of_killed_runs(tmp_path: Path) -> None:
    root = scratch_root()
    assert root is not None and root.stat().st_mode & 0o777 == 0o700
    killed = subprocess.Popen(
        [sys.executable, "-c", "import time; from dsh_orchestra._scratch import scratch_dir; "
         "d = scratch_dir('home'); open(d.name + '/session.db', 'w').write('x'); print(d.name, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert killed.stdout is not None
        left = Path(killed.stdout.readline().strip())
        assert left.parent == root and left.is_dir()
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    assert left.is_dir()  # SIGKILL ran no cleanup
    with scratch_dir("home") as mine:  # creating one sweeps the dead owner's
        assert not left.exists()
        assert mine not in [str(p) for p in sweep_scratch()] and Path(mine).is_dir()  # a live owner's stays
    dataset = write_dataset(tmp_path / "ds.jsonl", items(1))
    stale = root / "home-999999999-x"  # no such pid
    stale.mkdir()
    assert main(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--no-progress"]) == 0
    assert not stale.exists()
    assert not [p for p in root.iterdir() if p.name.startswith(f"home-{os.getpid()}-")]  # its own home is gone too

"""Two batches on one results file: the second is refused (exit 2) naming the holder; a holder
that died (SIGKILL) leaves nothing that blocks the next run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from dsh_orchestra.batch import ResultsLockedError
from dsh_orchestra.batch._results import ResultsLock
from dsh_orchestra.cli import main

from batch_support import Scene, by_id, result


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path)


def test_a_second_batch_on_the_same_results_is_refused_naming_the_holder(
    scene: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    out = scene.root / "res.jsonl"
    data = out.read_bytes()
    with ResultsLock(out):
        for extra in ([], ["--resume"]):
            status = main(scene.batch(*extra, out=out))
            err = capsys.readouterr().err
            if not extra:  # without --resume the existing results are refused first
                assert status == 2 and "already has results" in err
                continue
            assert status == 2, err
            assert "in use by another batch" in err and f"pid {os.getpid()}" in err and socket.gethostname() in err
        # the same file under another spelling is the same lock
        (scene.root / "alias.jsonl").symlink_to(out)
        os.link(out, scene.root / "hard.jsonl")
        for alias in ("alias.jsonl", "hard.jsonl"):
            assert main(scene.batch("--resume", out=scene.root / alias)) == 2
            assert "in use by another batch" in capsys.readouterr().err
        assert out.read_bytes() == data, "the file was read or repaired under another's lock"
        assert not scene.marker.exists()
    assert not Path(f"{out}.lock").exists()  # released and removed
    assert main(scene.batch("--resume", out=out)) == 0
    assert set(by_id(out)) == {"item-00000", "item-00001"}


def test_a_killed_holder_does_not_block_the_next_run(scene: Scene) -> None:
    out = scene.root / "res.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from dsh_orchestra.batch._results import ResultsLock; "
         f"ResultsLock({str(out)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(ResultsLockedError, match=f"pid {holder.pid}") as caught:
            ResultsLock(out).acquire()
        assert caught.value.holder["pid"] == holder.pid
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]  # a pipe: not None
    assert Path(f"{out}.lock").exists()  # the note is left behind by the kill, the lock is not
    assert main(scene.batch("--resume", out=out)) == 0
    assert not Path(f"{out}.lock").exists()


def test_the_lock_is_released_when_the_batch_fails(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    out = scene.root / "res.jsonl"
    out.write_bytes(orjson.dumps(result("item-00000")) + b"\n{bad\n")
    assert main(scene.batch("--resume", out=out)) == 2
    capsys.readouterr()
    assert not Path(f"{out}.lock").exists()
    with ResultsLock(out):  # nobody holds it
        pass

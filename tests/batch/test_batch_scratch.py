"""A killed run leaves nothing to accumulate: temporary DSH_HOMEs, relay directories and
workspaces carry their owner's pid and start time, and the next run removes those whose owner
is gone (also when its pid was reused); a live owner's, a symlink and another user's entry are
never touched."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from dsh_orchestra._scratch import owned_prefix, scratch_dir, scratch_root, start_time, sweep_owned, sweep_scratch
from dsh_orchestra.cli import main
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script

from batch_support import CLI, by_id, items, run_cli, script_of, write_dataset, write_script
from test_batch_crash import kill_and_reap, wait_for_lines


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
        killed.stdout.close()  # type: ignore[union-attr]  # a pipe: not None
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


def _scratch_entries(kind: str, pid: int, base: Path) -> list[Path]:
    """``kind`` directories of owner ``pid`` in the scratch root under ``base``."""
    root = scratch_root(str(base))
    assert root is not None
    return sorted(root.glob(f"{kind}-{pid}-*"))


@pytest.fixture
def private_tmp() -> Iterator[Path]:
    """A short temporary directory of the test's own, to be the runs' TMPDIR: the scratch root
    in /tmp is shared with every other run on the machine, and any of them may sweep a killed
    run's directories first (as it should)."""
    path = Path(tempfile.mkdtemp(prefix="dshp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_reused_pid_does_not_keep_a_dead_owners_directory(tmp_path: Path) -> None:
    """Names carry the owner's start time: a live pid that started at another time is not the
    owner (its pid was reused), so the directory goes; the owner's own stays."""
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    me = os.getpid()
    started = start_time(me)
    assert started is not None and started == start_time(me)
    reused = root / f"home-{me}-{started + 1}-abcdefgh"
    mine = root / f"relay-{me}-{started}-abcdefgh"
    legacy = root / f"home-{me}-abcdefgh"  # written before start times were recorded: the pid decides
    dead = root / "judge-999999999-12-abcdefgh"
    huge = root / f"home-{10 ** 30}-abcdefgh"
    other = root / "notes"  # not ours by name
    for path in (reused, mine, legacy, dead, huge, other):
        path.mkdir()
        (path / "data").write_text("x")
    assert sorted(sweep_scratch(root)) == sorted([reused, dead, huge])
    assert mine.is_dir() and legacy.is_dir() and other.is_dir()
    with scratch_dir("home") as fresh:  # new names record this process's start time
        assert Path(fresh).name.startswith(f"home-{me}-{started}-")


def test_symlinks_and_other_users_entries_are_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    link = root / "home-999999999-abcdefgh"  # a dead owner's name, but a symlink
    link.symlink_to(outside)
    dead = root / "home-999999998-abcdefgh"  # a dead owner's directory holding a symlink out
    dead.mkdir()
    (dead / "escape").symlink_to(outside)
    foreign = root / "home-999999997-abcdefgh"
    foreign.mkdir()
    if os.getuid() == 0:
        os.chown(foreign, 65534, 65534)  # another user's entry
    removed = sweep_scratch(root)
    assert link.is_symlink() and (outside / "precious").read_text() == "keep me"
    assert not dead.exists()
    assert (foreign in removed) is (os.getuid() != 0) and foreign.exists() is (os.getuid() == 0)
    # a root that is a symlink, another user's, or open to others is not used at all
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / f"dsh-orchestra-{os.getuid()}").symlink_to(elsewhere)
    assert scratch_root(str(tmp_path / "linked")) is None
    (tmp_path / "open").mkdir()
    (tmp_path / "open" / f"dsh-orchestra-{os.getuid()}").mkdir(mode=0o700)
    os.chmod(tmp_path / "open" / f"dsh-orchestra-{os.getuid()}", 0o777)
    assert scratch_root(str(tmp_path / "open")) is None


def test_a_killed_batch_leaves_its_home_and_workspaces_to_the_next_run(tmp_path: Path, private_tmp: Path) -> None:
    """SIGKILL a real ``dsh-orchestra batch`` (simulator, temporary DSH_HOME, per-item
    workspaces) mid-run: its directories stay; the next run (``--resume``) removes them."""
    script = write_script(tmp_path, '[[rules]]\nname = "slow"\nmatch = "SLOW"\nreply = "done"\ndelay = 0.5\n')
    template = tmp_path / "template"
    template.mkdir()
    (template / "README").write_text("workspace")
    dataset = write_dataset(tmp_path / "ds.jsonl", items(40, "SLOW"))
    out = tmp_path / "r.jsonl"
    args = ["batch", str(dataset), "--out", str(out), "--runtime", "sim", "--script", str(script),
            "--workspace-template", str(template), "--no-progress", "--resume"]
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "TMPDIR": str(private_tmp)}
    process = subprocess.Popen([*CLI, *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        assert wait_for_lines(out, 2, process, timeout=120)
        left = [*_scratch_entries("home", process.pid, private_tmp),
                *_scratch_entries("workspaces", process.pid, private_tmp)]
        assert {p.name.split("-")[0] for p in left} == {"home", "workspaces"}, left
        kill_and_reap(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert all(p.is_dir() for p in left)  # SIGKILL ran no cleanup
    done = run_cli(args, cwd=tmp_path, timeout=300, env={"TMPDIR": str(private_tmp)})
    assert done.returncode == 0, done.stderr
    assert not [p for p in left if p.exists()]
    assert len(by_id(out)) == 40


REAL_SLOW = """
[[rules]]
name = "slow"
match = "SLOW"
reply = "done"
delay = 1.0
"""


@pytest.fixture
def model_script() -> Script:
    return script_of(REAL_SLOW)


@pytest.mark.integration
async def test_a_killed_batch_leaves_its_relay_directories_to_the_next_run(
    tmp_path: Path, fake_model: FakeModelServer, dsh_home: Path, private_tmp: Path
) -> None:
    """SIGKILL a real ``dsh-orchestra batch`` on the real runtime with a policy (so each runtime
    has an approval relay directory) mid-run: the relay directories stay behind (the runtimes
    exit); the next run of the same batch (``--resume``) removes them."""
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "rejected"\n')
    dataset = write_dataset(tmp_path / "ds.jsonl", items(12, "SLOW"))
    out = tmp_path / "r.jsonl"
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "TMPDIR": str(private_tmp),
           "DEEPSEEK_BASE_URL": fake_model.base_url,
           "DEEPSEEK_API_KEY": "test-key-not-a-secret", "NO_PROXY": "127.0.0.1,localhost"}
    args = ["batch", str(dataset), "--out", str(out), "--runtime", "dsh", "--dsh-home", str(dsh_home),
            "--policy", str(policy), "--runtimes", "2", "--concurrency", "2", "--no-progress", "--resume"]
    process = await trio.to_thread.run_sync(lambda: subprocess.Popen(
        [*CLI, *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        with trio.fail_after(120):
            while len(_scratch_entries("relay", process.pid, private_tmp)) < 2 or not out.exists() or not out.read_bytes():
                assert process.poll() is None, "the batch ended before it was killed"
                await trio.sleep(0.05)  # polling another process's files; no synchronisation to wait on
        left = _scratch_entries("relay", process.pid, private_tmp)
        await trio.to_thread.run_sync(kill_and_reap, process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert len(left) == 2 and all(p.is_dir() for p in left)  # SIGKILL ran no cleanup
    done = await trio.to_thread.run_sync(lambda: run_cli(args, cwd=tmp_path, timeout=300, env=env))
    assert done.returncode == 0, done.stderr
    assert not [p for p in left if p.exists()]
    assert len(by_id(out)) == 12 and not _scratch_entries("relay", process.pid, private_tmp)


def test_local_ray_temp_dirs_of_dead_owners_are_removed(tmp_path: Path) -> None:
    """Ray's temp dirs stay short in /tmp (``dsh-ray-<pid>-<start>-...``): the next LocalRay
    removes those whose owner is gone, never a live owner's or another kind."""
    from dsh_orchestra.scale._local import LocalRay

    dead = tmp_path / "dsh-ray-999999999-12-abcdefgh"
    live = tmp_path / f"{owned_prefix('dsh-ray')}abcdefgh"
    other = tmp_path / "home-999999999-abcdefgh"
    for path in (dead, live, other):
        path.mkdir()
    assert sweep_owned(tmp_path, "dsh-ray") == [dead]
    assert live.is_dir() and other.is_dir()
    left = Path(tempfile.mkdtemp(prefix="dsh-ray-999999999-12-", dir="/tmp"))  # as a killed run leaves it
    try:
        local = LocalRay(num_cpus=1)  # nothing starts before start()
        assert not left.exists()
        assert Path(local.temp_dir).name.startswith(f"dsh-ray-{os.getpid()}-")
        local.stop()
        assert not Path(local.temp_dir).exists()
    finally:
        shutil.rmtree(left, ignore_errors=True)


def test_pid_alive_the_one_check_of_a_recorded_pid() -> None:
    """Scratch owners, the batch control note and the simulator's store marks ask it: this
    process runs, pid 1 (another user's in general) runs, a pid past the system's range does not."""
    from dsh_orchestra._scratch import pid_alive

    assert pid_alive(os.getpid()) and pid_alive(1)
    assert not pid_alive(2**62)  # OverflowError in kill(): not a process
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    assert not pid_alive(child.pid)

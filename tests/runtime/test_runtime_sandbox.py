"""RuntimeSpec.sandbox: the runtime process under bubblewrap (issue 31, part 4).

What the sandboxed process sees (writable workspace and home, read-only system, hidden
paths), the mount order, the modes, and that the close ladder leaves nothing of bwrap behind.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest
import trio
from process_table import assert_gone

from dsh_orchestra.batch import BatchOptions, BatchUsageError
from dsh_orchestra.protocol import RuntimeStartError
from dsh_orchestra.runtime import RuntimeSpec, bwrap_problem
from dsh_orchestra.runtime._sandbox import SandboxStubs, sandbox_argv
from dsh_orchestra.session import open_runtime

from test_runtime_actor import FAST_LADDER, tiny

needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bubblewrap does not work here: {bwrap_problem()}")

PROBE = """\
import os, sys
from pathlib import Path
out = []
for path in sys.argv[1:]:
    try:
        Path(path).write_text("x")
        out.append("wrote")
    except OSError as exc:
        out.append(type(exc).__name__)
    try:
        Path(path).read_text()
        out.append("read")
    except OSError as exc:
        out.append(type(exc).__name__)
Path("probe.out").write_text(" ".join(out))  # in its working directory (writable)
"""


def test_modes_and_who_is_sandboxed(tmp_path: Path) -> None:
    assert RuntimeSpec(dsh_home=tmp_path).sandboxed  # auto: the bundled dsh
    assert not RuntimeSpec.simulator(dsh_home=tmp_path).sandboxed  # auto: not a command
    assert RuntimeSpec.simulator(dsh_home=tmp_path, sandbox="bwrap").sandboxed
    assert not RuntimeSpec(dsh_home=tmp_path, sandbox="none").sandboxed
    with pytest.raises(ValueError, match="sandbox"):
        RuntimeSpec(dsh_home=tmp_path, sandbox="docker")
    with pytest.raises(BatchUsageError, match="sandbox") as caught:
        BatchOptions(sandbox="off")
    assert caught.value.param == "sandbox"


def test_mounts_go_parents_first_and_hide_only_what_is_visible(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "transcripts").mkdir(parents=True)
    (workspace / "results.jsonl").write_text("")
    stubs = SandboxStubs()
    try:
        argv = sandbox_argv(["dsh"], cwd=str(workspace), writable=[workspace, tmp_path / "missing"],
                            hidden=[workspace / "results.jsonl", workspace / "transcripts", tmp_path / "summary.json",
                                    stubs.directory / "file"], stubs=stubs)
    finally:
        stubs.remove()
    assert argv[:3] == ["bwrap", "--ro-bind", "/"] and argv[-3:] == [str(workspace), "--", "dsh"]
    joined = " ".join(argv)
    rw = joined.index(f"--bind {workspace} {workspace}")
    assert joined.index(f"{stubs.file} {workspace / 'results.jsonl'}") > rw  # covers it inside the writable bind
    assert joined.index(f"{stubs.dir} {workspace / 'transcripts'}") > rw
    assert str(tmp_path / "missing") not in joined and "summary.json" not in joined  # nothing there to bind or cover
    assert f"--ro-bind {stubs.file} {stubs.directory / 'file'}" not in joined  # under a hidden scratch root already
    assert "--cap-drop ALL" in joined and "--unshare-pid" in joined
    assert "--die-with-parent" not in joined  # it fires when the forking *thread* ends: trio forks from a worker thread


@needs_bwrap
async def test_a_sandboxed_process_writes_only_its_workspace_and_home(tmp_path: Path) -> None:
    workspace, home, elsewhere = tmp_path / "ws", tmp_path / "home", tmp_path / "elsewhere"
    for directory in (workspace, home, elsewhere):
        directory.mkdir()
    hidden = workspace / "results.jsonl"
    hidden.write_text("mine")
    (tmp_path / "probe.py").write_text(PROBE)
    spec = RuntimeSpec(command=(sys.executable, str(tmp_path / "probe.py"), str(workspace / "a"), str(home / "b"),
                                str(elsewhere / "c"), str(hidden), "/etc/probe-c"),
                       dsh_home=home, cwd=workspace, sandbox="bwrap", sandbox_hidden=[hidden], handshake_timeout=30)
    with pytest.raises(RuntimeStartError):  # it writes down what it could do, then exits: no handshake
        async with open_runtime(spec, gateway=None):
            pass
    words = (workspace / "probe.out").read_text().split()
    assert words[:4] == ["wrote", "read", "wrote", "read"], words  # its workspace, its home
    assert words[4:6] == ["OSError", "FileNotFoundError"]  # elsewhere: read-only (EROFS), so nothing to read
    assert words[6:8] == ["OSError", "PermissionError"]  # the hidden file: not written (EROFS), not even read
    assert words[8] == "OSError"  # /etc: read-only
    assert hidden.read_text() == "mine" and not (elsewhere / "c").exists()
    assert (workspace / "a").read_text() == "x" and (home / "b").read_text() == "x"


@needs_bwrap
async def test_the_close_ladder_leaves_nothing_of_bwrap_behind(tmp_path: Path) -> None:
    """A runtime that ignores stdin EOF and SIGTERM, under bwrap: SIGKILL of its group ends bwrap,
    its namespace's init and the runtime."""
    spec = tiny(tmp_path, "stubborn", env={"TINY_IGNORE_TERM": "1"}, sandbox="bwrap", **FAST_LADDER)
    with trio.fail_after(60):
        async with open_runtime(spec, gateway=None) as runtime:
            pid = runtime.actor.pid
            assert pid is not None and psutil.Process(pid).name() == "bwrap"
            tree = [p.pid for p in psutil.Process(pid).children(recursive=True)]
            assert len(tree) >= 2  # bwrap's init in the namespace, the runtime
    assert_gone(pid)
    assert not [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


async def test_sandbox_bwrap_without_bubblewrap_fails_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    spec = tiny(tmp_path, "ok", sandbox="bwrap")
    with pytest.raises(RuntimeStartError, match="sandbox 'bwrap' cannot be used: bwrap is not on PATH"):
        async with open_runtime(spec, gateway=None):
            pass
    assert not (tmp_path / "record.jsonl").exists()  # noqa: ASYNC240 - nothing was started

"""The runtime under bubblewrap (issue 31, part 4): ``--sandbox auto|bwrap|none``.

On the real runtime with the scripted model: an agent's ``write`` tool at the results file,
at ``../x`` and at an absolute path outside its workspace fails inside the sandbox (the
results intact, the batch reports what happened); without the sandbox the write over the
results file is detected (exit 75). ``--sandbox bwrap`` without a working bubblewrap is exit
2; ``auto`` says so in one line and runs unsandboxed. A signal leaves no bwrap or dsh behind.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import trio

from dsh_orchestra.runtime import bwrap_problem
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script

from batch_support import CLI, by_id, script_of, write_dataset

needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bubblewrap does not work here: {bwrap_problem()}")


def _env(fake_model: FakeModelServer, **extra: str) -> dict[str, str]:
    return {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "DEEPSEEK_BASE_URL": fake_model.base_url,
            "DEEPSEEK_API_KEY": "test-key-not-a-secret", "NO_PROXY": "127.0.0.1,localhost", **extra}


def _tool(name: str, **arguments: str) -> str:
    table = ", ".join(f"{key} = {json.dumps(value)}" for key, value in arguments.items())  # a TOML inline table
    return f"[[rules.tools]]\nname = \"{name}\"\ninput = {{ {table} }}\n"


@pytest.fixture
def model_script(tmp_path: Path) -> Script:
    # the runtime's write tool wants a file read first: the results file is read, then written
    results = tmp_path / "workspace" / "results.jsonl"
    forged = '{"id": "forged", "status": "ok"}\n'
    return script_of(f"""
default_reply = "fine"

[[rules]]
name = "results"
match = "RESULTS"
reply = "tried the results"
{_tool("read", file_path=str(results))}
{_tool("write", file_path=str(results), content=forged)}

[[rules]]
name = "parent"
match = "PARENT"
reply = "tried the parent"
{_tool("write", file_path="../x.txt", content="escaped")}

[[rules]]
name = "absolute"
match = "ABSOLUTE"
reply = "tried an absolute path"
{_tool("write", file_path=str(tmp_path / "elsewhere" / "abs.txt"), content="escaped")}

[[rules]]
name = "inside"
match = "INSIDE"
reply = "wrote inside"
{_tool("write", file_path="made.txt", content="made inside")}

[[rules]]
name = "slow"
match = "SLOW"
reply = "done"
delay = 1.0
""")


async def _batch(tmp_path: Path, fake_model: FakeModelServer, sandbox: str, *extra: str) -> subprocess.CompletedProcess[str]:
    workspace = tmp_path / "workspace"
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    (tmp_path / "home").mkdir(exist_ok=True)
    dataset = write_dataset(tmp_path / "ds.jsonl", [
        {"id": "plain", "prompt": "hello"}, {"id": "parent", "prompt": "PARENT please"},
        {"id": "absolute", "prompt": "ABSOLUTE please"}, {"id": "results", "prompt": "RESULTS please"},
        {"id": "after", "prompt": "hello again"}])
    args = ["batch", str(dataset), "--out", str(workspace / "results.jsonl"), "--runtime", "dsh",
            "--dsh-home", str(tmp_path / "home"), "--workspace", str(workspace), "--concurrency", "1",
            "--no-progress", "--json", "--timeout", "120", "--sandbox", sandbox, *extra]
    return await trio.to_thread.run_sync(lambda: subprocess.run(
        [*CLI, *args], cwd=workspace, env=_env(fake_model), capture_output=True, text=True, timeout=300))


def _transcript_text(directory: Path) -> str:
    return "\n".join(gzip.decompress(p.read_bytes()).decode() for p in sorted(directory.iterdir()))


@needs_bwrap
@pytest.mark.integration
async def test_inside_the_sandbox_every_write_outside_the_workspace_fails(tmp_path: Path, fake_model: FakeModelServer) -> None:
    (tmp_path / "workspace").mkdir()
    transcripts = tmp_path / "workspace" / "transcripts"  # inside the writable workspace, hidden all the same
    run = await _batch(tmp_path, fake_model, "bwrap", "--transcripts", str(transcripts))
    assert run.returncode == 0, run.stderr
    results = by_id(tmp_path / "workspace" / "results.jsonl")
    assert sorted(results) == ["absolute", "after", "parent", "plain", "results"]  # intact, nothing forged
    assert all(r["status"] == "ok" for r in results.values())
    assert json.loads(run.stdout)["ok"] == 5
    assert not (tmp_path / "x.txt").exists() and not (tmp_path / "elsewhere" / "abs.txt").exists()
    said = _transcript_text(transcripts)  # the tools' own errors, as the agent saw them
    assert said.count("EROFS: read-only file system") >= 2, said[-3000:]  # ../x.txt and the absolute path
    assert "EACCES: permission denied" in said  # the results file: covered, not even readable


@pytest.mark.integration
async def test_without_the_sandbox_the_write_over_the_results_is_detected(tmp_path: Path, fake_model: FakeModelServer) -> None:
    (tmp_path / "workspace").mkdir()
    run = await _batch(tmp_path, fake_model, "none")
    assert run.returncode == 75, run.stderr
    assert "was changed by something other than this batch" in run.stderr and run.stdout == ""
    assert "notice" not in run.stderr  # none: nothing said about the sandbox
    # the same agent's writes outside its workspace went through (what the sandbox stops)
    assert (tmp_path / "x.txt").read_text() == "escaped" and (tmp_path / "elsewhere" / "abs.txt").read_text() == "escaped"


@needs_bwrap
@pytest.mark.integration
async def test_the_workspace_copies_are_writable_inside_the_sandbox(tmp_path: Path, fake_model: FakeModelServer) -> None:
    """The per-item copies live under a root made before the runtimes start, bound writable."""
    template = tmp_path / "template"
    template.mkdir()
    (template / "given.txt").write_text("from the template")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "inside", "prompt": "INSIDE please"},
                                                    {"id": "results", "prompt": "RESULTS please"}])
    args = ["batch", str(dataset), "--out", str(out_dir / "results.jsonl"), "--runtime", "dsh", "--dsh-home",
            str(tmp_path / "home"), "--concurrency", "1", "--no-progress", "--timeout", "120", "--sandbox", "bwrap",
            "--workspace-template", str(template), "--keep-workspaces"]
    (tmp_path / "home").mkdir()
    (tmp_path / "workspace").mkdir()
    run = await trio.to_thread.run_sync(lambda: subprocess.run(
        [*CLI, *args], cwd=tmp_path, env=_env(fake_model), capture_output=True, text=True, timeout=300))
    assert run.returncode == 0, run.stderr
    results = by_id(out_dir / "results.jsonl")
    assert sorted(results) == ["inside", "results"]
    made = Path(results["inside"]["workspace"]) / "made.txt"
    assert made.read_text() == "made inside"  # the agent wrote in its own copy
    assert '"forged"' not in (out_dir / "results.jsonl").read_text()


def _fake_bwrap(tmp_path: Path) -> Path:
    """A directory with a ``bwrap`` that does not work (as where user namespaces are disabled)."""
    directory = tmp_path / "fakebin"
    directory.mkdir()
    program = directory / "bwrap"
    program.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    program.chmod(0o755)
    return directory


@pytest.mark.parametrize("where", ["missing", "broken"])
def test_sandbox_bwrap_without_a_working_bubblewrap_is_exit_2(tmp_path: Path, where: str) -> None:
    path = str(Path(sys.executable).parent) if where == "missing" else f"{_fake_bwrap(tmp_path)}{os.pathsep}{os.environ['PATH']}"
    (tmp_path / "ds.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    run = subprocess.run([*CLI, "batch", "ds.jsonl", "--out", "r.jsonl", "--runtime", "dsh", "--dsh-home", str(tmp_path),
                          "--sandbox", "bwrap", "--no-progress"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": path, "DEEPSEEK_API_KEY": "test-key-not-a-secret",
                              "DSH_TELEMETRY_MODE": "DISABLED"})
    assert run.returncode == 2, run.stderr
    expected = "bwrap is not on PATH" if where == "missing" else "No permissions to create new namespace"
    assert "--sandbox bwrap: bubblewrap does not work here" in run.stderr and expected in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "r.jsonl").exists()


@pytest.mark.integration
async def test_sandbox_auto_without_bubblewrap_says_so_once_and_runs(tmp_path: Path, fake_model: FakeModelServer) -> None:
    (tmp_path / "workspace").mkdir()
    path = f"{_fake_bwrap(tmp_path)}{os.pathsep}{os.environ['PATH']}"
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": f"q{i}", "prompt": "hello"} for i in range(3)])
    args = ["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--runtime", "dsh", "--dsh-home",
            str(tmp_path / "workspace"), "--runtimes", "2", "--no-progress", "--json", "--timeout", "120"]  # --sandbox auto: the default
    run = await trio.to_thread.run_sync(lambda: subprocess.run(
        [*CLI, *args], cwd=tmp_path, env=_env(fake_model, PATH=path), capture_output=True, text=True, timeout=300))
    assert run.returncode == 0, run.stderr
    notices = [line for line in run.stderr.splitlines() if "without a sandbox" in line]
    assert notices == ["dsh-orchestra: notice: the runtime runs without a sandbox: "
                       f"{tmp_path / 'fakebin' / 'bwrap'} fails here (exit status 1: bwrap: No permissions to create new "
                       "namespace) (--sandbox none silences this)"]
    assert json.loads(run.stdout)["ok"] == 3


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


@needs_bwrap
@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_leaves_no_bwrap_or_runtime_behind(tmp_path: Path, fake_model: FakeModelServer, sig: int) -> None:
    (tmp_path / "home").mkdir()
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": f"s{i}", "prompt": f"SLOW {i}"} for i in range(40)])
    out = tmp_path / "r.jsonl"
    args = ["batch", str(dataset), "--out", str(out), "--runtime", "dsh", "--dsh-home", str(tmp_path / "home"),
            "--runtimes", "2", "--concurrency", "2", "--no-progress", "--sandbox", "bwrap"]
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        process = await trio.to_thread.run_sync(lambda: subprocess.Popen(
            [*CLI, *args], cwd=tmp_path, env=_env(fake_model), stdout=subprocess.DEVNULL, stderr=stderr))
    seen: dict[int, str] = {}
    try:
        with trio.fail_after(240):
            while not (out.exists() and out.read_bytes().count(b"\n") >= 2):  # both runtimes up, items done
                assert process.poll() is None, log.read_text()
                for child in _tree(process.pid):
                    try:
                        argv = child.cmdline()  # empty while it starts or exits
                    except psutil.Error:
                        continue
                    if argv:
                        seen[child.pid] = os.path.basename(argv[0])
                await trio.sleep(0.1)  # polling a subprocess's progress: no event to wait on
        assert list(seen.values()).count("bwrap") >= 2 and any(name.startswith("deepseek-harness") for name in seen.values()), seen
        process.send_signal(sig)
        with trio.fail_after(60):
            status = await trio.to_thread.run_sync(process.wait)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert status == (130 if sig == signal.SIGINT else 143), log.read_text()
    with trio.fail_after(10):
        while left := [pid for pid in seen if _alive(pid)]:  # noqa: ASYNC110 - another process's children
            await trio.sleep(0.05)  # polling the process table; no synchronisation to wait on
    assert not left
    assert out.read_text().count("\n") >= 2  # the results so far are kept

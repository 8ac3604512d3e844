"""Workspaces are safe to make (issue 31, part 3): the template checked before the first item,
symlinks kept only inside it, the run's outputs never copied, any id a safe directory name,
``RESULTS.workspaces`` never followed, SIGTERM cleaned up like Ctrl-C (exit 143)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.batch import BatchOptions, BatchUsageError, run_batch
from dsh_orchestra.batch._workspaces import workspace_name

CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]


def _dataset(tmp_path: Path, ids: list[str]) -> Path:
    path = tmp_path / "ds.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": "hi"}) + "\n" for i in ids))
    return path


async def _run(tmp_path: Path, ids: list[str] = ["a"], **options: Any) -> Any:  # noqa: B006 - never mutated
    options.setdefault("progress", "none")
    with trio.fail_after(60):
        return await run_batch(_dataset(tmp_path, ids), tmp_path / "results.jsonl", None, BatchOptions(**options))


def _template(tmp_path: Path) -> Path:
    template = tmp_path / "template"
    (template / "sub").mkdir(parents=True)
    (template / "a.txt").write_text("A")
    return template


@pytest.mark.parametrize("kind", ["fifo", "socket"])
async def test_a_special_file_is_refused_before_the_first_item(tmp_path: Path, kind: str) -> None:
    template = _template(tmp_path)
    special = template / "sub" / "special"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        import socket

        server = socket.socket(socket.AF_UNIX)
        server.bind(str(special))
        server.close()
    with pytest.raises(BatchUsageError, match=f"special': is a {'FIFO' if kind == 'fifo' else 'socket'}"):
        await _run(tmp_path, workspace_template=template)
    assert not (tmp_path / "results.jsonl").exists()


async def test_a_symlink_leaving_the_template_is_refused(tmp_path: Path) -> None:
    template = _template(tmp_path)
    (template / "sub" / "escape").symlink_to("../../outside")
    with pytest.raises(BatchUsageError, match="escape': is a symlink to '../../outside', outside the template"):
        await _run(tmp_path, workspace_template=template)


async def test_symlinks_inside_stay_links_inside_the_copy(tmp_path: Path) -> None:
    template = _template(tmp_path)
    (template / "sub" / "relative").symlink_to("../a.txt")
    (template / "sub" / "absolute").symlink_to(template / "a.txt")
    await _run(tmp_path, workspace_template=template, keep_workspaces=True)
    line = json.loads((tmp_path / "results.jsonl").read_text())
    copy = Path(line["workspace"])
    for name in ("relative", "absolute"):
        link = copy / "sub" / name
        assert link.is_symlink() and link.resolve() == (copy / "a.txt").resolve() and link.read_text() == "A"
    assert os.readlink(template / "sub" / "absolute") == str(template / "a.txt")  # the template untouched


@pytest.mark.parametrize("output", ["out", "summary", "audit", "transcripts"])
async def test_a_template_holding_an_output_is_refused(tmp_path: Path, output: str) -> None:
    options: dict[str, Any] = {"workspace_template": tmp_path}
    if output != "out":
        options[output] = tmp_path / "outputs" / output
        (tmp_path / "outputs").mkdir()
        options["workspace_template"] = tmp_path / "outputs"
    with pytest.raises(BatchUsageError, match=f"holds the run's {output}"):
        await _run(tmp_path, **options)
    assert not (tmp_path / "results.jsonl").exists() or (tmp_path / "results.jsonl").stat().st_size == 0


@pytest.mark.parametrize("kind", ["file", "symlink"])
async def test_results_workspaces_that_is_not_a_directory_is_never_followed(tmp_path: Path, kind: str) -> None:
    template = _template(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").mkdir()
    kept = tmp_path / "results.jsonl.workspaces"
    if kind == "file":
        kept.write_text("a file")
    else:
        kept.symlink_to(target)
    with pytest.raises(BatchUsageError, match="results.jsonl.workspaces' exists and is"):
        await _run(tmp_path, workspace_template=template, keep_workspaces=True)
    assert (target / "precious").is_dir() and [p.name for p in target.iterdir()] == ["precious"]


def test_workspace_names_are_safe_for_any_id() -> None:
    ids = ["a", "A", "a/b", "../x", "\x00", "a\x00b", "é", "." * 300, "x" * 500, "id-\udcff"]
    names = [workspace_name(i, 1) for i in ids]
    assert len(set(names)) == len(ids)
    for name in names:
        assert "/" not in name and "\x00" not in name and not name.startswith(".") and len(name.encode()) < 255
        assert name.isascii()


async def test_ids_with_nul_and_slashes_run_with_workspaces_and_transcripts(tmp_path: Path) -> None:
    template = _template(tmp_path)
    summary = await _run(tmp_path, ["a\x00b", "../../x", "ok"], workspace_template=template, keep_workspaces=True,
                         transcripts=tmp_path / "tr")
    assert summary.ok == 3
    kept = sorted(p.name for p in (tmp_path / "results.jsonl.workspaces").iterdir())
    assert len(kept) == 3 and all((tmp_path / "results.jsonl.workspaces" / k / "a.txt").exists() for k in kept)
    assert not (tmp_path.parent / "x").exists()


def test_sigterm_stops_cleanly_with_exit_143(tmp_path: Path) -> None:
    (tmp_path / "script.toml").write_text('[[rules]]\nname = "slow"\nmatch = "hi"\nreply = "ok"\ndelay = 0.3\n')
    _dataset(tmp_path, [f"q{i}" for i in range(40)])
    _template(tmp_path / "t")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "TMPDIR": str(private_tmp)}
    process = subprocess.Popen([*CLI, "batch", "ds.jsonl", "--out", "r.jsonl", "--no-progress", "--script", "script.toml",
                                "--workspace-template", "t/template", "--concurrency", "2"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len((tmp_path / "r.jsonl").read_text().splitlines() if (tmp_path / "r.jsonl").exists() else []) < 2:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, stderr
    assert "terminated (SIGTERM)" in stderr and "Traceback" not in stderr
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert 2 <= len(lines) < 40 and all(json.loads(line)["status"] for line in lines)
    scratch = private_tmp / f"dsh-orchestra-{os.getuid()}"
    assert not scratch.exists() or list(scratch.iterdir()) == []

"""``dsh-orchestra batch``: exit statuses, every bad-input path, --runtime-command, progress modes.

Most tests call the CLI's ``main()`` in this process (it runs its own trio loop; runtimes are
simulator processes). The progress tests run it as a real subprocess: with pipes, and on a
pseudo-terminal for the live bar.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh_orchestra.cli import main

from batch_support import (
    ALLOW_BASH, CLI, RESULT_KEYS, SUMMARY_KEYS, by_id, cli_args, items, run_cli, write_dataset,
    write_script,
)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "ds.jsonl", [*items(5), {"id": "deploy", "prompt": "DEPLOY it"}])


def test_all_ok_exits_0_and_prints_the_summary(tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, summary = tmp_path / "r.jsonl", tmp_path / "s.json"
    policy = tmp_path / "policy.toml"
    policy.write_text(ALLOW_BASH)
    audit = tmp_path / "audit.jsonl"
    status = main(cli_args(dataset, out, tmp_path, "--runtimes", "2", "--concurrency", "3", "--summary", str(summary),
                           "--policy", str(policy), "--audit", str(audit), "--no-progress", "--json"))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    printed = json.loads(captured.out)
    assert printed == json.loads(summary.read_text())
    assert SUMMARY_KEYS <= set(printed) and printed["ok"] == 6 and printed["total"] == 6
    assert printed["approval_outcomes"] == {"allowed-once": 1}
    results = by_id(out)
    assert len(results) == 6 and all(list(r) == RESULT_KEYS for r in results.values())
    assert results["deploy"]["approvals"][0]["rule"] == "allow-bash"
    assert len(audit.read_text().splitlines()) == 1
    assert "batch:" not in captured.err


def test_an_item_in_error_exits_1_with_complete_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [*items(3), {"id": "bad", "prompt": "E400"}])
    out = tmp_path / "r.jsonl"
    assert main(cli_args(dataset, out, tmp_path, "--no-progress", "--json")) == 1
    results = by_id(out)
    assert len(results) == 4 and results["bad"]["status"] == "error"
    assert json.loads(capsys.readouterr().out)["error"] == 1


def test_runtime_command_runs_any_protocol_program(tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    command = shlex.join([sys.executable, "-m", "dsh_orchestra.testing", "sim", "--script", str(write_script(tmp_path))])
    home = tmp_path / "home"
    out = tmp_path / "r.jsonl"
    status = main(["batch", str(dataset), "--out", str(out), "--runtime-command", command, "--dsh-home", str(home),
                   "--runtimes", "2", "--no-progress"])
    assert status == 0
    results = by_id(out)
    assert results["item-00000"]["final_response"] == "answer"
    # no --policy: no approval channel, so the runtime decides on its own (fails closed)
    assert results["deploy"]["final_response"] == "deploy was unavailable" and results["deploy"]["approvals"] == []
    assert len(results) == 6
    capsys.readouterr()


BAD_ARGUMENTS = {
    "shard-index-too-big": (["--shard", "3/3"], "--shard must be I/N"),
    "shard-not-numbers": (["--shard", "a/b"], "--shard must be I/N"),
    "shard-zero-count": (["--shard", "0/0"], "--shard must be I/N"),
    "shard-negative": (["--shard=-1/2"], "--shard must be I/N"),
    "negative-runtimes": (["--runtimes", "-1"], "runtimes must be an integer >= 1"),
    "zero-runtimes": (["--runtimes", "0"], "runtimes must be an integer >= 1"),
    "zero-concurrency": (["--concurrency", "0"], "concurrency must be an integer >= 1"),
    "zero-timeout": (["--timeout", "0"], "timeout must be a positive number"),
    "negative-timeout": (["--timeout", "-3"], "timeout must be a positive number"),
    "negative-retries": (["--retries", "-1"], "retries must be an integer >= 0"),
    "zero-max-tokens": (["--max-tokens", "0"], "--max-tokens must be a positive integer, not 0"),
    "missing-workspace": (["--workspace", "{tmp}/nowhere"], "does not exist"),
    "missing-policy": (["--policy", "{tmp}/nowhere.toml"], "cannot read policy file"),
    "unreadable-policy": (["--policy", "{tmp}"], "cannot read policy file"),
    "policy-not-toml": (["--policy", "{tmp}/bad.toml"], "is not valid TOML"),
    "policy-bad-rule": (["--policy", "{tmp}/badrule.toml"], "outcome must be one of"),
    "policy-no-module": (["--policy", "no_such_module_xyz:decide"], "cannot import module"),
    "policy-garbage": (["--policy", "garbage"], "no such file, and not of the form module:attr"),
    "bad-answerer": (["--answerer", "nonsense"], "--answerer must be first-option"),
    "summary-dir-missing": (["--summary", "{tmp}/no/dir/s.json"], "does not exist; create it first"),
    "audit-dir-missing": (["--audit", "{tmp}/no/dir/a.jsonl"], "does not exist; create it first"),
    "summary-is-dir": (["--summary", "{tmp}"], "is a directory"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_bad_arguments_exit_2_and_say_what_to_fix(tmp_path: Path, dataset: Path, case: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.toml").write_text("default = [unclosed\n")
    (tmp_path / "badrule.toml").write_text('[[rules]]\nname = "x"\noutcome = "yes-please"\n')
    extra, message = BAD_ARGUMENTS[case]
    out = tmp_path / "r.jsonl"
    status = main(cli_args(dataset, out, tmp_path, *[a.replace("{tmp}", str(tmp_path)) for a in extra], "--no-progress"))
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("dsh-orchestra: ") and message in err
    assert not out.exists(), "nothing may run on bad input"


def test_bad_input_paths_exit_2(tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Missing or unusable dataset and results files, each with a message that says what to fix."""
    cases: list[tuple[list[str], str]] = []
    out = tmp_path / "r.jsonl"
    cases.append((cli_args(tmp_path / "absent.jsonl", out, tmp_path), "No such file or directory"))
    cases.append((cli_args(tmp_path, out, tmp_path), "Is a directory"))
    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text('{"id": "a", "prompt": "x"}\n{"id": "a"}\n{oops\n')
    cases.append((cli_args(malformed, out, tmp_path), "line 2: item 'a': missing required field 'prompt'"))
    cases.append((cli_args(dataset, tmp_path / "no" / "dir" / "r.jsonl", tmp_path), "does not exist; create it first"))
    cases.append((cli_args(dataset, tmp_path, tmp_path), "is a directory"))
    for args, message in cases:
        assert main([*args, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert message in err, (args, err)
    assert "line 3: not valid JSON" in main_err(cli_args(malformed, out, tmp_path), capsys)
    assert not out.exists()


def main_err(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    main([*args, "--no-progress"])
    return capsys.readouterr().err


def test_existing_results_need_resume(tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text('{"id": "item-00000", "status": "ok"}\n')
    assert main([*cli_args(dataset, out, tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "already has results; pass --resume" in err
    assert out.read_text() == '{"id": "item-00000", "status": "ok"}\n'
    out.write_text('{"id": "item-00000", "status": "ok"}\n{corrupt\n{"id": "item-00001", "status": "ok"}\n')
    assert main([*cli_args(dataset, out, tmp_path), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "line 2 is not a result line: not valid JSON" in err and "fix or remove that line" in err


def test_runtime_that_cannot_start_exits_2(tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.jsonl"
    home = tmp_path / "home"
    assert main(["batch", str(dataset), "--out", str(out), "--runtime-command", str(tmp_path / "no-such-program"),
                 "--dsh-home", str(home), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is not an executable file" in err and "--runtime-command" in err  # checked before anything starts
    assert main([*cli_args(dataset, out, tmp_path), "--reasoning-effort", "bogus", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the runtime could not start" in err and "bogus" in err and "--reasoning-effort" in err
    assert not out.exists() or out.read_text() == ""


def test_dsh_runtime_needs_an_explicit_home(tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSH_HOME", raising=False)
    assert main(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--runtime", "dsh", "--no-progress"]) == 2
    assert "needs --dsh-home" in capsys.readouterr().err
    assert main(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--runtime", "sim",
                 "--runtime-command", "x", "--no-progress"]) == 2
    assert "either --runtime or --runtime-command" in capsys.readouterr().err
    assert main(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--runtime-command", " ",
                 "--dsh-home", str(tmp_path), "--no-progress"]) == 2
    assert "--runtime-command is empty" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--runtimes", "two"], ["--runtime", "bogus"], ["--timeout", "soon"], []])
def test_argparse_errors_exit_2(tmp_path: Path, dataset: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    base = ["batch", str(dataset)] + ([] if not args else ["--out", str(tmp_path / "r.jsonl")])
    with pytest.raises(SystemExit) as info:
        main([*base, *args])
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


# ---- progress ---------------------------------------------------------------------------


def test_progress_lines_when_not_a_terminal(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [*items(6), {"id": "bad", "prompt": "E400"}])
    done = run_cli(cli_args(dataset, tmp_path / "r.jsonl", tmp_path), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("batch: ")]
    assert lines, done.stderr
    assert lines[-1].startswith("batch: 7/7 done, 1 failed, 0 retries, 0 approvals pending, ")
    assert "items/s, ETA" in lines[-1]
    assert "\r" not in done.stderr


def test_no_progress_prints_nothing(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", items(4))
    done = run_cli([*cli_args(dataset, tmp_path / "r.jsonl", tmp_path), "--no-progress", "--json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout)["ok"] == 4


def test_live_bar_on_a_terminal(tmp_path: Path) -> None:
    """On a pty the bar shows done/total, rate, ETA, failures, retries and pending approvals,
    and it is redrawn while the batch runs."""
    dataset = write_dataset(tmp_path / "ds.jsonl", [*items(40, "TICK"), {"id": "bad", "prompt": "E400"}])
    master, slave = pty.openpty()
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "COLUMNS": "160"}
    args = [*cli_args(dataset, tmp_path / "r.jsonl", tmp_path), "--concurrency", "2", "--json"]
    process = subprocess.Popen([*CLI, *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        stdout, _ = process.communicate(timeout=30)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, output.decode(errors="replace")
    text = output.decode(errors="replace")
    assert "batch: 100%" in text and "41/41" in text
    assert "item/s" in text
    assert "failed=1" in text and "retries=0" in text and "approvals=0" in text
    assert text.count("\r") >= 3, "the bar is redrawn in place"
    assert "batch: 41/41 done" not in text  # lines are for pipes only
    assert json.loads(stdout)["total"] == 41


def test_timeout_and_retries_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--timeout cuts a hanging item, --retries retries it; the runtime holding it is recycled."""
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "stuck", "prompt": "HANG"}, *items(3)])
    out = tmp_path / "r.jsonl"
    # Only "stuck" may reach the timeout. The others take milliseconds alone, but on a loaded
    # machine the simulator's session-store writes were measured stalling it over a second (disk
    # contention), so 2 s (the bound before) was too close; 8 s costs "stuck" 12 s more.
    assert main(cli_args(dataset, out, tmp_path, "--timeout", "8", "--retries", "1", "--no-progress", "--json")) == 1
    results = by_id(out)
    assert results["stuck"]["attempts"] == 2 and results["stuck"]["error"]["type"] == "TimeoutError"
    assert all(results[f"item-0000{i}"]["status"] == "ok" for i in range(3))
    assert json.loads(capsys.readouterr().out)["retries"] == 1

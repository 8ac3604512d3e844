"""``dsh-orchestra policy replay`` and the recipes/approvals example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_orchestra.approvals import ALLOWED_ONCE, REJECTED, AuditLog, DecisionRecord, read_audit
from dsh_orchestra.cli import main

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "approvals"


def write_audit(path: Path) -> None:
    with AuditLog(path) as log:
        for n, (tool, outcome, reason) in enumerate(
            [("read", ALLOWED_ONCE, "read a file"), ("bash", REJECTED, "escalate sandbox to danger-full-access: run the tests"),
             ("bash", REJECTED, "escalate sandbox to danger-full-access: deploy")], start=1):
            log.write(DecisionRecord(time=f"2026-01-01T00:00:0{n}.000Z", runtime="sim", session_id=f"s{n}", tool_name=tool,
                                     call_id=f"c{n}", reason=reason, outcome=outcome, rule="old", note="", latency_s=0.01))


def test_replay_exit_status_says_whether_anything_would_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audit = tmp_path / "audit.jsonl"
    write_audit(audit)
    assert main(["policy", "replay", str(audit), "--policy", str(RECIPE / "policy.toml")]) == 0
    assert "3 decisions" in capsys.readouterr().out
    assert main(["policy", "replay", str(audit), "--policy", str(RECIPE / "proposed.toml")]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("1 would change, 2 unchanged")
    assert "session s2 tool bash call c2: rejected (rule 'old') -> allowed-once (rule 'test runs may escalate')" in out
    assert main(["policy", "replay", str(audit), "--policy", str(RECIPE / "proposed.toml"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["total"], report["changed"], report["unchanged"]) == (3, 1, 2)
    assert report["changes"][0]["call_id"] == "c2" and report["changes"][0]["new_outcome"] == ALLOWED_ONCE


def test_replay_with_a_python_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    audit = tmp_path / "audit.jsonl"
    write_audit(audit)
    (tmp_path / "replay_policies.py").write_text("def everything(request):\n    raise RuntimeError('nope')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["policy", "replay", str(audit), "--policy", "replay_policies:everything", "--json"]) == 1
    change = json.loads(capsys.readouterr().out)["changes"][0]
    assert change["call_id"] == "c1" and change["new_rule"] == "fail-closed" and "nope" in change["new_error"]


def test_replay_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audit = tmp_path / "audit.jsonl"
    write_audit(audit)
    policy = str(RECIPE / "policy.toml")
    assert main(["policy", "replay", str(tmp_path / "missing.jsonl"), "--policy", policy]) == 2
    assert "cannot read the audit log" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"not": "a record"}\n{}\n', encoding="utf-8")
    assert main(["policy", "replay", str(broken), "--policy", policy]) == 2
    assert "line 1 is not an audit record" in capsys.readouterr().err
    assert main(["policy", "replay", str(audit), "--policy", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read policy file" in capsys.readouterr().err
    assert main(["policy", "replay", str(audit), "--policy", policy, "--deadline", "0"]) == 2
    with pytest.raises(SystemExit) as exited:
        main(["policy", "replay", str(audit)])  # --policy is required
    assert exited.value.code == 2
    assert main(["policy"]) == 2


def test_an_empty_audit_log_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audit = tmp_path / "audit.jsonl"
    audit.write_bytes(b"")
    assert main(["policy", "replay", str(audit), "--policy", str(RECIPE / "proposed.toml")]) == 0
    assert "replayed 0 decisions" in capsys.readouterr().out


def run_recipe(*args: str) -> str:
    done = subprocess.run([sys.executable, str(RECIPE / "run.py"), *args], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_recipe_runs_unattended_on_the_simulator(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    out = run_recipe("--audit", str(audit))
    assert "    grep: allowed-once by rule 'read-only tools' via approval/request" in out
    assert "    read: allowed-once by rule 'read-only tools' via approval/request" in out
    assert out.count("    bash: rejected by rule 'default'") == 2
    assert "4 decisions" in out and "1 would change, 3 unchanged" in out
    assert main(["policy", "replay", str(audit), "--policy", str(RECIPE / "proposed.toml")]) == 1


def test_the_recipe_with_the_batch_command_then_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DSH_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    audit, out = tmp_path / "audit.jsonl", tmp_path / "results.jsonl"
    status = main(["batch", str(RECIPE / "prompts.jsonl"), "--out", str(out), "--script", str(RECIPE / "scenario.toml"),
                   "--policy", str(RECIPE / "policy.toml"), "--audit", str(audit), "--no-progress", "--json"])
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["approval_outcomes"] == {"allowed-once": 2, "rejected": 2}
    records = read_audit(audit)
    assert sorted((r.tool_name, r.outcome) for r in records) == [
        ("bash", REJECTED), ("bash", REJECTED), ("grep", ALLOWED_ONCE), ("read", ALLOWED_ONCE)]
    assert main(["policy", "replay", str(audit), "--policy", str(RECIPE / "proposed.toml")]) == 1
    assert "1 would change, 3 unchanged" in capsys.readouterr().out


@pytest.mark.integration
def test_the_recipe_runs_on_the_real_runtime_with_the_relay() -> None:
    out = run_recipe("--real")
    assert out.count("    bash: rejected by rule 'default' via relay") == 2
    assert "2 decisions" in out and "1 would change, 1 unchanged" in out

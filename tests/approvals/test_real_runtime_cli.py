"""``dsh-orchestra batch --runtime dsh --policy FILE``: the relay on by default, through the CLI.

The real runtime 0.2.1-rc.2 (bundled dsh) against the scripted model on 127.0.0.1; the CLI runs
as a real subprocess (``trio.run_process``, so the in-test model keeps being served).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.testing import FakeModelServer, Script, parse_script

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]


def escalation(command: str, justification: str) -> dict[str, Any]:
    return {"name": "bash", "input": {"description": "x", "command": command,
                                      "sandbox_permissions": "danger-full-access", "justification": justification}}


ASK = {"questions": [{"id": "mode", "question": "Which mode?", "options": [{"label": "fast"}, {"label": "safe"}]}]}

POLICY = """
default = "rejected"
deadline = 5

[[rules]]
name = "allowed runs"
tools = "bash"
reason = "allowed run$"
outcome = "allowed-once"
"""


@pytest.fixture
def model_script() -> Script:
    return parse_script({"rules": [
        {"name": "yes", "match": "ESC-YES", "reply": "ran", "tools": [escalation("echo yes > allowed.txt", "allowed run")]},
        {"name": "no", "match": "ESC-NO", "reply": "refused", "tools": [escalation("echo no > refused.txt", "forbidden run")]},
        {"name": "ask", "match": "QUESTION", "reply": "asked", "tools": [{"name": "ask_user_question", "input": ASK}]},
    ]})


async def run_cli(args: list[str], *, cwd: Path, env: dict[str, str]) -> trio.CompletedProcess:  # type: ignore[type-arg]
    full = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "NO_PROXY": "127.0.0.1", **env}
    with trio.fail_after(120):
        return await trio.run_process([*CLI, *args], cwd=cwd, env=full, capture_stdout=True, capture_stderr=True, check=False)


def setup(tmp_path: Path, fake_model: FakeModelServer) -> tuple[list[str], dict[str, str], Path]:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "ds.jsonl").write_text("".join(json.dumps(item) + "\n" for item in [
        {"id": "yes", "prompt": "ESC-YES please"},
        {"id": "no", "prompt": "ESC-NO please"},
        {"id": "ask", "prompt": "QUESTION please"},
    ]))
    args = ["batch", "ds.jsonl", "--out", "r.jsonl", "--json", "--runtime", "dsh", "--dsh-home", str(home),
            "--workspace", str(workspace), "--policy", "policy.toml", "--audit", "audit.jsonl", "--no-progress"]
    env = {"DEEPSEEK_BASE_URL": fake_model.base_url, "DEEPSEEK_API_KEY": "offline-placeholder"}
    return args, env, workspace


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_batch_with_a_policy_relays_by_default(tmp_path: Path, fake_model: FakeModelServer) -> None:
    args, env, workspace = setup(tmp_path, fake_model)
    done = await run_cli([*args, "--answerer", "first-option"], cwd=tmp_path, env=env)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "warning" not in stderr
    summary = json.loads(done.stdout)
    assert summary["warnings"] == [] and summary["results"] == str(tmp_path / "r.jsonl")
    assert summary["approval_outcomes"] == {"allowed-once": 1, "rejected": 1}
    results = {r["id"]: r for r in lines(tmp_path / "r.jsonl")}
    # allowed: the escalated command ran (its side effect is on disk); rejected: it did not
    assert (workspace / "allowed.txt").read_text() == "yes\n" and not (workspace / "refused.txt").exists()
    assert results["yes"]["approvals"] == [{"tool_name": "bash", "call_id": results["yes"]["approvals"][0]["call_id"],
                                            "outcome": "allowed-once", "rule": "allowed runs"}]
    assert [(a["outcome"], a["rule"]) for a in results["no"]["approvals"]] == [("rejected", "default")]
    audit = lines(tmp_path / "audit.jsonl")
    assert sorted((a["outcome"], a["via"]) for a in audit) == [("allowed-once", "relay"), ("rejected", "relay")]
    assert {a["session"] for a in audit} == {results["yes"]["session_id"], results["no"]["session_id"]}
    # the question was answered through the relay and recorded like the approvals
    (question,) = results["ask"]["questions"]
    assert question == {"id": "mode", "question": "Which mode?", "outcome": "answered", "selected": ["fast"],
                        "custom": None, "answered_by": "first-option"}
    assert results["yes"]["questions"] == []


async def test_relay_off_says_once_that_the_policy_cannot_take_effect(tmp_path: Path, fake_model: FakeModelServer) -> None:
    args, env, workspace = setup(tmp_path, fake_model)
    done = await run_cli([*args, "--approval-relay", "off", "--log-level", "info", "--log-file", "log.jsonl"],
                         cwd=tmp_path, env=env)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    warned = [line for line in stderr.splitlines() if "cannot take effect" in line]
    assert len(warned) == 1 and warned[0].startswith("dsh-orchestra: warning: the approval policy cannot take effect")
    summary = json.loads(done.stdout)
    assert len(summary["warnings"]) == 1 and summary["warnings"][0] == warned[0].removeprefix("dsh-orchestra: warning: ")
    records = [r for r in lines(tmp_path / "log.jsonl") if r.get("level") == "warning" and "cannot take effect" in r.get("message", "")]
    assert len(records) == 1  # one log record, not one per runtime
    assert not (workspace / "allowed.txt").exists() and not (tmp_path / "audit.jsonl").read_text()
    results = {r["id"]: r for r in lines(tmp_path / "r.jsonl")}
    assert results["yes"]["approvals"] == []


async def test_relay_on_with_the_simulator_or_without_a_policy_is_a_usage_error(tmp_path: Path, fake_model: FakeModelServer) -> None:
    args, env, _ = setup(tmp_path, fake_model)
    no_policy = [a for a in args if a not in ("--policy", "policy.toml")]
    done = await run_cli([*no_policy, "--approval-relay", "on"], cwd=tmp_path, env=env)
    assert done.returncode == 2 and b"--approval-relay on needs --policy or --answerer" in done.stderr
    done = await run_cli(["batch", "ds.jsonl", "--out", "s.jsonl", "--approval-relay", "on", "--policy", "policy.toml"],
                         cwd=tmp_path, env=env)
    assert done.returncode == 2 and b"--approval-relay on needs --runtime dsh" in done.stderr
    assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "s.jsonl").exists()


async def test_a_dsh_runtime_command_says_the_policy_may_not_take_effect(tmp_path: Path, fake_model: FakeModelServer) -> None:
    """``--runtime-command "dsh --profile sdk"`` loads no relay: one warning says so, the batch runs."""
    args, env, workspace = setup(tmp_path, fake_model)
    dsh = str(Path(sys.executable).parent / "dsh")  # the console script of deepseek-harness-runtime-bin
    command = [a for a in args if a not in ("--runtime", "dsh")] + ["--runtime-command", f"{dsh} --profile sdk"]
    done = await run_cli(command, cwd=tmp_path, env=env)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    warned = [line for line in stderr.splitlines() if "warning" in line]
    assert len(warned) == 1 and warned[0].startswith("dsh-orchestra: warning: the approval policy may not take effect")
    assert "gets no --patch files" in warned[0] and "append_profile=True" in warned[0]
    assert json.loads(done.stdout)["warnings"] == [warned[0].removeprefix("dsh-orchestra: warning: ")]
    assert not (workspace / "allowed.txt").exists()  # the approval never reached the policy
    assert {r["id"]: r["approvals"] for r in lines(tmp_path / "r.jsonl")}["yes"] == []

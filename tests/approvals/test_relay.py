"""The relay's own side, driven by a stand-in for the runtime plugin (no runtime).

The stand-in is this test process; ``start`` tells the relay that the runtime's pid is ours,
so its connections pass the peer check (a process is its own descendant).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from dsh_orchestra.approvals import ALLOWED_ONCE, REJECTED, ApprovalRequest, ApprovalService, AuditLog, Decision, allow, allow_tools
from dsh_orchestra.questions import DISMISS, QuestionService, first_option
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.runtime._relay import FEATURES_ENV, SOCKET_ENV, ApprovalRelay, is_descendant, relay_source_files


def frame(**fields: Any) -> bytes:
    return orjson.dumps({"v": 1, "sessionId": "s1", "toolName": "bash", "callId": "c1", "reason": "why", **fields}) + b"\n"


async def plugin_ask(path: str, data: bytes) -> bytes:
    """What answerer.mjs does: connect, send one line, read until the relay closes."""
    stream = await trio.open_unix_socket(path)
    async with stream:
        await stream.send_all(data)
        reply = b""
        while chunk := await stream.receive_some(4096):
            reply += chunk
        return reply


def test_the_shipped_files_mount_the_plugin_from_the_socket_variable() -> None:
    files = relay_source_files()
    assert set(files) == {"patch.yml", "answerer.mjs", "ask-user.yml"}
    patch = files["patch.yml"].decode()
    assert "name: ./answerer.mjs" in patch and f"process.env.{SOCKET_ENV}" in patch and f"process.env.{FEATURES_ENV}" in patch
    for hook in (b"approval/request", b"user-questions/request", b"agent/created"):
        assert hook in files["answerer.mjs"]
    assert "name: '@deepseek-ai/dsh-tool-ask-user'" in files["ask-user.yml"].decode()


def test_prepare_makes_a_private_directory_and_the_spec_that_mounts_it(tmp_path: Path) -> None:
    relay = ApprovalRelay()
    spec = RuntimeSpec(dsh_home=tmp_path, cwd=tmp_path, patches=["mine.yml"], env={"A": "1"}, approval_relay="on")
    launched = relay.prepare(spec)
    try:
        assert relay.directory is not None and stat.S_IMODE(relay.directory.stat().st_mode) == 0o700
        assert launched.env == {"A": "1", SOCKET_ENV: str(relay.directory / "approvals.sock"), FEATURES_ENV: "approvals,subagents"}
        assert launched.patches == ("mine.yml", str(relay.directory / "patch.yml"))
        with_questions = relay.prepare(spec, approvals=False, questions=True)
        assert with_questions.env[FEATURES_ENV] == "questions"
        assert with_questions.patches == ("mine.yml", str(relay.directory / "patch.yml"), str(relay.directory / "ask-user.yml"))
        for name in ("patch.yml", "answerer.mjs", "ask-user.yml"):
            assert stat.S_IMODE((relay.directory / name).stat().st_mode) == 0o600
        assert len(launched.env[SOCKET_ENV]) < 100
    finally:
        directory = relay.directory
        relay.cleanup()
        relay.cleanup()
    assert directory is not None and not directory.exists()


def test_prepare_twice_makes_a_new_directory_and_the_first_is_left_to_cleanup(tmp_path: Path) -> None:
    relay = ApprovalRelay()
    spec = RuntimeSpec(dsh_home=tmp_path, cwd=tmp_path)
    relay.prepare(spec)
    first = relay.directory
    relay.cleanup()
    assert first is not None and not first.exists()


async def start(
    nursery: trio.Nursery, tmp_path: Path, policy: Any, *, answerer: Any = None, audit: AuditLog | None = None,
    runtime_pid: int | None = None,
) -> tuple[ApprovalRelay, ApprovalService]:
    relay = ApprovalRelay()
    relay.prepare(RuntimeSpec(dsh_home=tmp_path, cwd=tmp_path))
    service = ApprovalService(policy, runtime="dsh", audit=audit)
    questions = QuestionService(answerer, runtime="dsh") if answerer is not None else None
    pid = os.getpid() if runtime_pid is None else runtime_pid
    await nursery.start(relay.run, service, questions, lambda: pid)
    relay.questions_service = questions  # type: ignore[attr-defined]  # for the question tests
    return relay, service


async def test_a_relayed_request_is_decided_by_the_service(nursery: trio.Nursery, tmp_path: Path) -> None:
    relay, service = await start(nursery, tmp_path, allow_tools("bash", name="ok"))
    assert relay.socket_path is not None
    assert stat.S_IMODE((await trio.Path(relay.socket_path).stat()).st_mode) == 0o600
    assert await plugin_ask(relay.socket_path, frame()) == b'{"outcome":"allowed-once"}\n'
    assert await plugin_ask(relay.socket_path, frame(toolName="write", callId=None, reason=None)) == b'{"outcome":"rejected"}\n'
    first, second = service.take(["s1"])
    assert (first.outcome, first.rule, first.via, first.call_id) == (ALLOWED_ONCE, "ok", "relay", "c1")
    assert (second.outcome, second.tool_name, second.call_id) == (REJECTED, "write", None)
    relay.close()
    relay.cleanup()


@pytest.mark.parametrize(
    "data",
    [b"not json\n", b"[1]\n", frame(v=2), frame(sessionId=""), frame(toolName=3), frame(callId=5), b"x" * 70000 + b"\n", b""],
)
async def test_a_malformed_request_is_rejected_and_audited(nursery: trio.Nursery, tmp_path: Path, data: bytes) -> None:
    audit = tmp_path / "audit.jsonl"
    log = AuditLog(audit)
    relay, service = await start(nursery, tmp_path, lambda r: allow(), audit=log)
    assert relay.socket_path is not None
    stream = await trio.open_unix_socket(relay.socket_path)
    async with stream:
        await stream.send_all(data)
        if not data:
            await stream.send_eof()
        reply = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(4096):
                reply += chunk
    if len(data) > 65536:  # the relay hangs up unread: the rejection may be lost in the reset
        assert reply in (b'{"outcome":"rejected"}\n', b"")
    else:
        assert reply == b'{"outcome":"rejected"}\n'  # answered, but by no decision
    assert service.decided == 0 and service.take([""]) == () and relay.refused == 1
    log.close()
    (line,) = [orjson.loads(x) for x in audit.read_bytes().splitlines()]
    assert (line["outcome"], line["rule"], line["via"], line["session"]) == ("rejected", "refused", "relay", "")
    assert line["error"].startswith("relay frame refused: not a valid request")
    relay.close()
    relay.cleanup()


async def test_a_connection_from_outside_the_runtime_tree_is_closed_and_audited(nursery: trio.Nursery, tmp_path: Path) -> None:
    # The "runtime" is a sleeping child; this test process (its parent) is not its descendant.
    child = await trio.lowlevel.open_process([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        audit = tmp_path / "audit.jsonl"
        log = AuditLog(audit)
        relay, service = await start(nursery, tmp_path, lambda r: allow(), audit=log, runtime_pid=child.pid)
        assert relay.socket_path is not None
        with trio.fail_after(5):
            try:
                reply = await plugin_ask(relay.socket_path, frame())
            except trio.BrokenResourceError:  # closed with our line unread: a reset
                reply = b""
        assert reply == b"" and service.decided == 0 and relay.refused == 1
        log.close()
        (line,) = [orjson.loads(x) for x in audit.read_bytes().splitlines()]
        assert (line["outcome"], line["rule"], line["via"]) == ("rejected", "refused", "relay")
        assert f"is neither the runtime (pid {child.pid}) nor one of its descendants" in line["error"]
        assert f"the peer (pid {os.getpid()})" in line["error"]
        relay.close()
        relay.cleanup()
    finally:
        child.kill()
        await child.wait()


def test_descendants_of_the_runtime_are_recognised() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert is_descendant(child.pid, os.getpid()) and is_descendant(os.getpid(), os.getpid())
        assert not is_descendant(os.getpid(), child.pid) and not is_descendant(1, os.getpid())
    finally:
        child.kill()
        child.wait()


def question_frame(**fields: Any) -> bytes:
    questions = [{"id": "q1", "question": "Which?", "options": [{"label": "alpha"}, {"label": "beta"}]}]
    return orjson.dumps({"v": 1, "kind": "question", "sessionId": "s1", "questions": questions, **fields}) + b"\n"


@pytest.mark.parametrize(
    ("answerer", "expected", "outcome"),
    [
        (first_option, {"answers": [{"id": "q1", "selected": ["alpha"]}]}, "answered"),
        (lambda r: DISMISS, {"cancelled": True}, "dismissed"),
        (lambda r: [{"id": "q1", "selected": ["gamma"]}], {"error": "question 'q1': ['gamma'] not among its options ['alpha', 'beta']"}, "failed"),
    ],
)
async def test_a_relayed_question_is_answered_by_the_question_service(
    nursery: trio.Nursery, tmp_path: Path, answerer: Any, expected: dict[str, Any], outcome: str
) -> None:
    relay, _ = await start(nursery, tmp_path, lambda r: allow(), answerer=answerer)
    assert relay.socket_path is not None
    reply = orjson.loads(await plugin_ask(relay.socket_path, question_frame()))
    if "answers" in expected:  # custom is omitted or null
        reply["answers"] = [{k: v for k, v in a.items() if v is not None} for a in reply["answers"]]
    assert reply == expected
    (record,) = relay.questions_service.take(["s1"])  # type: ignore[attr-defined]
    assert (record.question_id, record.question, record.options, record.outcome, record.via) == ("q1", "Which?", ("alpha", "beta"), outcome, "relay")
    assert record.selected == (("alpha",) if outcome == "answered" else ())
    assert record.request_id.startswith("relay-")
    relay.close()
    relay.cleanup()


async def test_a_question_without_an_answerer_or_malformed_fails_that_question(nursery: trio.Nursery, tmp_path: Path) -> None:
    relay, _ = await start(nursery, tmp_path, lambda r: allow())
    assert relay.socket_path is not None
    assert orjson.loads(await plugin_ask(relay.socket_path, question_frame())) == {"error": "no answerer is configured"}
    bad = orjson.loads(await plugin_ask(relay.socket_path, question_frame(questions=[{"id": 3}])))
    assert bad["error"].startswith("malformed questions")
    relay.close()
    relay.cleanup()


async def test_a_withdrawn_question_cancels_the_answerer_and_nothing_is_sent(nursery: trio.Nursery, tmp_path: Path) -> None:
    entered, cancelled = trio.Event(), trio.Event()

    async def slow(request: Any) -> Any:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    relay, _ = await start(nursery, tmp_path, lambda r: allow(), answerer=slow)
    assert relay.socket_path is not None
    stream = await trio.open_unix_socket(relay.socket_path)
    await stream.send_all(question_frame())
    await entered.wait()
    await stream.aclose()  # the runtime aborted the question
    with trio.fail_after(5):
        await cancelled.wait()
    await trio.testing.wait_all_tasks_blocked()
    (record,) = relay.questions_service.take(["s1"])  # type: ignore[attr-defined]
    assert record.outcome == "cancelled"
    relay.close()
    relay.cleanup()


async def test_a_hang_up_cancels_the_decision_and_nothing_is_sent(nursery: trio.Nursery, tmp_path: Path) -> None:
    entered, cancelled = trio.Event(), trio.Event()

    async def slow(request: ApprovalRequest) -> Decision:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    relay, service = await start(nursery, tmp_path, slow)
    assert relay.socket_path is not None
    stream = await trio.open_unix_socket(relay.socket_path)
    await stream.send_all(frame())
    await entered.wait()
    await stream.aclose()  # the runtime aborted the request: the plugin closes its connection
    with trio.fail_after(5):
        await cancelled.wait()
    await trio.testing.wait_all_tasks_blocked()
    (record,) = service.take(["s1"])
    assert record.outcome == REJECTED and record.error == "the connection closed before the decision was sent"
    relay.close()
    relay.cleanup()


async def test_closing_the_service_answers_pending_relayed_requests_rejected(nursery: trio.Nursery, tmp_path: Path) -> None:
    entered = trio.Event()

    async def slow(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    relay, service = await start(nursery, tmp_path, slow)
    assert relay.socket_path is not None
    replies: list[bytes] = []

    async def ask() -> None:
        assert relay.socket_path is not None
        replies.append(await plugin_ask(relay.socket_path, frame()))

    async with trio.open_nursery() as inner:
        inner.start_soon(ask)
        await entered.wait()
        service.close()
    assert replies == [b'{"outcome":"rejected"}\n']
    relay.close()
    relay.cleanup()


def test_only_a_dsh_program_without_patches_is_warned_about() -> None:
    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.runtime._relay import relay_warnings

    def warned(**kwargs: object) -> list[str]:
        return relay_warnings(RuntimeSpec(dsh_home="home", **kwargs), approvals=True, answerer=False)  # type: ignore[arg-type]

    assert warned(command=("/opt/bin/dsh", "--profile", "sdk"))[0].startswith("the approval policy may not take effect")
    assert warned(command=("/x/deepseek-harness-sdk-runtime-linux-x64", "--profile", "sdk"))[0].startswith(
        "the approval policy may not take effect")
    assert warned(command=("python", "-m", "dsh_orchestra.testing", "sim")) == []  # may speak the newest protocol
    assert warned(command=("/opt/bin/dsh",), append_profile=True) == []  # the relay loads
    assert warned(approval_relay="off")[0].startswith("the approval policy cannot take effect")

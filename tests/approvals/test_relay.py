"""The approval relay's own side, driven by a stand-in for the runtime plugin (no runtime)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from dsh_orchestra.approvals import ALLOWED_ONCE, REJECTED, ApprovalRequest, ApprovalService, Decision, allow, allow_tools
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session._relay import SOCKET_ENV, ApprovalRelay, relay_source_files


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
    assert set(files) == {"patch.yml", "answerer.mjs"}
    patch = files["patch.yml"].decode()
    assert "name: ./answerer.mjs" in patch and f"process.env.{SOCKET_ENV}" in patch
    assert b"approval/request" in files["answerer.mjs"]


def test_prepare_makes_a_private_directory_and_the_spec_that_mounts_it(tmp_path: Path) -> None:
    relay = ApprovalRelay()
    spec = RuntimeSpec(dsh_home=tmp_path, cwd=tmp_path, patches=["mine.yml"], env={"A": "1"}, relay_approvals=True)
    launched = relay.prepare(spec)
    try:
        assert relay.directory is not None and stat.S_IMODE(relay.directory.stat().st_mode) == 0o700
        assert launched.env == {"A": "1", SOCKET_ENV: str(relay.directory / "approvals.sock")}
        assert launched.patches == ("mine.yml", str(relay.directory / "patch.yml"))
        for name in ("patch.yml", "answerer.mjs"):
            assert stat.S_IMODE((relay.directory / name).stat().st_mode) == 0o600
        assert len(launched.env[SOCKET_ENV]) < 100
    finally:
        directory = relay.directory
        relay.cleanup()
        relay.cleanup()
    assert directory is not None and not directory.exists()


async def start(nursery: trio.Nursery, tmp_path: Path, policy: Any) -> tuple[ApprovalRelay, ApprovalService]:
    relay = ApprovalRelay()
    relay.prepare(RuntimeSpec(dsh_home=tmp_path, cwd=tmp_path))
    service = ApprovalService(policy, runtime="dsh")
    await nursery.start(relay.run, service)
    return relay, service


async def test_a_relayed_request_is_decided_by_the_service(nursery: trio.Nursery, tmp_path: Path) -> None:
    relay, service = await start(nursery, tmp_path, allow_tools("bash", name="ok"))
    assert relay.socket_path is not None
    assert stat.S_IMODE(Path(relay.socket_path).stat().st_mode) == 0o600
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
async def test_a_malformed_request_is_rejected_and_not_recorded(nursery: trio.Nursery, tmp_path: Path, data: bytes) -> None:
    relay, service = await start(nursery, tmp_path, lambda r: allow())
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
    assert reply in (b'{"outcome":"rejected"}\n', b"")  # an oversized or empty request: no decision
    assert service.decided == 0
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

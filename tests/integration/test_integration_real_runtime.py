"""Integration tests: the session layer and the runtime actor against the REAL bundled runtime.

The runtime (``deepseek-harness-sdk-runtime`` 0.2.1-rc.2) runs offline against the scripted
fake model on 127.0.0.1 (conftest ``fake_model``, scenario ``SCRIPT`` below), with a fresh
DSH_HOME and telemetry disabled. Each runtime start costs about a second, so tests that can
share one runtime without depending on each other do.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from process_table import assert_gone, our_children

from dsh_orchestra.protocol import (
    JsonRpcResponseError,
    MethodNotSupportedError,
    RuntimeExitedError,
    RuntimeStartError,
    TransportClosedError,
)
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime, SubagentResult, TurnResult, open_runtime
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script, parse_script
from dsh_orchestra.transport import Notification

pytestmark = pytest.mark.integration

SCRIPT = parse_script({"rules": [
    {"name": "spawn", "match": "SPAWN", "reply": "spawning", "after_subagents": "all children done",
     "spawn": [{"description": "child task", "prompt": "CHILD: do the task", "reply": "child-done"}]},
    {"name": "slow", "match": "SLOW30", "delay": 30.0},
    {"name": "alpha", "match": "ALPHA", "reply": "alpha reply", "delay": 0.5},
    {"name": "beta", "match": "BETA", "reply": "beta reply", "thinking": "let me think"},
    {"name": "echo", "match": "ECHO", "reply": "you said: {prompt}"},
    {"name": "e400", "match": "E400", "fail": "http-400"},
    {"name": "badsse", "match": "BADSSE", "fail": "malformed"},
]})
START = 240.0  # generous for a loaded 2-core machine (a start alone took 37-60+ s under disk contention); typical runs take a few seconds


@pytest.fixture
def model_script() -> Script:
    return SCRIPT


def tiny_png() -> str:
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00\xff")) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def user_prompts(result: TurnResult) -> list[str]:
    return [e["data"]["id"] for e in result.events
            if e["type"] == "user/message" and e["data"]["source"]["kind"] == "user"]


def drain(events: Any) -> list[Notification]:
    out = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


async def until(predicate: Callable[[], bool], seconds: float = 30.0) -> None:
    with trio.fail_after(seconds):
        while not predicate():  # noqa: ASYNC110 - the model server's request list has no change event to wait on
            await trio.sleep(0.02)


async def test_single_turn_and_the_session_api(
    dsh_spec: Callable[..., RuntimeSpec], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One turn; working directory get/set; an image prompt; session/query is missing."""
    monkeypatch.chdir(workspace.parent)
    spec = dsh_spec(cwd=workspace.name)  # relative: made absolute before the handshake
    (workspace / "sub").mkdir()
    with trio.fail_after(START):
        async with open_runtime(spec) as runtime:
            assert runtime.actor.server_info is not None
            assert runtime.actor.server_info.server_info.name == "deepseek-harness-sdk-runtime"
            session = runtime.session()
            result = await session.run("Say hello")
            assert (result.final_response, result.finish_reason, result.error) == ("Hello from the fake model", "completed", None)
            assert result.turns == (1,) and result.duration > 0
            assert result.events[0]["type"] == "agent/inbox/spliced" and result.events[-1]["type"] == "turn/end"
            assert user_prompts(result) == [result.message_id]
            assert result.notifications == () and result.subagents == ()

            assert await trio.Path(await session.get_working_directory()).resolve() == await trio.Path(workspace).resolve()
            assert await trio.Path(await session.set_working_directory("sub")).resolve() == await trio.Path(workspace, "sub").resolve()

            image = {"type": "image", "data": tiny_png(), "mimeType": "image/png"}
            with_image = await session.run([{"type": "text", "text": "What is in this picture?"}, image])
            assert with_image.ok and with_image.turns == (2,)
            [prompt] = [e for e in with_image.events if e["type"] == "user/message" and e["data"]["id"] == with_image.message_id]
            assert [b["type"] for b in prompt["data"]["content"]] == ["text", "image"]  # admitted as an attachment

            with pytest.raises(MethodNotSupportedError, match="does not implement 'session/query'"):
                await session.query("Say hello")
            with trio.fail_after(10):
                await session.wait()  # idle: answers at once


async def test_concurrent_sessions_each_hold_only_their_own(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    """Two sessions prompted at once, then six: every result holds only its own tree."""
    with trio.fail_after(START):
        async with open_runtime(dsh_spec()) as runtime:
            alpha, beta = runtime.session("session-alpha"), runtime.session("session-beta")
            results: dict[str, TurnResult] = {}
            channels = {"session-alpha": alpha.events(), "session-beta": beta.events()}

            async def run(session: Any, text: str) -> None:
                results[session.id] = await session.run(text)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, alpha, "ALPHA answer slowly")
                nursery.start_soon(run, beta, "BETA think first")
            assert results["session-alpha"].final_response == "alpha reply"
            assert results["session-beta"].final_response == "beta reply"  # the reasoning block is not text
            reasoning = [b for e in results["session-beta"].events if e["type"] == "assistant/message"
                         for b in e["data"]["message"]["content"] if b["type"] == "reasoning"]
            assert reasoning and not any(e["type"] == "assistant/message" and "reasoning" in str(e)
                                         for e in results["session-alpha"].events)
            for session_id, result in results.items():
                assert user_prompts(result) == [result.message_id]
                other = results["session-beta" if session_id == "session-alpha" else "session-alpha"]
                assert other.message_id not in str(result.events)
                seen = drain(channels[session_id])
                assert seen and {n.params.get("sessionId") for n in seen} == {session_id}
                seqs = [n.params["event"]["seq"] for n in seen if n.method == "session.event"]
                assert seqs == sorted(seqs)  # wire order
                channels[session_id].close()

            many = [runtime.session(f"echo-{i}") for i in range(6)]
            async with trio.open_nursery() as nursery:
                for index, session in enumerate(many):
                    nursery.start_soon(run, session, f"ECHO number {index}")
            for index, session in enumerate(many):
                result = results[session.id]
                assert result.final_response == f"you said: ECHO number {index}"
                assert user_prompts(result) == [result.message_id] and result.ok


async def test_subagent_run_returns_after_the_root_settles_again(
    dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer
) -> None:
    with trio.fail_after(START):
        async with open_runtime(dsh_spec()) as runtime:
            session = runtime.session("root")
            with session.events() as events:
                result = await session.run("Please SPAWN a helper")
                seen = drain(events)
    assert result.turns == (1, 2)
    assert result.final_response == "all children done" and result.finish_reason == "completed"
    [child] = result.subagents
    assert isinstance(child, SubagentResult)
    assert (child.text, child.status, child.stop_reason, child.parent_session_id) == ("child-done", "ok", "completed", "root")
    assert child.provider == "spawn" and child.agent_id == child.child_session_id
    # run() did not stop at the root's first idle: that came before the child finished
    statuses = [(i, n.params["status"]) for i, n in enumerate(seen)
                if n.method == "session.status" and n.params["sessionId"] == "root"]
    finished_at = next(i for i, n in enumerate(seen) if n.method == "subagent.finished")
    first_idle = next(i for i, s in statuses if s == "idle")
    assert first_idle < finished_at and statuses[-1][1] == "idle" and statuses[-1][0] > finished_at
    assert result.events[-1]["type"] == "turn/end" and result.events[-1]["data"]["turn"] == 2
    # descendants: in the events() channel and in the result's notifications, in wire order
    child_events = [n for n in seen if n.method == "session.event" and n.params["sessionId"] == child.child_session_id]
    assert child_events and [n for n in result.notifications if n.method == "session.event"] == child_events
    assert any(r.session_id == child.child_session_id for r in fake_model.requests)


async def test_resume_in_a_new_process(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    """Same DSH_HOME, new process: resume first; missing and occupied ids raise."""
    spec = dsh_spec()
    with trio.fail_after(START):
        async with open_runtime(spec) as runtime:
            first = await runtime.session("session-persisted").run("First turn")
        async with open_runtime(spec) as runtime:
            with pytest.raises(JsonRpcResponseError, match='session "session-persisted" already exists'):
                await runtime.session("session-persisted").prompt("without resume")
            with pytest.raises(JsonRpcResponseError, match='session "nope" not found'):
                await runtime.resume("nope")
            session = await runtime.resume("session-persisted")
            with pytest.raises(JsonRpcResponseError, match="already open or opening: session-persisted"):
                await runtime.resume("session-persisted")
            second = await session.run("Second turn")
    assert first.turns == (1,) and second.turns == (2,) and second.ok
    assert second.events[0]["seq"] > first.events[-1]["seq"]


async def test_model_failures_are_results(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    """HTTP 400 and a malformed stream end the turn with finish_reason "error"; the session recovers."""
    with trio.fail_after(START):
        async with open_runtime(dsh_spec()) as runtime:
            session = runtime.session("failing")
            rejected = await session.run("E400 please")
            malformed = await session.run("BADSSE please")
            recovered = await session.run("Are you back?")
    assert (rejected.finish_reason, rejected.final_response, rejected.ok) == ("error", "", False)
    assert rejected.error is not None and rejected.error.code == "INVALID_REQUEST"
    assert malformed.finish_reason == "error"
    assert malformed.error is not None and malformed.error.code == "MALFORMED_RESPONSE"
    assert (recovered.finish_reason, recovered.final_response) == ("completed", "Hello from the fake model")


async def test_rejected_handshake_is_a_start_error(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    with trio.fail_after(START), pytest.raises(RuntimeStartError) as caught:
        async with open_runtime(dsh_spec(reasoning_effort="bogus")):
            pytest.fail("must not start")  # pragma: no cover
    assert "runtime 'dsh' (profile 'sdk') failed to start: initialize was rejected" in str(caught.value)
    assert 'does not support reasoning effort "bogus"' in str(caught.value)
    assert our_children() == []


async def test_sigkill_mid_turn(dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer) -> None:
    """Killed during a turn: run() raises TransportClosedError with the exit status within 5 s."""
    outcome: dict[str, Any] = {}
    with trio.fail_after(START):
        async with open_runtime(dsh_spec()) as runtime:
            pid = runtime.actor.pid
            assert pid is not None
            session = runtime.session()

            async def run() -> None:
                try:
                    await session.run("SLOW30 take your time")
                except TransportClosedError as exc:
                    outcome["error"], outcome["at"] = exc, trio.current_time()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await until(lambda: any(r.rule == "slow" for r in fake_model.requests))
                killed = trio.current_time()
                os.kill(pid, signal.SIGKILL)
            assert outcome["at"] - killed < 5.0
            error = outcome["error"]
            assert error.returncode == -signal.SIGKILL and "exit status -9" in str(error)
            assert isinstance(runtime.actor.exit_error, RuntimeExitedError) and not runtime.alive
    assert_gone(pid)


async def test_cancelled_run_then_bounded_shutdown(dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer) -> None:
    """A cancelled run abandons its session; closing with that turn in flight stays in bounds."""
    spec = dsh_spec()
    # docs/runtime.md: the ladder's graces, half a second for the last stderr after SIGKILL, and
    # 2 s of slack for a loaded machine's timers (a runtime slow to exit walks the whole ladder)
    bound = spec.shutdown_timeout + spec.eof_grace + spec.terminate_grace + 0.5 + 2.0
    with trio.fail_after(START):
        async with open_runtime(spec) as runtime:
            pid = runtime.actor.pid
            assert pid is not None
            session = runtime.session()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.run, "SLOW30 take your time")
                    await until(lambda: any(r.rule == "slow" for r in fake_model.requests))
                    scope.cancel()
            assert session.abandoned
            assert (await runtime.session().run("Still usable?")).ok  # the connection is intact
            closing = trio.current_time()
        elapsed = trio.current_time() - closing
    assert elapsed < bound
    assert runtime.actor.process is not None and runtime.actor.process.returncode is not None
    assert_gone(pid)
    assert our_children() == []


async def test_cancelled_nursery_leaves_no_process(dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer) -> None:
    spec = dsh_spec()
    runtimes: list[Runtime] = []

    async def owner() -> None:
        async with open_runtime(spec) as runtime:
            runtimes.append(runtime)
            await runtime.session().run("SLOW30 take your time")

    with trio.fail_after(START):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(owner)
            await until(lambda: any(r.rule == "slow" for r in fake_model.requests))
            nursery.cancel_scope.cancel()
    [runtime] = runtimes
    assert runtime.actor.pid is not None
    assert_gone(runtime.actor.pid)
    assert our_children() == []

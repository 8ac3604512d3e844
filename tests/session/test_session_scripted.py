"""Session handles over an in-process scripted runtime (scripted_runtime.py): no processes.

Covers prompt input, run() settling with session/wait (not the first idle), the events()
channel, many concurrent sessions, failures as results, abandoned sessions, resume errors,
working directories and a runtime that hangs up mid-turn.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import trio
from scripted_runtime import ScriptedRuntime

from dsh_orchestra.protocol import (
    JsonRpcResponseError,
    MethodNotSupportedError,
    SdkProtocolError,
    SubscriberOverflowError,
    TextBlock,
    TransportClosedError,
)
from dsh_orchestra.session import EventLog, Runtime, SubagentResult, content_blocks, open_runtime
from dsh_orchestra.transport import Notification


def tiny_png() -> str:
    """A valid 1x1 RGBA PNG, base64-encoded."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00\xff")) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


@pytest.fixture
def scripted() -> ScriptedRuntime:
    return ScriptedRuntime(persisted=("session-persisted",))


@pytest.fixture
async def runtime(scripted: ScriptedRuntime) -> AsyncIterator[Runtime]:
    async with open_runtime(scripted.spec()) as opened:
        yield opened


def prompts(scripted: ScriptedRuntime) -> list[dict[str, Any]]:
    return [params for method, params in scripted.requests if method == "session/prompt"]


async def test_run_one_turn(runtime: Runtime) -> None:
    session = runtime.session("s1")
    with trio.fail_after(5):
        result = await session.run("hello")
    assert (result.final_response, result.finish_reason, result.turns, result.ok) == ("echo: hello", "completed", (1,), True)
    assert result.session_id == "s1" and result.duration >= 0
    assert result.events[0]["type"] == "agent/inbox/spliced" and result.events[-1]["type"] == "turn/end"
    assert result.notifications == () and result.subagents == ()


async def test_prompt_input_becomes_content_blocks(runtime: Runtime, scripted: ScriptedRuntime) -> None:
    """A string is one text block; lists of blocks (images included) pass through as given."""
    session = runtime.session("s1")
    image = {"type": "image", "data": tiny_png(), "mimeType": "image/png"}
    with trio.fail_after(5):
        first = await session.prompt("plain text")
        await session.prompt([{"type": "text", "text": "look:"}, image])
        await session.prompt([TextBlock(text="typed block")])
        await session.wait()
    assert isinstance(first, str) and first
    sent = [p["contentBlocks"] for p in prompts(scripted)]
    assert sent == [[{"type": "text", "text": "plain text"}], [{"type": "text", "text": "look:"}, image],
                    [{"type": "text", "text": "typed block"}]]


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ([], ValueError, "at least one content block"),
        ({"type": "text", "text": "x"}, TypeError, "a string or a list of content blocks"),
        (b"bytes", TypeError, "a string or a list"),
        (["text"], TypeError, "content block 0 must be an object"),
        ([{"text": "no type"}], ValueError, "needs a string 'type'"),
        ([{"type": "text"}], ValueError, "text block 0 needs a string 'text'"),
        ([{"type": "image", "data": "AAAA"}], ValueError, "image block 0 needs base64 'data' and a 'mimeType'"),
    ],
)
async def test_bad_input_is_rejected_before_anything_is_sent(
    runtime: Runtime, scripted: ScriptedRuntime, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await runtime.session("s1").prompt(value)
    with pytest.raises(error, match=message):
        content_blocks(value)
    assert prompts(scripted) == []


async def test_fresh_session_ids_are_unique(runtime: Runtime) -> None:
    ids = {runtime.session().id for _ in range(100)}
    assert len(ids) == 100 and all(i.startswith("session-") for i in ids)
    assert runtime.session("mine").id == "mine"
    with pytest.raises(ValueError, match="non-empty string"):
        runtime.session("")


async def test_run_settles_with_wait_not_the_first_idle(runtime: Runtime, scripted: ScriptedRuntime) -> None:
    """The root goes idle after turn 1 while its child works; run() returns after turn 2."""
    session = runtime.session("root")
    with trio.fail_after(5):
        result = await session.run("please SPAWN")
    idles = [i for i, (m, p) in enumerate(scripted.sent) if m == "session.status" and p == {"sessionId": "root", "status": "idle"}]
    assert len(idles) == 2  # the first idle did not end the run
    assert result.turns == (1, 2) and result.final_response == "after subagents"
    [child] = result.subagents
    assert isinstance(child, SubagentResult)
    assert (child.status, child.stop_reason, child.text, child.parent_session_id) == ("ok", "completed", "child-done", "root")
    assert child.last_assistant_message == (TextBlock(text="child-done"),)
    assert {n.params.get("sessionId", n.params.get("childSessionId")) for n in result.notifications} == {child.child_session_id}


async def test_events_channel_holds_the_tree_in_wire_order(runtime: Runtime, scripted: ScriptedRuntime) -> None:
    root, other = runtime.session("root"), runtime.session("other")
    received: list[Notification] = []
    with root.events() as events:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(root.run, "SPAWN")
                nursery.start_soon(other.run, "unrelated")
        while True:
            try:
                received.append(events.receive_nowait())
            except trio.WouldBlock:
                break
    child = next(p["childSessionId"] for m, p in scripted.sent if m == "subagent.started")
    tree = {"root", child}
    expected = [(m, p) for m, p in scripted.sent
                if (p.get("sessionId") in tree) or m.startswith("subagent.")]
    assert [(n.method, n.params) for n in received] == expected
    assert not any(n.params.get("sessionId") == "other" for n in received)


async def test_many_sessions_concurrently_each_collect_their_own(runtime: Runtime) -> None:
    results: dict[str, Any] = {}

    async def one(index: int) -> None:
        session = runtime.session(f"s{index}")
        results[session.id] = await session.run(f"prompt {index}")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for index in range(100):
                nursery.start_soon(one, index)
    for index in range(100):
        result = results[f"s{index}"]
        assert result.final_response == f"echo: prompt {index}"
        texts = [e["data"]["content"][0]["text"] for e in result.events if e["type"] == "user/message"]
        assert texts == [f"prompt {index}"]
        assert result.notifications == ()


async def test_queued_prompts_each_get_their_own_turn(runtime: Runtime) -> None:
    session = runtime.session("q")
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            results: list[Any] = []

            async def run(text: str) -> None:
                results.append(await session.run(text))

            nursery.start_soon(run, "first")
            await trio.lowlevel.checkpoint()
            nursery.start_soon(run, "second")
    assert sorted(r.turns for r in results) == [(1,), (2,)]
    for result in results:  # each run holds its own turn: its own prompt and its own answer
        [text] = [e["data"]["content"][0]["text"] for e in result.events if e["type"] == "user/message"]
        assert result.final_response == f"echo: {text}"


async def test_model_failure_is_a_result(runtime: Runtime) -> None:
    with trio.fail_after(5):
        result = await runtime.session("f").run("FAIL now")
    assert (result.finish_reason, result.final_response, result.ok) == ("error", "", False)
    assert result.error is not None and (result.error.code, result.error.status) == ("SERVER", 500)


async def test_session_query_is_not_supported(runtime: Runtime) -> None:
    """The runtime says it lacks session/query; the error says so plainly."""
    with trio.fail_after(5), pytest.raises(MethodNotSupportedError, match="does not implement 'session/query'") as caught:
        await runtime.session("s1").query("hello")
    assert caught.value.code == -32603 and "unknown DeepSeek Harness SDK runtime method" in caught.value.message


async def test_resume(runtime: Runtime) -> None:
    with trio.fail_after(5):
        with pytest.raises(JsonRpcResponseError, match='session "missing" not found'):
            await runtime.resume("missing")
        session = await runtime.resume("session-persisted")
        assert session.id == "session-persisted"
        with pytest.raises(JsonRpcResponseError, match="already open or opening"):
            await runtime.resume("session-persisted")
        result = await session.run("after resume")
    assert result.turns == (2,)
    with pytest.raises(ValueError):
        await runtime.resume("")


async def test_working_directory(runtime: Runtime) -> None:
    session = runtime.session("wd")
    with trio.fail_after(5):
        assert await session.get_working_directory() == "/workspace"
        assert await session.set_working_directory("sub") == "/workspace/sub"
        assert await session.get_working_directory() == "/workspace/sub"


async def test_cancelled_run_abandons_the_session(runtime: Runtime) -> None:
    session = runtime.session("slow")
    with trio.move_on_after(0.2) as scope:
        await session.run("SLOW please")
    assert scope.cancelled_caught and session.abandoned and "slow" in runtime.abandoned
    with pytest.raises(RuntimeError, match="abandoned"):
        await session.prompt("again")
    with trio.fail_after(5):  # the connection is not corrupted: other sessions work
        assert (await runtime.session("other").run("hi")).ok


async def test_a_slow_reader_overflows_alone(runtime: Runtime) -> None:
    session = runtime.session("s1")
    with session.events(capacity=3) as lagging:
        with trio.fail_after(5):
            result = await session.run("hello")
        assert result.ok
        with pytest.raises(SubscriberOverflowError):
            lagging.receive_nowait()


async def test_hangup_mid_turn_fails_run_and_channel(scripted: ScriptedRuntime) -> None:
    async with open_runtime(scripted.spec()) as runtime:
        session = runtime.session("h")
        with session.events() as events:
            with trio.fail_after(5), pytest.raises(TransportClosedError):
                await session.run("HANGUP")
            drained = 0
            with pytest.raises(TransportClosedError):
                while True:
                    await events.receive()
                    drained += 1
            assert drained > 0  # buffered notifications first, then the error
        assert not runtime.alive
        with pytest.raises(TransportClosedError):
            await runtime.session("x").prompt("x")


async def test_malformed_events_fail_the_run_not_the_connection(runtime: Runtime) -> None:
    with trio.fail_after(5):
        with pytest.raises(SdkProtocolError, match=r"params\.event\.seq"):
            await runtime.session("m").run("MALFORMED please")
        assert (await runtime.session("n").run("fine")).ok


async def test_results_hold_compact_immutable_events(runtime: Runtime) -> None:
    with trio.fail_after(5):
        result = await runtime.session("c").run("hello")
    assert isinstance(result.events, EventLog)
    first = result.events[0]
    first["type"] = "changed"
    assert result.events[0]["type"] == "agent/inbox/spliced"  # every access decodes afresh
    assert [orjson.loads(line) for line in result.events.raw] == list(result.events)

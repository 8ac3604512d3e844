"""The scripted model server: request reading, decisions, SSE, raw HTTP, and the real runtime.

The message shapes in the unit tests are the ones the real runtime 0.2.1-rc.2 sent (recorded
with this server). Integration tests drive ``deepseek-harness-sdk-runtime`` over stdio with a
minimal JSON-lines client defined here, so they do not depend on dsh_orchestra.transport.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import h11
import pytest
import trio
import trio.testing

from dsh_orchestra.testing._fake_model import (
    Decision,
    FakeModelServer,
    Incoming,
    ModelState,
    RequestRecord,
    decide,
    error_body,
    fake_model_main,
    open_fake_model,
    read_request,
    sse_frames,
)
from dsh_orchestra.testing._script import DEFAULT_SCRIPT, Script, parse_script

REPO = Path(__file__).resolve().parents[2]
CONTEXT = (
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\n"
    'Current working directory: "/ws".'
)
PARENT = 'Your parent agent id is "s1". Before you finish, send your result to that agent ...'
CHILD_A, CHILD_B = "0dc7a447-c83e-45c9-a5c9-7bf77033b20b", "2ca2ba71-62d6-4b4c-8a8a-0fa79fcf936a"

SCENARIO = """
[[rules]]
name = "spawn"
match = "SPAWN"
reply = "Spawned the reviewers."
after_subagents = "All reviewers finished ({prompt})."
[[rules.spawn]]
description = "review a.py"
prompt = "CHILD: review a.py"
reply = "a.py looks fine"
delay = 0.2
[[rules.spawn]]
description = "review b.py"
prompt = "CHILD: review b.py"
reply = "b.py looks fine"
thinking = "hmm, b"

[[rules]]
name = "read"
match = "READ"
reply = "I read it for {prompt}."
thinking = "reading"
[[rules.tools]]
name = "read"
input = { file_path = "hello.txt" }

[[rules]]
name = "child-rule"
regex = "^CHILD:"
reply = "generic child"

[[rules]]
name = "e400"
match = "E400"
fail = "http-400"

[[rules]]
name = "e500"
match = "E500"
fail = "http-500"

[[rules]]
name = "overloaded"
match = "OVERLOADED"
fail = "overloaded"

[[rules]]
name = "bad"
match = "BADSSE"
fail = "malformed"

[[rules]]
name = "cut"
match = "CUT"
reply = "this text is cut off"
fail = "stream-cut"

[[rules]]
name = "max"
match = "MAX"
reply = "truncated"
max_tokens = true

[[rules]]
name = "slow"
match = "SLOW"
reply = "slow reply"
delay = 0.6
"""


@pytest.fixture
def script() -> Script:
    return parse_script(tomllib.loads(SCENARIO), source="scenario")


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def tool_result(use_id: str, value: str) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": use_id,
        "content": [text(value)],
        "is_error": False,
    }


def notice(child: str, closing: str | None) -> list[dict[str, Any]]:
    if closing is None:
        return [
            text(f"Background subagent {child} failed before it finished."),
            text("It left no closing message."),
        ]
    return [
        text(
            f"Background subagent {child} finished and will do no further work"
            " unless you send it more."
        ),
        text("Its closing message:"),
        text(closing),
    ]


# --- reading the last message -------------------------------------------------------------


def test_prompt_is_the_newest_prompt_block() -> None:
    """Runtime context is skipped; merged failed prompts lose to the newest one."""
    assert read_request([user(text("hello"), text(CONTEXT))]) == Incoming(
        kind="prompt", text="hello"
    )
    merged = user(text("CUT now"), text(CONTEXT), text("BADSSE now"), text("E400 now"))
    assert read_request([merged]) == Incoming(kind="prompt", text="E400 now")
    history = [
        user(text("first"), text(CONTEXT)),
        {"role": "assistant", "content": [text("hi")]},
        user(text("second")),
    ]
    assert read_request(history).text == "second"


def test_child_first_message() -> None:
    """A child's first message: its prompt, the parent-id block, runtime context."""
    assert read_request([user(text("CHILD: a"), text(PARENT), text(CONTEXT))]).text == "CHILD: a"


def test_odd_shapes_read_as_an_empty_prompt() -> None:
    assert read_request([]) == Incoming(kind="prompt", text="")
    assert read_request(None) == Incoming(kind="prompt", text="")
    assert read_request([{"role": "assistant", "content": [text("x")]}]) == Incoming(kind="prompt")
    assert read_request([{"role": "user", "content": "plain string"}]).text == "plain string"
    assert read_request([user({"type": "image", "source": {}}, text(CONTEXT))]).text == ""
    assert read_request([user("junk", {"type": "text", "text": 3})]).text == ""  # type: ignore[arg-type]
    wd = 'The working directory changed from "/ws" to "/ws/sub".'
    assert read_request([user(text("go"), text(wd))]).text == "go"


def test_tool_results_and_started_children() -> None:
    message = user(
        tool_result("t1", f"started subagent {CHILD_A}"),
        tool_result("t2", f"started subagent {CHILD_B}"),
    )
    assert read_request([message]) == Incoming(kind="tool-results", started=(CHILD_A, CHILD_B))
    plain = user(
        tool_result("t3", "<content>hello</content>"),
        text('The working directory changed from "a" to "b".'),
    )
    assert read_request([plain]) == Incoming(kind="tool-results")


def test_subagent_notices() -> None:
    """The three notice forms seen; a notice owns its closing text, two notices may be merged."""
    assert read_request([user(*notice(CHILD_A, "child-done"))]) == Incoming(
        kind="subagents-finished", finished=(CHILD_A,)
    )
    out_of_room = [
        text(f"Background subagent {CHILD_A} ran out of room before it finished."),
        text("Its closing message:"),
        text("truncated child"),
    ]
    assert read_request([user(*out_of_room)]).finished == (CHILD_A,)
    both = user(*notice(CHILD_A, "thought child"), *notice(CHILD_B, None))
    assert read_request([both]) == Incoming(kind="subagents-finished", finished=(CHILD_A, CHILD_B))
    assert read_request([user(text("Its closing message:"))]).text == "Its closing message:"
    truncated = user(text(f"Background subagent {CHILD_A} finished."), text("Its closing message:"))
    assert read_request([truncated]).kind == "subagents-finished"


def test_newest_item_wins_between_prompt_notice_and_tool_result() -> None:
    """A prompt after a notice is the prompt; a notice after tool results is the notice."""
    after_notice = user(*notice(CHILD_A, "done"), text("new question"))
    assert read_request([after_notice]) == Incoming(
        kind="prompt", text="new question", finished=(CHILD_A,)
    )
    merged = user(tool_result("t1", f"started subagent {CHILD_A}"), *notice(CHILD_A, "done"))
    assert read_request([merged]) == Incoming(
        kind="subagents-finished", started=(CHILD_A,), finished=(CHILD_A,)
    )


# --- decisions ----------------------------------------------------------------------------


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "deepseek-v4-flash", "stream": True, "messages": list(messages)}


def test_plain_prompt_uses_the_default_reply(script: Script) -> None:
    decision = decide(
        script, body(user(text("hello"), text(CONTEXT))), ModelState(), session_id="s1"
    )
    assert decision == Decision(
        kind="prompt",
        rule=None,
        prompt="hello",
        content=({"type": "text", "text": "Hello from the fake model"},),
    )


def test_spawn_flow(script: Script) -> None:
    """Spawn -> children answer inline -> tool results -> notices answer after_subagents."""
    state = ModelState()
    first = decide(script, body(user(text("please SPAWN"), text(CONTEXT))), state, session_id="s1")
    assert first.stop_reason == "tool_use" and first.rule == "spawn"
    assert [(b["type"], b["name"], b["input"]) for b in first.content] == [
        ("tool_use", "subagent", {"description": "review a.py", "prompt": "CHILD: review a.py"}),
        ("tool_use", "subagent", {"description": "review b.py", "prompt": "CHILD: review b.py"}),
    ]
    assert len({b["id"] for b in first.content}) == 2

    child_b = decide(
        script,
        body(user(text("CHILD: review b.py"), text(PARENT), text(CONTEXT))),
        state,
        session_id=CHILD_B,
    )
    assert child_b.rule == "spawn spawn[1]" and child_b.stop_reason == "end_turn"
    assert child_b.content == (
        {"type": "thinking", "thinking": "hmm, b"},
        {"type": "text", "text": "b.py looks fine"},
    )

    results = user(
        tool_result(first.content[0]["id"], f"started subagent {CHILD_A}"),
        tool_result(first.content[1]["id"], f"started subagent {CHILD_B}"),
    )
    cont = decide(
        script,
        body(
            user(text("please SPAWN")),
            {"role": "assistant", "content": list(first.content)},
            results,
        ),
        state,
        session_id="s1",
    )
    assert (cont.kind, cont.rule, cont.prompt) == ("tool-results", "spawn", "please SPAWN")
    assert cont.content == ({"type": "text", "text": "Spawned the reviewers."},)

    decide(
        script, body(user(text("please SPAWN")), user(text("later prompt"))), state, session_id="s1"
    )
    after = decide(script, body(user(*notice(CHILD_A, "a.py looks fine"))), state, session_id="s1")
    assert (after.kind, after.rule) == ("subagents-finished", "spawn")
    assert after.content == ({"type": "text", "text": "All reviewers finished (please SPAWN)."},)


def test_child_without_inline_behaviour_is_matched_by_rules(script: Script) -> None:
    decision = decide(
        script, body(user(text("CHILD: other"), text(PARENT))), ModelState(), session_id="c"
    )
    assert decision.rule == "child-rule" and decision.content[0]["text"] == "generic child"


def test_unknown_notice_and_tool_results_fall_back(script: Script) -> None:
    state = ModelState()
    after = decide(script, body(user(*notice(CHILD_A, "x"))), state, session_id="s9")
    assert (after.rule, after.content) == (None, ({"type": "text", "text": "Subagents finished."},))
    cont = decide(script, body(user(tool_result("t", "ok"))), state, session_id="s9")
    assert cont.content == ({"type": "text", "text": "Hello from the fake model"},)


def test_tools_then_reply_with_thinking(script: Script) -> None:
    state = ModelState()
    first = decide(script, body(user(text("READ it"))), state, session_id=None)
    assert first.stop_reason == "tool_use"
    assert [(b["name"], b["input"]) for b in first.content] == [
        ("read", {"file_path": "hello.txt"})
    ]
    cont = decide(
        script, body(user(tool_result(first.content[0]["id"], "hello"))), state, session_id=None
    )
    assert cont.content == (
        {"type": "thinking", "thinking": "reading"},
        {"type": "text", "text": "I read it for READ it."},
    )


@pytest.mark.parametrize(
    ("prompt", "fail", "stop", "delay"),
    [
        ("E400", "http-400", "end_turn", 0.0),
        ("BADSSE", "malformed", "end_turn", 0.0),
        ("MAX", None, "max_tokens", 0.0),
        ("SLOW", None, "end_turn", 0.6),
    ],
)
def test_endings(script: Script, prompt: str, fail: str | None, stop: str, delay: float) -> None:
    decision = decide(script, body(user(text(prompt))), ModelState(), session_id="s")
    assert (decision.fail, decision.stop_reason, decision.delay) == (fail, stop, delay)


# --- SSE encoding -------------------------------------------------------------------------


def parse_sse(frames: list[bytes]) -> list[tuple[str, Any]]:
    events = []
    for chunk in b"".join(frames).decode().split("\n\n"):
        if chunk:
            name, data = chunk.split("\n")
            assert name.startswith("event: ") and data.startswith("data: ")
            events.append((name[7:], data[6:]))
    return events


def decoded(frames: list[bytes]) -> list[tuple[str, Any]]:
    return [(name, json.loads(data)) for name, data in parse_sse(frames)]


def test_sse_stream_shape() -> None:
    long = "x" * 150
    decision = Decision(
        kind="prompt",
        rule=None,
        prompt="p",
        content=(
            {"type": "thinking", "thinking": "hm"},
            {"type": "text", "text": long},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "read",
                "input": {"file_path": "a" * 100},
            },
        ),
        stop_reason="tool_use",
    )
    events = decoded(sse_frames(decision, model="m", message_id="msg_1"))
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["model"] == "m" and events[0][1]["message"]["id"] == "msg_1"
    assert events[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    }
    assert (
        "".join(
            d["delta"]["text"]
            for n, d in events
            if d.get("index") == 1 and n == "content_block_delta"
        )
        == long
    )
    assert events[9][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "read",
        "input": {},
    }
    partial = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if d.get("index") == 2 and n == "content_block_delta"
    )
    assert json.loads(partial) == {"file_path": "a" * 100}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_sse_failures() -> None:
    base = Decision(kind="prompt", rule="r", prompt="p", content=({"type": "text", "text": "abc"},))
    cut = decoded(sse_frames(_with(base, fail="stream-cut"), model="m", message_id="i"))
    assert [name for name, _ in cut] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
    overloaded = decoded(sse_frames(_with(base, fail="overloaded"), model="m", message_id="i"))
    assert overloaded[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    malformed = parse_sse(sse_frames(_with(base, fail="malformed"), model="m", message_id="i"))
    with pytest.raises(ValueError):
        json.loads(malformed[-1][1])
    assert error_body(_with(base, fail="http-500"))[0] == 500
    assert error_body(_with(base, fail="http-400")) == (
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "scripted HTTP 400 from rule 'r'",
            },
        },
    )


def _with(decision: Decision, **changes: Any) -> Decision:
    return attrs.evolve(decision, **changes)


# --- the HTTP server ----------------------------------------------------------------------


async def http_post(
    port: int,
    path: str,
    payload: Any,
    *,
    session: str | None = None,
    stream: trio.SocketStream | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """POST ``payload`` with an h11 client; returns status, headers and the whole body."""
    own = stream is None
    sock = stream or await trio.open_tcp_stream("127.0.0.1", port)
    client = h11.Connection(h11.CLIENT)
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = [
        ("host", f"127.0.0.1:{port}"),
        ("content-type", "application/json"),
        ("content-length", str(len(data))),
    ]
    if session is not None:
        headers.append(("x-deepseek-harness-session-id", session))
    await sock.send_all(client.send(h11.Request(method="POST", target=path, headers=headers)))
    await sock.send_all(client.send(h11.Data(data=data)))
    await sock.send_all(client.send(h11.EndOfMessage()))
    response: h11.Response | None = None
    body = bytearray()
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(await sock.receive_some(65536))
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
        else:
            raise AssertionError(f"unexpected {event!r}")
    if own:
        await sock.aclose()
    assert response is not None
    return response.status_code, {k.decode(): v.decode() for k, v in response.headers}, bytes(body)


async def test_http_sse_stream(script: Script) -> None:
    """A real HTTP exchange: 200 text/event-stream, chunked, the full event sequence."""
    async with open_fake_model(script) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        status, headers, raw = await http_post(
            server.port, "/v1/messages", body(user(text("hi"), text(CONTEXT))), session="s1"
        )
        assert status == 200 and headers["content-type"] == "text/event-stream"
        assert headers["transfer-encoding"] == "chunked" and headers["request-id"].startswith(
            "req_fake_"
        )
        events = [(name, json.loads(data)) for name, data in parse_sse([raw])]
        assert [name for name, _ in events] == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        assert events[2][1]["delta"] == {"type": "text_delta", "text": "Hello from the fake model"}
        assert events[4][1]["delta"]["stop_reason"] == "end_turn"
        assert server.requests == [
            RequestRecord(
                session_id="s1", kind="prompt", rule=None, prompt="hi", outcome="end_turn"
            )
        ]


async def test_http_errors_and_keep_alive(script: Script) -> None:
    """Several requests on one connection: scripted 400/500, 404, bad JSON, then a normal answer."""
    async with open_fake_model(script) as server:
        sock = await trio.open_tcp_stream("127.0.0.1", server.port)
        status, headers, raw = await http_post(
            server.port, "/v1/messages", body(user(text("E400"))), stream=sock
        )
        assert status == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"
        assert headers["request-id"].startswith("req_fake_")
        status, _, raw = await http_post(
            server.port, "/v1/messages", body(user(text("E500"))), stream=sock
        )
        assert status == 500 and json.loads(raw)["error"] == {
            "type": "api_error",
            "message": "scripted HTTP 500 from rule 'e500'",
        }
        status, _, raw = await http_post(server.port, "/v1/other", {}, stream=sock)
        assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"
        for junk in (b"{not json", b"[1, 2]"):
            status, _, raw = await http_post(server.port, "/v1/messages", junk, stream=sock)
            assert status == 400
        status, _, raw = await http_post(
            server.port, "/v1/messages?beta=true", body(user(text("MAX"))), stream=sock
        )
        assert status == 200 and b'"stop_reason":"max_tokens"' in raw
        await sock.aclose()
        assert [(r.rule, r.outcome) for r in server.requests] == [
            ("e400", "http-400"),
            ("e500", "http-500"),
            ("max", "max_tokens"),
        ]


async def test_slow_request_does_not_hold_up_others(script: Script, mock_clock: trio.testing.MockClock) -> None:
    """A delayed answer and many quick ones in parallel: the quick ones finish first.

    The clock stands still (MockClock) until the test moves it, so the 0.6 s delay ends only
    after the quick ones are done (real time, before, gave twenty requests 0.55 s, which a
    loaded machine may not give them); had the server held them behind it, they would still be
    waiting once every task is blocked."""
    finished: list[str] = []
    async with open_fake_model(script) as server:

        async def one(prompt: str, session: str) -> None:
            status, _, _ = await http_post(
                server.port, "/v1/messages", body(user(text(prompt))), session=session
            )
            assert status == 200
            finished.append(prompt)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "SLOW", "slow")
            await trio.testing.wait_all_tasks_blocked()  # the server holds it, in its delay
            for i in range(20):
                nursery.start_soon(one, f"quick {i}", f"s{i}")
            await trio.testing.wait_all_tasks_blocked()  # nothing left to do but the delay
            assert sorted(finished) == sorted(f"quick {i}" for i in range(20))
            mock_clock.jump(0.6)
    assert finished[-1] == "SLOW" and len(finished) == 21


async def test_client_hanging_up_mid_request_is_harmless(script: Script) -> None:
    async with open_fake_model(script) as server:
        sock = await trio.open_tcp_stream("127.0.0.1", server.port)
        await sock.send_all(
            b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"
        )
        await sock.aclose()
        sock = await trio.open_tcp_stream("127.0.0.1", server.port)
        await sock.send_all(b"this is not http\r\n\r\n")
        await sock.aclose()
        status, _, _ = await http_post(server.port, "/v1/messages", body(user(text("still here"))))
        assert status == 200


def test_constructor_refuses_other_hosts_and_bad_ports() -> None:
    for host in ("0.0.0.0", "localhost", "::1", "192.168.1.2", ""):
        with pytest.raises(ValueError, match="127.0.0.1 only"):
            FakeModelServer(DEFAULT_SCRIPT, host=host)
    for port in (-1, 65536, True, 1.5):
        with pytest.raises(ValueError, match="port must be"):
            FakeModelServer(DEFAULT_SCRIPT, port=port)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not listening yet"):
        _ = FakeModelServer(DEFAULT_SCRIPT).port


async def test_server_runs_once_and_port_busy() -> None:
    async with open_fake_model() as server:
        with pytest.raises(RuntimeError, match="runs only once"):
            await server.run()
        with pytest.raises(OSError):
            await FakeModelServer(DEFAULT_SCRIPT, port=server.port).run()


async def test_fake_model_main_serves_until_sigterm(tmp_path: Path) -> None:
    """The CLI entry prints the listening line, answers, exits 0 on SIGTERM, 2 on a bad script."""
    script_file = tmp_path / "s.toml"
    script_file.write_text('default_reply = "from the file"\n', encoding="utf-8")
    code = (
        "import sys; from dsh_orchestra.testing._fake_model import fake_model_main as m; "
        "sys.exit(m(0, sys.argv[1]))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", code, str(script_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        with trio.fail_after(20):
            assert process.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(1024)
            assert line.startswith(b"listening on http://127.0.0.1:")
            port = int(line.decode().strip().rsplit(":", 1)[1])
            status, _, raw = await http_post(port, "/v1/messages", body(user(text("x"))))
            assert status == 200 and b"from the file" in raw
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
    script_file.write_text("rules = 1\n", encoding="utf-8")
    with trio.fail_after(20):
        result = await trio.run_process(
            [sys.executable, "-c", code, str(script_file)],
            capture_stderr=True,
            check=False,
            env=env,
        )
    assert result.returncode == 2 and b"key 'rules'" in result.stderr


def test_fake_model_main_reports_a_missing_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert fake_model_main(0, str(tmp_path / "nope.toml")) == 2
    assert "nope.toml" in capsys.readouterr().err


# --- the real runtime ---------------------------------------------------------------------


class RawRuntime:
    """A minimal JSON-lines client for one ``dsh --profile sdk`` process (tests only)."""

    def __init__(self, process: trio.Process, workspace: Path) -> None:
        self.process = process
        self.workspace = workspace
        self.notifications: list[dict[str, Any]] = []
        self.stderr = bytearray()
        self._ids = iter(range(1, 1_000_000))
        self._waiting: dict[int, tuple[trio.Event, list[dict[str, Any]]]] = {}
        self._send_lock = trio.Lock()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request; return its ``result`` (fail the test on an error response)."""
        request_id = next(self._ids)
        event, slot = self._waiting[request_id] = (trio.Event(), [])
        assert self.process.stdin is not None
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        async with self._send_lock:
            await self.process.stdin.send_all(json.dumps(frame).encode() + b"\n")
        await event.wait()
        del self._waiting[request_id]
        assert "error" not in slot[0], (
            f"{method} failed: {slot[0]['error']}; stderr: {bytes(self.stderr[-2000:])!r}"
        )
        result: dict[str, Any] = slot[0]["result"]
        return result

    async def prompt_and_wait(self, session: str, prompt: str) -> None:
        await self.request(
            "session/prompt", {"sessionId": session, "contentBlocks": [text(prompt)]}
        )
        await self.request("session/wait", {"sessionId": session})

    def events(self, session: str, kind: str) -> list[dict[str, Any]]:
        return [
            n["params"]["event"]["data"]
            for n in self.notifications
            if n.get("method") == "session.event"
            and n["params"]["sessionId"] == session
            and n["params"]["event"]["type"] == kind
        ]

    def turn_ends(self, session: str) -> list[dict[str, Any]]:
        return [data["reason"] for data in self.events(session, "turn/end")]

    def assistant_texts(self, session: str) -> list[str]:
        return [
            "".join(b["text"] for b in data["message"]["content"] if b["type"] == "text")
            for data in self.events(session, "assistant/message")
        ]

    def method(self, name: str) -> list[dict[str, Any]]:
        return [n["params"] for n in self.notifications if n.get("method") == name]

    async def read_stdout(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                frame = json.loads(line)
                if "method" in frame:
                    self.notifications.append(frame)
                elif frame.get("id") in self._waiting:
                    event, slot = self._waiting[frame["id"]]
                    slot.append(frame)
                    event.set()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk


@asynccontextmanager
async def open_raw_runtime(tmp_path: Path, server: FakeModelServer) -> AsyncIterator[RawRuntime]:
    """Spawn the bundled runtime against ``server``; always kill and reap it on the way out."""
    from deepseek_harness_runtime import resolve_bundled_launch_args  # type: ignore[import-untyped]

    home, workspace = tmp_path / "dsh-home", tmp_path / "workspace"
    home.mkdir()
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hello from the workspace\n", encoding="utf-8")
    env = {
        **os.environ,
        "DSH_HOME": str(home),
        "DEEPSEEK_BASE_URL": server.base_url,
        "DEEPSEEK_API_KEY": "test-key",
        "DSH_TELEMETRY_MODE": "DISABLED",
    }
    command = [*resolve_bundled_launch_args(), "--profile", "sdk"]
    process = await trio.lowlevel.open_process(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(workspace),
        env=env,
    )
    try:
        async with trio.open_nursery() as nursery:
            runtime = RawRuntime(process, workspace)
            nursery.start_soon(runtime.read_stdout)
            nursery.start_soon(runtime.read_stderr)
            with trio.fail_after(120):  # the handshake: dsh took 37-60+ s to start under disk contention
                await runtime.request(
                    "initialize",
                    {
                        "cwd": str(workspace),
                        "provider": "deepseek-official",
                        "model": "deepseek-v4-flash",
                    },
                )
            yield runtime
            with trio.move_on_after(5):
                await runtime.request("shutdown", {})
            assert process.stdin is not None
            await process.stdin.aclose()
            with trio.move_on_after(5):
                await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


@pytest.mark.integration
async def test_real_runtime_plain_reply(tmp_path: Path, script: Script) -> None:
    with trio.fail_after(240):
        async with open_fake_model(script) as server, open_raw_runtime(tmp_path, server) as runtime:
            await runtime.prompt_and_wait("s-plain", "hello there")
            assert runtime.turn_ends("s-plain") == [{"kind": "completed"}]
            assert runtime.assistant_texts("s-plain") == ["Hello from the fake model"]
    assert server.requests == [
        RequestRecord(
            session_id="s-plain", kind="prompt", rule=None, prompt="hello there", outcome="end_turn"
        )
    ]
    assert runtime.process.returncode == 0


@pytest.mark.integration
async def test_real_runtime_spawns_two_children(tmp_path: Path, script: Script) -> None:
    """Two children answer inline; session/wait returns after the parent's after_subagents reply."""
    with trio.fail_after(240):
        async with open_fake_model(script) as server, open_raw_runtime(tmp_path, server) as runtime:
            await runtime.prompt_and_wait("s-spawn", "please SPAWN the reviewers")
            finished = runtime.method("subagent.finished")
            started = runtime.method("subagent.started")
            # the wait covers the whole tree: the parent's last reply is already there
            assert (
                runtime.assistant_texts("s-spawn")[-1]
                == "All reviewers finished (please SPAWN the reviewers)."
            )
    assert sorted(p["childSessionId"] for p in started) == sorted(
        p["childSessionId"] for p in finished
    )
    closing = sorted(
        "".join(b["text"] for b in p["lastAssistantMessage"] if b["type"] == "text")
        for p in finished
    )
    assert closing == ["a.py looks fine", "b.py looks fine"]
    assert all(p["status"] == "ok" and p["parentSessionId"] == "s-spawn" for p in finished)
    assert all(reason == {"kind": "completed"} for reason in runtime.turn_ends("s-spawn"))
    kinds = [(r.kind, r.rule) for r in server.requests if r.session_id == "s-spawn"]
    assert kinds[0] == ("prompt", "spawn") and ("subagents-finished", "spawn") in kinds
    # child a waits 0.2 s, so the tool-results step normally comes first; if a notice were
    # merged into that step, the newest item (the notice) decides and that step is skipped
    if ("tool-results", "spawn") in kinds:
        assert "Spawned the reviewers." in runtime.assistant_texts("s-spawn")
    assert sorted(r.rule or "" for r in server.requests if r.session_id != "s-spawn") == [
        "spawn spawn[0]",
        "spawn spawn[1]",
    ]


@pytest.mark.integration
async def test_real_runtime_tool_call_then_reply(tmp_path: Path, script: Script) -> None:
    with trio.fail_after(240):
        async with open_fake_model(script) as server, open_raw_runtime(tmp_path, server) as runtime:
            await runtime.prompt_and_wait("s-read", "READ the file")
    calls = runtime.events("s-read", "tool/call")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("read", {"file_path": "hello.txt"})
    ]
    [result] = runtime.events("s-read", "tool/result")
    assert "hello from the workspace" in json.dumps(result["message"]["content"])
    last = runtime.events("s-read", "assistant/message")[-1]["message"]["content"]
    assert last == [
        {"type": "reasoning", "text": "reading"},
        {"type": "text", "text": "I read it for READ the file."},
    ]
    assert runtime.turn_ends("s-read") == [{"kind": "completed"}]
    assert [r.kind for r in server.requests] == ["prompt", "tool-results"]


@pytest.mark.integration
async def test_real_runtime_failures_in_concurrent_sessions(tmp_path: Path, script: Script) -> None:
    """Model-side failures map to turn/end codes; four sessions run at once; a session recovers."""
    cases = {
        "s-400": ("E400 please", "INVALID_REQUEST"),
        "s-bad": ("BADSSE please", "MALFORMED_RESPONSE"),
        "s-cut": ("CUT please", "STREAM_CLOSED"),
        "s-max": ("MAX please", None),
    }
    with trio.fail_after(240):
        async with open_fake_model(script) as server, open_raw_runtime(tmp_path, server) as runtime:
            async with trio.open_nursery() as nursery:
                for session, (prompt, _) in cases.items():
                    nursery.start_soon(runtime.prompt_and_wait, session, prompt)
            # the failed prompt and the new one reach the model merged; the newest one decides
            await runtime.prompt_and_wait("s-400", "hello again")
    for session, (_, code) in cases.items():
        first = runtime.turn_ends(session)[0]
        if code is None:
            assert first == {"kind": "max-tokens"}
            assert runtime.assistant_texts(session) == ["truncated"]
        else:
            assert first["kind"] == "error" and first["error"]["code"] == code, first
    assert runtime.turn_ends("s-400")[1] == {"kind": "completed"}
    assert runtime.assistant_texts("s-400") == ["Hello from the fake model"]
    assert [r.prompt for r in server.requests if r.session_id == "s-400"] == [
        "E400 please",
        "hello again",
    ]


async def test_a_request_stops_counting_before_its_client_can_read_the_end(script: Script) -> None:
    """``in_flight`` drops before the answer's last write (which yields to other tasks): a
    client that read its answer to the end, then sends the next request at once (the gateway,
    on the other core), never finds the previous one still counted and gets a spurious 429
    from ``concurrency_limit``. Before, the count dropped after that write, so a client task
    scheduled first (trio orders each batch at random) saw it still at 1, about every other
    time."""
    async with open_fake_model(script, concurrency_limit=1) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        for number in range(1, 41):
            status, _, _ = await http_post(server.port, "/v1/messages", body(user(text("hi"))), session="s1", stream=stream)
            seen = (server.in_flight, len(server.spans))  # no checkpoint since the end of the answer was read
            assert (status, *seen) == (200, 0, number), number
        await stream.aclose()
        assert server.rate_limited == 0

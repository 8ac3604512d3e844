"""The simulated runtime's RPC surface over memory streams, driven by a raw client Connection.

Handshake validation, error messages, session selection, prompts and queues, ``session/query``
and its commands, ``session/wait``, the working directory, resume from a store (also across a
restart of the simulator), shutdown, and that every frame fits the protocol's own wire types.
Virtual time (``autojump_clock``) wherever a turn has delays.
"""

from __future__ import annotations

import base64
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.protocol import (
    NOTIFICATIONS,
    SESSION_EVENT,
    JsonRpcResponseError,
    MethodNotSupportedError,
    SessionEventParams,
    TransportClosedError,
    UnknownEvent,
    make_converter,
)
from dsh_orchestra.testing._simulator import open_simulator, open_simulator_stream
from dsh_orchestra.transport import Connection

from sim_support import INIT, RawClient, SimClient, script_of, sim_client

STRICT = make_converter(forbid_extra_keys=True)


async def error_of(client: SimClient, method: str, params: Any = None) -> tuple[int | None, str]:
    with pytest.raises(JsonRpcResponseError) as info:
        await client.request(method, params)
    return info.value.code, info.value.message


# ---- handshake -------------------------------------------------------------------------


@pytest.mark.parametrize(("params", "message"), [
    ({"cwd": "/w", "provider": "no-such-provider", "model": "x"}, 'no adapter registered for provider "no-such-provider"'),
    ({"cwd": "/w", "model": "x"}, 'no adapter registered for provider "undefined"'),
    ({"provider": "deepseek-official", "model": "m"}, 'The "paths[0]" argument must be of type string. Received undefined'),
    ({"cwd": 5, "provider": "deepseek-official", "model": "m"}, 'The "paths[0]" argument must be of type string. Received type number (5)'),
    ({"cwd": None, "provider": "deepseek-official", "model": "m"}, 'The "paths[0]" argument must be of type string. Received null'),
    ({"cwd": "/w", "provider": "deepseek-official"},
     'adapter returned invalid exact model metadata for provider "deepseek-official" model "undefined"'),
    ({"cwd": "/w", "provider": "deepseek-official", "model": ""},
     'adapter returned invalid exact model metadata for provider "deepseek-official" model ""'),
    ({"cwd": "/w", **INIT, "maxTokens": 0}, "initialize maxTokens must be a positive safe integer"),
    ({"cwd": "/w", **INIT, "maxTokens": 1.5}, "initialize maxTokens must be a positive safe integer"),
    ({"cwd": "/w", **INIT, "maxTokens": True}, "initialize maxTokens must be a positive safe integer"),
    ({"cwd": "/w", **INIT, "maxTokens": 2**53}, "initialize maxTokens must be a positive safe integer"),
    ({"cwd": "/w", **INIT, "reasoningEffort": ""}, "initialize reasoningEffort must be a non-empty string"),
    ({"cwd": "/w", **INIT, "reasoningEffort": 3}, "initialize reasoningEffort must be a non-empty string"),
    ({"cwd": "/w", **INIT, "reasoningEffort": "no-such-effort"},
     'provider "deepseek-official" model "deepseek-v4-flash" does not support reasoning effort "no-such-effort"'),
])
async def test_initialize_is_validated_like_the_real_runtime(params: dict[str, Any], message: str) -> None:
    """Each bad handshake fails -32603 with 0.2.1-rc.2's message, and the server stays usable."""
    async with sim_client(initialize=False) as client:
        assert await error_of(client, "initialize", params) == (-32603, message)
        assert not client.runtime.initialized
        result = await client.request("initialize", {"cwd": "/w", **INIT, "reasoningEffort": "max", "maxTokens": 10})
        assert result == {"serverInfo": {"name": "deepseek-harness-sdk-runtime", "version": "0.0.1"}}


async def test_initialize_records_capabilities_and_route(tmp_path: Path) -> None:
    """approvalRequests and capabilities.userQuestions are recorded; the route reaches request/header."""
    async with sim_client(initialize=False, providers=()) as client:
        await client.request("initialize", {"cwd": str(tmp_path), "provider": "other", "model": "m",
                                            "approvalRequests": True, "capabilities": {"userQuestions": True}})
        assert client.runtime.approvals_enabled and client.runtime.questions_enabled
        await client.run("s", "hi")
        header = client.of_type("s", "request/header")[0]["data"]
        assert header["reason"] == "initial"
        assert header["header"]["config"] == {"provider": "other", "model": "m", "maxTokens": 256000, "reasoningEffort": "high"}
        assert header["header"]["adapterDefaults"] == {"reasoningEffort": True, "maxTokens": True}
        assert "ask_user_question" in {tool["name"] for tool in header["header"]["tools"]}
        context = client.of_type("s", "user/message")[1]["data"]
        assert context["source"]["kind"] == "runtime-context" and str(tmp_path) in context["content"][0]["text"]


async def test_requests_before_initialize_and_unknown_methods() -> None:
    """Session methods need a handshake; unknown methods answer -32601 (newest spec); shutdown always works."""
    async with sim_client(initialize=False) as client:
        for method, params in [("session/prompt", {"sessionId": "s", "contentBlocks": []}),
                               ("session/wait", {"sessionId": "s"}), ("session/resume", {"sessionId": "s"}),
                               ("session/query", {"sessionId": "s", "contentBlocks": []}),
                               ("session/working-directory/get", {"sessionId": "s"}),
                               ("session/working-directory/set", {"sessionId": "s", "path": "."})]:
            assert await error_of(client, method, params) == (-32603, "SDK server is not initialized")
        with pytest.raises(MethodNotSupportedError) as info:
            await client.request("no/such/method", {})
        assert (info.value.code, info.value.message) == (-32601, "method not found: no/such/method")
        assert await client.request("shutdown") == {}


async def test_every_notification_fits_the_wire_types(autojump_clock: MockClock, tmp_path: Path) -> None:
    """What the simulator sends structures into the protocol's classes (the same core on both ends)."""
    script = script_of("""
        [[rules]]
        match = "SPAWN"
        [[rules.spawn]]
        description = "d"
        prompt = "child"
        thinking = "hmm"
        [[rules]]
        match = "FAIL"
        fail = "overloaded"
        [[rules]]
        match = "TOOLS"
        events = { count = 2, size = 300 }
        [[rules.tools]]
        name = "read"
        input = { file_path = "missing.txt" }
    """)
    async with sim_client(script, cwd=str(tmp_path), max_retries=1) as client:
        for text in ("SPAWN", "FAIL", "TOOLS", "/status"):
            await client.run("s", text) if text != "/status" else await client.request(
                "session/query", {"sessionId": "s", "contentBlocks": [{"type": "text", "text": text}]})
        await client.wait("s")
    methods = set()
    for note in client.log:
        methods.add(note.method)
        value = STRICT.structure(note.params, NOTIFICATIONS[note.method])
        if isinstance(value, SessionEventParams) and value.event.type != "sim/padding":
            assert not isinstance(value.event, UnknownEvent), value.event.type
    assert methods == {SESSION_EVENT, "session.status", "subagent.started", "subagent.finished", "session.query.completed"}


# ---- prompts ---------------------------------------------------------------------------


async def test_prompt_creates_the_session_and_returns_its_receipt() -> None:
    """Seq 0-2, the receipt with inserted[0].id == messageId, running, turn/start and the claim
    come before the response; the user/message of the turn carries the same id."""
    async with sim_client() as client:
        message_id = await client.prompt("s1", "Say hello.")
        assert client.types("s1")[:6] == ["permission/preset", "sandbox/mode", "approval/policy",
                                          "agent/inbox/spliced", "turn/start", "agent/inbox/spliced"]
        receipt = client.events("s1")[3]
        assert receipt["seq"] == 3 and receipt["data"]["inserted"][0]["id"] == message_id
        assert receipt["data"]["inserted"][0]["source"] == {"kind": "user"}
        claim = client.events("s1")[5]["data"]
        assert claim == {"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []}
        assert client.notifications("session.status")[0] == {"sessionId": "s1", "status": "running"}
        await client.wait("s1")
        assert client.types("s1") == [
            "permission/preset", "sandbox/mode", "approval/policy", "agent/inbox/spliced", "turn/start",
            "agent/inbox/spliced", "step/start", "system/message", "user/message", "user/message",
            "request/header", "request/context", "session/title", "session-log-deepseek/delivery-accepted",
            "assistant/message", "step/end", "turn/end"]
        prompt = client.of_type("s1", "user/message")[0]
        assert prompt["data"]["id"] == message_id and prompt["surfaceOp"] == "append"
        assert [e["seq"] for e in client.events("s1")] == list(range(17))
        assert client.final_text("s1") == "Hello from the fake model"
        assert client.turn_ends("s1") == [{"kind": "completed"}]
        assert client.notifications("session.status")[-1] == {"sessionId": "s1", "status": "idle"}


async def test_queued_prompts_run_as_consecutive_turns(autojump_clock: MockClock) -> None:
    """Prompts sent while a turn runs become turns 2 and 3 with no idle between; receipts only."""
    script = script_of('[[rules]]\nmatch = "SLOW"\ndelay = 5\nreply = "slow {prompt}"')
    async with sim_client(script) as client:
        await client.prompt("s", "SLOW one")
        second = await client.prompt("s", "two")
        third = await client.prompt("s", "three")
        receipts = [e for e in client.of_type("s", "agent/inbox/spliced") if e["data"]["inserted"]]
        assert [r["data"]["inserted"][0]["id"] for r in receipts[1:]] == [second, third]
        assert [r["data"]["start"] for r in receipts] == [0, 0, 1]
        await client.wait("s")
        assert [e["data"]["turn"] for e in client.of_type("s", "turn/start")] == [1, 2, 3]
        assert [n["status"] for n in client.notifications("session.status")] == ["running", "idle"]
        prompts = [e["data"]["id"] for e in client.of_type("s", "user/message") if e["data"]["source"]["kind"] == "user"]
        assert prompts[1:] == [second, third]


@pytest.mark.parametrize(("params", "message"), [
    ({"sessionId": "", "contentBlocks": []}, "cannot encode an empty path segment"),
    ({"sessionId": "x" * 300, "contentBlocks": []}, "ENAMETOOLONG: name too long, open '"),
    ({"contentBlocks": []}, "session/prompt requires a sessionId string"),
    ({"sessionId": "s", "contentBlocks": "text"}, "params.contentBlocks.filter is not a function"),
])
async def test_prompt_errors(params: dict[str, Any], message: str) -> None:
    async with sim_client() as client:
        code, text = await error_of(client, "session/prompt", params)
        assert code == -32603 and text.startswith(message)


async def test_prompt_without_blocks_fails_after_creating_the_session() -> None:
    """As in 0.2.1-rc.2: the session exists (its first events arrive) before the error."""
    async with sim_client() as client:
        assert await error_of(client, "session/prompt", {"sessionId": "bad"}) == (
            -32603, "Cannot read properties of undefined (reading 'filter')")
        assert client.types("bad") == ["permission/preset", "sandbox/mode", "approval/policy"]
        await client.run("bad", "now it works")
        assert client.turn_ends("bad") == [{"kind": "completed"}]


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"".join(b"\0" + b"\0\0\0" * width for _ in range(height)))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


async def test_images_are_admitted_as_attachments(tmp_path: Path) -> None:
    """An encoded image becomes an attachment reference; bad base64 or a wrong type is refused."""
    data = _png(3, 2)
    encoded = base64.b64encode(data).decode()
    async with sim_client(store=tmp_path / "store") as client:
        await client.request("session/prompt", {"sessionId": "img", "contentBlocks": [
            {"type": "text", "text": "look"}, {"type": "image", "data": encoded, "mimeType": "image/png"}]})
        inserted = client.events("img")[3]["data"]["inserted"][0]["content"][1]
        assert inserted["type"] == "image" and inserted["attachment"]["mediaType"] == "image/png"
        assert (inserted["attachment"]["width"], inserted["attachment"]["height"]) == (3, 2)
        assert inserted["attachment"]["bytes"] == len(data)
        digest = inserted["attachment"]["attachmentId"].removeprefix("sha256:")
        assert (tmp_path / "store" / "attachments" / digest).read_bytes() == data
        for block, message in [({"type": "image", "data": encoded + "=", "mimeType": "image/png"}, "Image upload is not canonical base64."),
                               ({"type": "image", "data": "not base64!", "mimeType": "image/png"}, "Image upload is not canonical base64."),
                               ({"type": "image", "data": encoded, "mimeType": "image/jpeg"}, "Declared image type does not match its bytes.")]:
            assert await error_of(client, "session/prompt", {"sessionId": "img", "contentBlocks": [block]}) == (-32603, message)


async def test_unknown_block_types_fail_the_turn() -> None:
    """A block the model cannot take is accepted at enqueue and fails the turn UNSUPPORTED_CONTENT."""
    async with sim_client() as client:
        await client.request("session/prompt", {"sessionId": "s", "contentBlocks": [{"type": "bogus"}]})
        await client.wait("s")
        (end,) = client.turn_ends("s")
        assert end["kind"] == "error" and end["error"]["code"] == "UNSUPPORTED_CONTENT"
        assert not client.of_type("s", "assistant/message") and client.of_type("s", "assistant/attempt")


# ---- session/query ---------------------------------------------------------------------


def _query(session: str, *texts: str) -> dict[str, Any]:
    return {"sessionId": session, "contentBlocks": [{"type": "text", "text": t} for t in texts]}


async def test_query_of_ordinary_input_is_a_prompt() -> None:
    async with sim_client() as client:
        result = await client.request("session/query", _query("q", "hello there"))
        assert result["kind"] == "prompt"
        assert client.events("q")[3]["data"]["inserted"][0]["id"] == result["messageId"]
        await client.wait("q")
        assert client.final_text("q") == "Hello from the fake model"
        assert not client.notifications("session.query.completed")


async def test_status_command_completes_before_its_response() -> None:
    """/status: command/run and command/done events and session.query.completed, then the result."""
    async with sim_client() as client:
        await client.run("q", "first")
        result = await client.request("session/query", _query("q", "/status"))
        (completed,) = client.notifications("session.query.completed")  # already here: it came first
        assert result["kind"] == "command"
        execution = result["execution"]
        assert execution["name"] == "status" and execution["kind"] == "success" and "1 turns" in execution["text"]
        run, done = client.events("q")[-2:]
        assert run["type"] == "command/run" and run["data"]["commandId"] == execution["commandId"]
        assert done["type"] == "command/done" and done["data"]["sourceEventSeq"] == run["seq"]
        assert completed == {"sessionId": "q", "commandId": execution["commandId"],
                             "finalResponse": execution["text"], "finishReason": None}
        assert client.notifications("session.status")[-1]["status"] == "idle"  # no turn ran


async def test_turn_command_completes_when_its_turn_ends(autojump_clock: MockClock) -> None:
    """/turn (simulator only) queues a model turn; session.query.completed follows the response."""
    script = script_of('[[rules]]\nmatch = "slow"\ndelay = 3\nreply = "did {prompt}"')
    async with sim_client(script) as client:
        result = await client.request("session/query", _query("q", "/turn slow work"))
        assert result["kind"] == "command" and not client.notifications("session.query.completed")
        await client.wait("q")
        (completed,) = client.notifications("session.query.completed")
        assert completed["commandId"] == result["execution"]["commandId"]
        assert (completed["finalResponse"], completed["finishReason"]) == ("did slow work", "completed")


@pytest.mark.parametrize(("blocks", "message"), [
    ([], "session/query input must not be empty"),
    ([{"type": "text", "text": "  \n "}], "session/query input must not be empty"),
    ([{"type": "text", "text": "/status"}, {"type": "text", "text": "more"}],
     "a command must be exactly one text block; any other blocks may only be images"),
])
async def test_query_rejections(blocks: list[dict[str, Any]], message: str) -> None:
    """Rejected before anything runs or is queued: the session is not even created."""
    async with sim_client() as client:
        assert await error_of(client, "session/query", {"sessionId": "q", "contentBlocks": blocks}) == (-32603, message)
        assert client.events("q") == []


async def test_unknown_slash_text_is_ordinary_input() -> None:
    async with sim_client() as client:
        assert (await client.request("session/query", _query("q", "/nope")))["kind"] == "prompt"


# ---- session/wait ----------------------------------------------------------------------


async def test_wait_errors_and_idle_sessions() -> None:
    async with sim_client() as client:
        assert await error_of(client, "session/wait", {"sessionId": "never"}) == (-32603, "unknown SDK session: never")
        assert await error_of(client, "session/wait", {}) == (-32603, "session/wait requires a sessionId string")
        await client.run("s", "hi")
        with trio.fail_after(10):
            assert await client.wait("s") == {}  # idle: at once


async def test_wait_returns_after_failed_turns(autojump_clock: MockClock) -> None:
    script = script_of('[[rules]]\nmatch = "E400"\nfail = "http-400"')
    async with sim_client(script) as client:
        await client.prompt("s", "E400 now")
        assert await client.wait("s") == {}
        assert client.turn_ends("s")[0]["error"]["code"] == "INVALID_REQUEST"


async def test_every_notification_precedes_the_wait_response(autojump_clock: MockClock) -> None:
    """When the wait returns, the turn's turn/end and idle were already delivered."""
    script = script_of('[[rules]]\nmatch = "x"\ndelay = 1.5')
    async with sim_client(script) as client:
        async with trio.open_nursery() as nursery:
            for index in range(5):
                nursery.start_soon(client.run, f"s{index}", "x")
        for index in range(5):
            assert client.turn_ends(f"s{index}") == [{"kind": "completed"}]
            assert {"sessionId": f"s{index}", "status": "idle"} in client.notifications("session.status")


# ---- working directory -----------------------------------------------------------------


async def test_working_directory_methods(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "file.txt").write_text("x")
    other = tmp_path.parent / (tmp_path.name + "-elsewhere")
    other.mkdir()
    async with sim_client(cwd=str(tmp_path)) as client:
        wd = "session/working-directory/"
        assert await client.request(wd + "get", {"sessionId": "w"}) == {"cwd": str(tmp_path)}
        assert client.types("w") == ["permission/preset", "sandbox/mode", "approval/policy"]
        assert await client.request(wd + "set", {"sessionId": "w", "path": "sub"}) == {"cwd": str(tmp_path / "sub")}
        change, notice = client.events("w")[-2:]
        assert change["data"] == {"cwd": str(tmp_path / "sub")}
        assert notice["data"]["target"] == "next-step" and notice["data"]["start"] == 0
        assert notice["data"]["inserted"][0]["source"] == {"kind": "working-directory"}
        assert notice["data"]["inserted"][0]["content"][0]["text"] == (
            f'The working directory changed from "{tmp_path}" to "{tmp_path / "sub"}".')
        assert (await client.request(wd + "set", {"sessionId": "w", "path": "deeper"}))["cwd"] == str(tmp_path / "sub" / "deeper")
        assert (await client.request(wd + "set", {"sessionId": "w", "path": "../.."}))["cwd"] == str(tmp_path)
        assert (await client.request(wd + "set", {"sessionId": "w", "path": str(other)}))["cwd"] == str(other)
        for params, message in [({"sessionId": "w", "path": "missing"}, 'working-directory: directory does not exist: "missing"'),
                                ({"sessionId": "w", "path": str(tmp_path / "file.txt")},
                                 f'working-directory: directory does not exist: "{tmp_path / "file.txt"}"'),
                                ({"sessionId": "w"}, "working-directory set requires a path string"),
                                ({"sessionId": "w", "path": ""}, "working-directory: cd must not be empty"),
                                ({"sessionId": "", "path": "x"}, "working-directory requests require a non-empty sessionId")]:
            assert await error_of(client, wd + "set", params) == (-32603, message)
        assert await error_of(client, wd + "get", {}) == (-32603, "working-directory requests require a non-empty sessionId")
        await client.run("w", "where?")
        kinds = [e["data"]["source"]["kind"] for e in client.of_type("w", "user/message")]
        assert kinds == ["working-directory"] * 4 + ["user", "runtime-context"]
        other.rmdir()
        assert await client.request(wd + "get", {"sessionId": "w"}) == {"cwd": str(tmp_path)}
        assert client.events("w")[-1]["data"]["inserted"][0]["content"][0]["text"] == (
            f'The working directory "{other}" is unavailable. The working directory is now "{tmp_path}".')
        assert await error_of(client, wd + "set", {"sessionId": "new", "path": "missing"}) == (
            -32603, 'working-directory: directory does not exist: "missing"')
        assert client.types("new") == ["permission/preset", "sandbox/mode", "approval/policy"]  # created anyway


# ---- resume and persistence ------------------------------------------------------------


async def test_sessions_survive_a_restart(tmp_path: Path) -> None:
    """A new simulator over the same store resumes a session: stored cwd, next turn, seq gap of one."""
    store, first_cwd, second_cwd = tmp_path / "store", tmp_path / "one", tmp_path / "two"
    first_cwd.mkdir(), second_cwd.mkdir()
    async with sim_client(store=store, cwd=str(first_cwd)) as client:
        await client.run("p", "First turn, to be persisted.")
        last_seq = client.events("p")[-1]["seq"]
        assert await client.request("shutdown") == {}
    async with sim_client(store=store, cwd=str(second_cwd)) as client:
        assert await error_of(client, "session/wait", {"sessionId": "p"}) == (-32603, "unknown SDK session: p")
        assert await error_of(client, "session/prompt", {"sessionId": "p", "contentBlocks": []}) == (
            -32603, 'session "p" already exists')
        assert await error_of(client, "session/working-directory/get", {"sessionId": "p"}) == (
            -32603, 'session "p" already exists')
        assert await client.request("session/resume", {"sessionId": "p"}) == {}
        assert client.log == []  # no notifications during resume
        assert await error_of(client, "session/resume", {"sessionId": "p"}) == (
            -32603, "SDK session is already open or opening: p")
        assert await client.wait("p") == {}
        assert await client.request("session/working-directory/get", {"sessionId": "p"}) == {"cwd": str(first_cwd)}
        await client.run("p", "Second turn after resume.")
        events = client.events("p")
        assert events[0]["seq"] == last_seq + 2
        assert [e["data"]["turn"] for e in client.of_type("p", "turn/start")] == [2]
        assert client.of_type("p", "request/header")[0]["data"]["reason"] == "resume"
        assert not client.of_type("p", "system/message") and not client.of_type("p", "session/title")
        record = client.runtime.sessions["p"].record
        assert [m["text"] for m in record.history] == [
            "First turn, to be persisted.", "Hello from the fake model", "Second turn after resume.", "Hello from the fake model"]
        assert await error_of(client, "session/resume", {"sessionId": "missing"}) == (-32603, 'session "missing" not found')
        assert await error_of(client, "session/resume", {"sessionId": ""}) == (
            -32603, "session/resume requires a non-empty sessionId string")
        assert await error_of(client, "session/resume", {}) == (-32603, "session/resume requires a non-empty sessionId string")


async def test_resume_after_a_crash_repairs_the_interrupted_turn(autojump_clock: MockClock, tmp_path: Path) -> None:
    """A crash mid-turn ends the stream (exit status 3); the resumed session starts the next turn."""
    script = script_of('[[rules]]\nmatch = "CRASH"\ncrash = true')
    store = tmp_path / "store"
    async with sim_client(script, store=store) as client:
        await client.run("c", "fine")
        await client.prompt("c", "CRASH now")
        with pytest.raises(TransportClosedError):
            await client.wait("c")
        assert client.runtime.exit_status == 3
        last_seq = client.events("c")[-1]["seq"]
    async with sim_client(script, store=store) as client:
        assert await client.request("session/resume", {"sessionId": "c"}) == {}
        await client.run("c", "after the crash")
        assert client.events("c")[0]["seq"] == last_seq + 3  # restore marker and the repaired turn/end
        assert [e["data"]["turn"] for e in client.of_type("c", "turn/start")] == [3]
        assert client.turn_ends("c") == [{"kind": "completed"}]


async def test_a_session_held_by_a_live_simulator_cannot_be_resumed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    async with sim_client(store=store) as first:
        await first.run("held", "hi")
        async with sim_client(store=store) as second:
            assert await error_of(second, "session/resume", {"sessionId": "held"}) == (
                -32603, 'session "held" is already owned by an active write handle')
    async with sim_client(store=store) as third:  # released when the first one ended
        assert await third.request("session/resume", {"sessionId": "held"}) == {}


async def test_session_ids_are_escaped_into_file_names(tmp_path: Path) -> None:
    store = tmp_path / "store"
    async with sim_client(store=store) as client:
        for session in ("a/b", "../x", "名前", "with space"):
            await client.run(session, "hi")
        await client.request("shutdown")
    names = sorted(p.name for p in store.glob("*.json"))
    assert names == sorted(["a~002fb.json", "..~002fx.json", "~540d~524d.json", "with~0020space.json"])
    async with sim_client(store=store) as client:
        assert await client.request("session/resume", {"sessionId": "名前"}) == {}


# ---- shutdown --------------------------------------------------------------------------


async def test_shutdown_is_idempotent_and_ends_the_stream(autojump_clock: MockClock) -> None:
    """Repeated shutdowns answer {}; later session calls fail; a running turn gets no turn/end."""
    script = script_of('[[rules]]\nmatch = "SLOW"\ndelay = 100')
    async with open_simulator_stream(script) as stream:
        client = RawClient(stream)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.read)
            await client.send({"id": 1, "method": "initialize", "params": {"cwd": "/w", **INIT}})
            await client.send({"id": 2, "method": "session/prompt", "params": {
                "sessionId": "s", "contentBlocks": [{"type": "text", "text": "SLOW"}]}})
            await client.wait_for([1, 2])
            await client.send({"id": 3, "method": "session/wait", "params": {"sessionId": "s"}})
            await client.send_batch([{"id": 4, "method": "shutdown"}, {"id": 5, "method": "shutdown", "params": {}},
                                     {"id": 6, "method": "session/prompt", "params": {"sessionId": "s", "contentBlocks": []}},
                                     {"id": 7, "method": "session/wait", "params": {"sessionId": "s"}}])
            with trio.fail_after(5):
                await client.wait_closed()
    answers = {f["id"]: f.get("result", f.get("error")) for f in client.frames if "id" in f}
    assert answers[3] == {} and answers[4] == {} and answers[5] == {}
    assert answers[6] == {"code": -32603, "message": "SDK server is shutting down"}
    assert answers[7] == {"code": -32603, "message": "unknown SDK session: s"}
    types = [f["params"]["event"]["type"] for f in client.frames if f.get("method") == "session.event"]
    assert "turn/start" in types and "turn/end" not in types


async def test_closing_the_client_end_stops_the_simulator() -> None:
    """End of input ends the service with status 0 (the process would exit 0)."""
    async with open_simulator() as (runtime, stream):
        await stream.send_all(b'{"id":1,"method":"initialize","params":{"cwd":"/w","provider":"deepseek-official","model":"m"}}\n')
        await stream.send_eof() if hasattr(stream, "send_eof") else await stream.aclose()
        with trio.fail_after(30):
            await trio.testing.wait_all_tasks_blocked()  # memory streams: the simulator has done all it will
        assert runtime.exit_status == 0


async def test_connection_over_the_stream_helper() -> None:
    """open_simulator_stream yields a plain trio Stream a Connection can use."""
    async with open_simulator_stream() as stream:
        async with trio.open_nursery() as nursery:
            connection = Connection(stream, name="plain")
            await nursery.start(connection.run)
            await connection.request("initialize", {"cwd": os.getcwd(), **INIT})
            assert "messageId" in await connection.request(
                "session/prompt", {"sessionId": "s", "contentBlocks": [{"type": "text", "text": "hi"}]})
            assert await connection.request("session/wait", {"sessionId": "s"}) == {}
            nursery.cancel_scope.cancel()


async def test_a_second_initialize_routes_only_later_sessions(tmp_path: Path) -> None:
    """As 0.2.1-rc.2: a repeated handshake is accepted; open sessions keep their route and cwd."""
    async with sim_client(cwd=str(tmp_path)) as client:
        await client.run("early", "hi")
        await client.request("initialize", {"cwd": "/other", "provider": "deepseek-official", "model": "second-model"})
        await client.run("early", "again")
        await client.run("late", "hi")
        assert [e["data"]["message"]["source"]["model"] for e in client.of_type("early", "assistant/message")] == [
            "deepseek-v4-flash", "deepseek-v4-flash"]
        assert client.of_type("late", "request/header")[0]["data"]["header"]["config"]["model"] == "second-model"
        assert (await client.request("session/working-directory/get", {"sessionId": "late"}))["cwd"] == "/other"
        assert (await client.request("session/working-directory/get", {"sessionId": "early"}))["cwd"] == str(tmp_path)


def test_the_module_entry_point_usage() -> None:
    from dsh_orchestra.testing.__main__ import main

    assert main([]) == 2
    assert main(["no-such-command"]) == 2
    assert main(["sim", "--help"]) == 0
    assert main(["sim", "--no-such-option"]) == 2

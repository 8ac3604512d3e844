"""Scripted behaviours in the simulated runtime: subagents, tools, approvals, questions, failures,
crashes, hangs and noise. In-process over memory streams with a raw client Connection, in
virtual time (``autojump_clock``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.protocol import JsonRpcResponseError, TransportClosedError
from dsh_orchestra.transport import RpcError

from sim_support import SimClient, script_of, sim_client

SUBAGENTS = script_of("""
[[rules]]
name = "fan-out"
match = "SPAWN"
reply = "spawned"
after_subagents = "all done for {prompt}"

[[rules.spawn]]
description = "quick one"
prompt = "CHILD: quick"
reply = "quick result"
delay = 1

[[rules.spawn]]
description = "slow one"
prompt = "CHILD: slow"
reply = "slow result"
thinking = "pondering"
delay = 3

[[rules.spawn]]
description = "by rule"
prompt = "CHILD: ruled"

[[rules]]
name = "child-rule"
regex = "^CHILD:"
reply = "ruled: {prompt}"
delay = 2

[[rules]]
name = "truncated-child"
match = "TRUNCATE"
[[rules.spawn]]
description = "long"
prompt = "long child"
reply = "and then"
max_tokens = true
""")


def _positions(client: SimClient) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for note in client.log:
        if note.method == "session.event":
            out.append(("event", note.params["sessionId"], note.params["event"]["type"]))
        elif note.method == "session.status":
            out.append(("status", note.params["sessionId"], note.params["status"]))
        else:
            out.append((note.method, note.params.get("parentSessionId"), note.params.get("childSessionId")))
    return out


async def test_subagents_each_with_their_own_behaviour(autojump_clock: MockClock) -> None:
    """Three children: the observed order per child, seq from 3, catalog entries, results to the parent."""
    async with sim_client(SUBAGENTS, turn_latency=0.02) as client:
        await client.run("root", "SPAWN please")
        started = client.notifications("subagent.started")
        children = [edge["childSessionId"] for edge in started]
        assert len(children) == 3 and all(edge["parentSessionId"] == "root" for edge in started)
        catalog = [e["data"] for e in client.of_type("root", "subagent/catalog")]
        assert [c["childId"] for c in catalog] == children
        assert [c["label"] for c in catalog] == ["quick one", "slow one", "by rule"]
        assert all(c["mode"] == "continuable" and c["version"] == 0 for c in catalog)
        results = [e["data"]["message"]["content"][0]["text"] for e in client.of_type("root", "tool/result")]
        assert results == [f"started subagent {child}" for child in children]
        for child in children:
            assert client.events(child)[0]["seq"] == 3
            first = client.events(child)[0]["data"]["inserted"][0]
            assert first["content"][1]["text"].startswith('Your parent agent id is "root".')
        assert [client.final_text(c) for c in children] == ["quick result", "slow result", "ruled: CHILD: ruled"]
        finished = {f["childSessionId"]: f for f in client.notifications("subagent.finished")}
        assert finished[children[1]]["lastAssistantMessage"] == [
            {"type": "reasoning", "text": "pondering"}, {"type": "text", "text": "slow result"}]
        assert {(f["status"], f["stopReason"], f["provider"]) for f in finished.values()} == {("ok", "completed", "spawn")}
        assert all(f["agentId"] == f["childSessionId"] for f in finished.values())
        # each child: child turn/end -> child idle -> parent splice -> ... -> subagent.finished
        order = _positions(client)
        for child in children:
            end = order.index(("event", child, "turn/end"))
            assert order[end + 1] == ("status", child, "idle")
            assert order[end + 2] == ("event", "root", "agent/inbox/spliced")
            finished_at = order.index(("subagent.finished", "root", child))
            assert finished_at > end + 2
            assert order.index(("subagent.started", "root", child)) < order.index(("event", child, "agent/inbox/spliced"))
        assert order[-1] == ("status", "root", "idle")  # the wait returned after the whole tree settled
        notices = [e["data"] for e in client.of_type("root", "user/message") if e["data"]["source"]["kind"] == "subagent-settled"]
        by_completion = [children[0], children[2], children[1]]  # delays 1 s, 2 s (by rule), 3 s
        assert [n["source"]["senderSessionId"] for n in notices] == by_completion
        assert notices[0]["content"][1:] == [{"type": "text", "text": "Its closing message:"}, {"type": "text", "text": "quick result"}]
        assert client.final_text("root") == "all done for SPAWN please"
        assert [n["status"] for n in client.notifications("session.status") if n["sessionId"] == "root"] == [
            "running", "idle", "running", "idle", "running", "idle", "running", "idle"]
        for child in children:
            code_message = await _error(client, "session/prompt", {"sessionId": child, "contentBlocks": []})
            assert code_message == (-32603, f'session "{child}" already exists')
            assert await _error(client, "session/wait", {"sessionId": child}) == (-32603, f"unknown SDK session: {child}")


async def test_a_truncated_child_reports_max_tokens(autojump_clock: MockClock) -> None:
    async with sim_client(SUBAGENTS) as client:
        await client.run("root", "TRUNCATE")
        (finished,) = client.notifications("subagent.finished")
        assert (finished["status"], finished["stopReason"]) == ("error", "max-tokens")
        assert client.turn_ends(finished["childSessionId"]) == [{"kind": "max-tokens"}]
        notice = [e for e in client.of_type("root", "user/message") if e["data"]["source"]["kind"] == "subagent-settled"][0]
        assert [b["text"] for b in notice["data"]["content"]] == [
            f"Background subagent {finished['childSessionId']} ran out of room before it finished.",
            "It left no closing message."]


async def _error(client: SimClient, method: str, params: Any) -> tuple[Any, str]:
    with pytest.raises(JsonRpcResponseError) as info:
        await client.request(method, params)
    return info.value.code, info.value.message


# ---- tools -----------------------------------------------------------------------------


async def test_tool_calls_and_their_results(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    script = script_of("""
        [[rules]]
        match = "TOOLS"
        reply = "tools done"
        [[rules.tools]]
        name = "read"
        input = { file_path = "notes.txt" }
        [[rules.tools]]
        name = "read"
        input = { file_path = "missing.txt" }
        [[rules.tools]]
        name = "no_such_tool"
        [[rules.tools]]
        name = "bash"
        input = { command = "ls" }
        [[rules.tools]]
        name = "glob"
        input = { pattern = "*" }
    """)
    async with sim_client(script, cwd=str(tmp_path)) as client:
        await client.run("t", "TOOLS")
        calls = client.of_type("t", "tool/call")
        results = client.of_type("t", "tool/result")
        assert [c["data"]["name"] for c in calls] == ["read", "read", "no_such_tool", "bash", "glob"]
        assert [r["sourceEventSeqs"] for r in results] == [[c["seq"]] for c in calls]
        assert max(c["seq"] for c in calls) < min(r["seq"] for r in results)  # all calls, then results
        read, missing, unknown, bad_args, glob = (r["data"] for r in results)
        assert read["meta"]["lines"] == [{"number": 1, "text": "one"}, {"number": 2, "text": "two"}]
        assert read["message"]["isError"] is False and read["message"]["toolCallId"] == calls[0]["data"]["callId"]
        assert (missing["error"]["code"], unknown["error"]["code"], bad_args["error"]["code"]) == (
            "FS_NOT_FOUND", "UNKNOWN_TOOL", "INVALID_ARGS")
        assert unknown["message"]["content"][0]["text"] == 'Error: unknown tool "no_such_tool"'
        assert glob["message"]["isError"] is False
        assert [e["data"]["step"] for e in client.of_type("t", "assistant/message")] == [1, 2]
        first = client.of_type("t", "assistant/message")[0]["data"]["message"]["content"]
        assert [b["type"] for b in first] == ["tool-call"] * 5
        assert client.final_text("t") == "tools done"


# ---- approvals -------------------------------------------------------------------------

APPROVAL = script_of("""
[[rules]]
match = "DEPLOY"
reply = "deploy was {outcome}"
approval = { tool = "bash", reason = "needs network" }

[[rules]]
match = "IMPATIENT"
reply = "impatient: {outcome}"
approval = { tool = "write", timeout = 5 }
""")


@pytest.mark.parametrize("outcome", ["allowed-once", "rejected", "cancelled"])
async def test_approval_round_trip(outcome: str) -> None:
    asked: list[dict[str, Any]] = []

    async def approve(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"outcome": outcome}

    async with sim_client(APPROVAL, init={"approvalRequests": True}, handlers={"approval/request": approve}) as client:
        await client.run("a", "DEPLOY now")
        (call,) = client.of_type("a", "tool/call")
        (request,) = asked
        assert request == {"sessionId": "a", "toolName": "bash", "callId": call["data"]["callId"],
                           "reason": "escalate sandbox to danger-full-access: needs network"}
        asked_event, decided = client.of_type("a", "approval/asked")[0], client.of_type("a", "approval/decided")[0]
        assert asked_event["data"]["callId"] == call["data"]["callId"] and asked_event["data"]["reason"] == request["reason"]
        assert decided["data"] == {"id": asked_event["data"]["id"], "outcome": outcome}
        (result,) = client.of_type("a", "tool/result")
        assert result["data"]["message"]["isError"] is (outcome != "allowed-once")
        assert client.final_text("a") == f"deploy was {outcome}"


async def test_approval_error_answers_and_bad_outcomes_deny() -> None:
    answers = iter([RpcError(-32601, "method not found: approval/request"), {"outcome": "maybe"}])

    async def approve(params: dict[str, Any]) -> dict[str, Any]:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async with sim_client(APPROVAL, init={"approvalRequests": True}, handlers={"approval/request": approve}) as client:
        await client.run("a", "DEPLOY")
        await client.run("a", "DEPLOY")
        assert [e["data"]["outcome"] for e in client.of_type("a", "approval/decided")] == ["rejected", "rejected"]


async def test_without_approval_requests_the_runtime_fails_closed() -> None:
    """As 0.2.1-rc.2: approval/asked, approval/decided unavailable, a tool error; no request."""
    async def never(params: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("approval/request must not be sent")

    async with sim_client(APPROVAL, handlers={"approval/request": never}) as client:
        await client.run("a", "DEPLOY")
        assert [e["data"]["outcome"] for e in client.of_type("a", "approval/decided")] == ["unavailable"]
        text = client.of_type("a", "tool/result")[0]["data"]["message"]["content"][0]["text"]
        assert text == ('Error: sandbox escalation to "danger-full-access" requires approval, '
                        "but no approval channel is available")
        assert client.final_text("a") == "deploy was unavailable"


async def test_approval_timeout_cancels_and_ignores_the_late_answer(autojump_clock: MockClock) -> None:
    late = trio.Event()

    async def slow(params: dict[str, Any]) -> dict[str, Any]:
        await trio.sleep(60)
        late.set()
        return {"outcome": "allowed-once"}

    async with sim_client(APPROVAL, init={"approvalRequests": True}, handlers={"approval/request": slow}) as client:
        start = trio.current_time()
        await client.run("a", "IMPATIENT")
        assert 5 <= trio.current_time() - start < 6
        assert client.final_text("a") == "impatient: cancelled"
        await late.wait()  # the late answer goes out and is dropped
        await client.run("a", "plain")
        assert client.turn_ends("a") == [{"kind": "completed"}] * 2


async def test_shutdown_cancels_a_pending_approval(autojump_clock: MockClock) -> None:
    asked = trio.Event()

    async def hold(params: dict[str, Any]) -> dict[str, Any]:
        asked.set()
        await trio.sleep_forever()
        raise AssertionError

    async with sim_client(APPROVAL, init={"approvalRequests": True}, handlers={"approval/request": hold}) as client:
        await client.prompt("a", "DEPLOY")
        async with trio.open_nursery() as nursery:
            waited: list[Any] = []

            async def wait() -> None:
                waited.append(await client.wait("a"))

            nursery.start_soon(wait)
            await asked.wait()
            assert await client.request("shutdown") == {}
        assert waited == [{}]  # a pending wait is answered during the teardown
        assert not client.of_type("a", "approval/decided") and not client.of_type("a", "turn/end")


# ---- questions -------------------------------------------------------------------------

QUESTION = script_of("""
[[rules]]
match = "CHOOSE"
reply = "you picked {answer}"
question = { id = "q1", question = "Which one?", options = ["a", "b"], header = "Pick", multi_select = true, detail = "either" }

[[rules]]
match = "TIMED"
reply = "timed [{answer}]"
question = { question = "Quick?", timeout = 2 }
""")


@pytest.mark.parametrize(("answer", "reply", "code"), [
    ({"answers": [{"id": "q1", "selected": ["b"]}]}, "you picked b", None),
    ({"answers": [{"id": "q1", "selected": ["a", "b"], "custom": "both"}]}, "you picked a, b, both", None),
    ({"cancelled": True}, "you picked ", "ASK_CANCELLED"),
    ({"answers": []}, "you picked ", "BAD_ANSWER"),
    ({"answers": [{"id": "q1", "selected": ["a"]}, {"id": "q1", "selected": ["b"]}]}, "you picked ", "BAD_ANSWER"),
    ({"answers": [{"id": "other", "selected": []}]}, "you picked ", "BAD_ANSWER"),
    (RpcError(-32000, "host failed"), "you picked ", "PROVIDER_ERROR"),
])
async def test_question_round_trip(answer: Any, reply: str, code: str | None) -> None:
    asked: list[dict[str, Any]] = []

    async def ask(params: dict[str, Any]) -> Any:
        asked.append(params)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async with sim_client(QUESTION, init={"capabilities": {"userQuestions": True}}, handlers={"user-question/ask": ask}) as client:
        await client.run("q", "CHOOSE")
        (params,) = asked
        assert params["sessionId"] == "q" and params["requestId"].startswith("req_") and len(params["requestId"]) == 36
        assert params["questions"] == [{"id": "q1", "question": "Which one?", "detail": "either", "header": "Pick",
                                        "options": [{"label": "a"}, {"label": "b"}], "multiSelect": True}]
        (call,) = client.of_type("q", "tool/call")
        assert call["data"]["name"] == "ask_user_question"
        result = client.of_type("q", "tool/result")[0]["data"]
        assert (result.get("error") or {}).get("code") == code
        assert client.final_text("q") == reply


async def test_without_the_capability_questions_have_no_provider() -> None:
    async def never(params: dict[str, Any]) -> Any:
        raise AssertionError("user-question/ask must not be sent")

    async with sim_client(QUESTION, handlers={"user-question/ask": never}) as client:
        await client.run("q", "CHOOSE")
        result = client.of_type("q", "tool/result")[0]["data"]
        assert result["error"] == {"name": "UserQuestionError", "code": "NO_PROVIDER"}
        assert result["message"]["content"][0]["text"] == "Error: no user-questions answerer accepted the request"


async def test_question_timeout_sends_cancelled_and_ignores_the_late_answer(autojump_clock: MockClock) -> None:
    answered = trio.Event()

    async def slow(params: dict[str, Any]) -> Any:
        await trio.sleep(10)
        answered.set()
        return {"answers": [{"id": "q1", "selected": []}]}

    async with sim_client(QUESTION, init={"capabilities": {"userQuestions": True}}, handlers={"user-question/ask": slow}) as client:
        await client.run("q", "TIMED")
        (cancelled,) = client.notifications("user-question.cancelled")
        request = client.of_type("q", "tool/call")[0]
        assert cancelled["sessionId"] == "q" and cancelled["requestId"].startswith("req_")
        assert client.of_type("q", "tool/result")[0]["data"]["error"]["code"] == "ASK_TIMED_OUT"
        assert client.final_text("q") == "timed []"
        assert request["data"]["name"] == "ask_user_question"
        await answered.wait()
        await client.run("q", "again?")
        assert len(client.turn_ends("q")) == 2


# ---- failures --------------------------------------------------------------------------

FAILS = script_of("""
[[rules]]
match = "http-500"
fail = "http-500"
delay = 1
[[rules]]
match = "http-400"
fail = "http-400"
[[rules]]
match = "overloaded"
fail = "overloaded"
[[rules]]
match = "malformed"
fail = "malformed"
[[rules]]
match = "stream-cut"
fail = "stream-cut"
[[rules]]
match = "LONG"
reply = "and then"
max_tokens = true
""")


@pytest.mark.parametrize(("mode", "code", "status", "retried"), [
    ("http-500", "SERVER", 500, True), ("http-400", "INVALID_REQUEST", 400, False),
    ("overloaded", "SERVER", None, True), ("malformed", "MALFORMED_RESPONSE", None, False),
    ("stream-cut", "STREAM_CLOSED", None, False),
])
async def test_model_failures_end_the_turn_with_the_runtime_codes(
        autojump_clock: MockClock, mode: str, code: str, status: int | None, retried: bool) -> None:
    async with sim_client(FAILS, max_retries=2, retry_delay=0.5) as client:
        start = trio.current_time()
        await client.run("f", mode)
        (end,) = client.turn_ends("f")
        assert end["kind"] == "error" and end["error"]["code"] == code and end["error"].get("status") == status
        assert not client.of_type("f", "assistant/message")
        attempts = client.of_type("f", "assistant/attempt")
        assert len(attempts) == (3 if retried else 1)
        assert attempts[-1]["data"]["stream"][-1]["chunk"]["reason"]["failure"]["code"] == code
        retries = [e["data"] for e in client.of_type("f", "llm/retry")]
        assert [r["retry"] for r in retries] == ([1, 2] if retried else [])
        if mode == "http-500":  # the delay comes first and again before each retry; backoff 0.5 s, 1 s
            elapsed = trio.current_time() - start
            assert 1 + 0.5 + 1 + 1 + 1 <= elapsed < 1 + (0.5 + 1) * 1.1 + 1 + 1 + 0.1
        assert await client.wait("f") == {}


async def test_max_tokens_ends_the_turn_max_tokens() -> None:
    async with sim_client(FAILS) as client:
        await client.run("m", "LONG")
        assert client.turn_ends("m") == [{"kind": "max-tokens"}]
        assert client.final_text("m") == "and then"
        finish = client.of_type("m", "assistant/message")[0]["data"]["stream"][-1]["chunk"]["reason"]
        assert finish == {"kind": "max-tokens"}


# ---- crash, hang, noise ----------------------------------------------------------------


async def test_crash_after_prompts_ends_the_stream_unanswered() -> None:
    script = script_of("crash_after_prompts = 2")
    async with sim_client(script) as client:
        await client.run("s", "one")
        with pytest.raises(TransportClosedError):
            await client.prompt("s", "two")
        assert client.runtime.exit_status == 3
        assert client.runtime.prompts_received == 2


async def test_crash_status_is_configurable(autojump_clock: MockClock) -> None:
    script = script_of('[[rules]]\nmatch = "BOOM"\ncrash = true\ndelay = 1')
    async with sim_client(script, crash_status=7) as client:
        await client.prompt("s", "BOOM")
        with pytest.raises(TransportClosedError):
            await client.wait("s")
        assert client.runtime.exit_status == 7
        assert client.types("s")[-1] == "session/title"  # committed events were written before the end


async def test_a_hung_turn_never_finishes_but_others_do(autojump_clock: MockClock) -> None:
    script = script_of('[[rules]]\nmatch = "HANG"\nhang = true')
    async with sim_client(script) as client:
        await client.prompt("stuck", "HANG")
        with trio.move_on_after(1000) as scope:
            await client.wait("stuck")
        assert scope.cancelled_caught
        await client.run("other", "fine")
        assert client.turn_ends("other") == [{"kind": "completed"}] and client.turn_ends("stuck") == []
        assert await client.request("shutdown") == {}


async def test_malformed_frames_and_padding_events() -> None:
    script = script_of('[[rules]]\nmatch = "NOISY"\nmalformed_frames = 3\nevents = { count = 4, size = 800 }')
    async with sim_client(script) as client:
        await client.run("n", "NOISY")
        assert client.connection.statistics().ignored_lines == 3
        padding = client.of_type("n", "sim/padding")
        assert len(padding) == 4 and all(e["ignorable"] is True for e in padding)
        assert all(700 <= len(orjson.dumps(e)) <= 900 for e in padding)
        assert client.turn_ends("n") == [{"kind": "completed"}]

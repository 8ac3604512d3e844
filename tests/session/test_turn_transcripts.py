"""Turn collection on the recorded wire transcripts of the real runtime, without processes.

Each prompt goes through the same steps as ``Session.run`` (see transcript_replay.py): a
router subscription opened when the prompt is sent, a collector keyed by the returned
``messageId``, fed what was buffered when the ``session/wait`` response arrived.
"""

from __future__ import annotations

import pytest
from transcript_replay import Replayed, notifications, replay

from dsh_orchestra.protocol import SdkProtocolError, TextBlock
from dsh_orchestra.session import SubagentResult, TurnCollector
from dsh_orchestra.transport import Notification


def seqs(run: Replayed) -> list[int]:
    return [event["seq"] for event in run.result.events]


def types(run: Replayed) -> list[str]:
    return [event["type"] for event in run.result.events]


def user_prompts(run: Replayed) -> list[str]:
    return [e["data"]["id"] for e in run.result.events
            if e["type"] == "user/message" and e["data"]["source"]["kind"] == "user"]


def test_01_simple_turn() -> None:
    [run] = replay("01-simple-turn.jsonl")
    result = run.result
    assert (result.final_response, result.finish_reason, result.error) == ("Hello from the fake model", "completed", None)
    assert result.ok and result.turns == (1,)
    assert result.session_id == "session-simple" and result.message_id == run.message_id
    # from the receipt on (the session's first three events come before it and are skipped)
    assert result.events[0]["type"] == "agent/inbox/spliced" and seqs(run) == list(range(3, 17))
    assert types(run)[-1] == "turn/end" and "assistant/message" in types(run)
    assert user_prompts(run) == [run.message_id]
    assert result.notifications == () and result.subagents == ()


def test_02_subagent_waits_for_the_second_root_turn() -> None:
    """The root goes idle after turn 1; the result covers turn 2 too and the child's report."""
    [run] = replay("02-subagent.jsonl")
    result = run.result
    assert result.turns == (1, 2)
    assert result.final_response == "Hello from the fake model"  # turn 2's text, not "Tool finished: ..."
    assert result.finish_reason == "completed"
    assert seqs(run) == list(range(3, 33))  # both turns of the root, nothing else
    [child] = result.subagents
    assert child == SubagentResult(
        provider="spawn", agent_id=child.child_session_id, parent_session_id="session-root",
        child_session_id="433e7e18-1882-49f7-bc34-bdd8c8c8e3a2", status="ok", stop_reason="completed",
        last_assistant_message=(TextBlock(text="child-done"),), text="child-done")
    methods = [n.method for n in result.notifications]
    assert methods[0] == "subagent.started" and methods[-1] == "subagent.finished"
    assert all(n.params.get("sessionId", n.params.get("childSessionId")) == child.child_session_id
               for n in result.notifications)
    child_seqs = [n.params["event"]["seq"] for n in result.notifications if n.method == "session.event"]
    assert child_seqs == sorted(child_seqs) and child_seqs[0] == 3  # wire order kept


def test_02_first_idle_is_not_the_end() -> None:
    """What the official SDK returns (stop at the first root idle) is only turn 1."""
    stream = notifications("02-subagent.jsonl")
    first_idle = next(i for i, n in enumerate(stream) if n.method == "session.status"
                      and n.params == {"sessionId": "session-root", "status": "idle"})
    [run] = replay("02-subagent.jsonl")
    collector = TurnCollector("session-root", run.message_id)
    collector.feed_all(stream[: first_idle + 1])
    early = collector.result(duration=0.0)
    assert early.final_response == "Tool finished: toolu_fake_2" and early.turns == (1,) and early.subagents == ()


def test_03_resumed_session_continues_with_turn_2() -> None:
    [first] = replay("03a-resume-setup.jsonl")
    [second] = replay("03b-resume-new-process.jsonl")
    assert first.result.turns == (1,) and second.result.turns == (2,)
    assert seqs(second)[0] == 18 and second.result.finish_reason == "completed"
    assert second.result.final_response == "Hello from the fake model"


def test_04_model_failures_are_results_not_exceptions() -> None:
    server, malformed, recovered = replay("04-model-failure.jsonl")
    assert (server.result.finish_reason, server.result.final_response) == ("error", "")
    assert server.result.error is not None and server.result.error.code == "SERVER"
    assert server.result.error.status == 500 and not server.result.ok
    assert types(server).count("llm/retry") == 5 and "assistant/message" not in types(server)
    assert malformed.result.finish_reason == "error"
    assert malformed.result.error is not None and malformed.result.error.code == "MALFORMED_RESPONSE"
    assert "invalid JSON" in malformed.result.error.message
    assert (recovered.result.finish_reason, recovered.result.error) == ("completed", None)
    assert [r.result.turns for r in (server, malformed, recovered)] == [(1,), (2,), (3,)]


def test_05_working_directory_notices_and_a_tool_call() -> None:
    plain, with_tool = replay("05-working-directory.jsonl")
    assert plain.result.finish_reason == "completed"
    kinds = [e["data"]["source"]["kind"] for e in plain.result.events if e["type"] == "user/message"]
    assert "working-directory" in kinds  # queued notices surface in the next turn
    assert with_tool.result.final_response.startswith("Tool finished: ")
    assert {"tool/call", "tool/result"} <= set(types(with_tool))


def test_07_concurrent_sessions_each_collect_only_their_own() -> None:
    beta, alpha, first_queued, second_queued = replay("07-concurrent-sessions.jsonl")
    assert (beta.session_id, alpha.session_id) == ("session-beta", "session-alpha")
    assert beta.result.final_response == "Thought about it."  # the reasoning block is not text
    assert alpha.result.final_response == "Hello from the fake model"
    assert user_prompts(beta) == [beta.message_id] and user_prompts(alpha) == [alpha.message_id]
    assert seqs(alpha) == seqs(beta) == list(range(3, 17))
    assert beta.result.events != alpha.result.events


def test_07_queued_prompts_are_attributed_to_their_own_turns() -> None:
    """Two prompts queued on one session run as turns 2 and 3 with no idle in between."""
    *_, first, second = replay("07-concurrent-sessions.jsonl")
    assert (first.result.turns, second.result.turns) == ((2,), (3,))
    assert user_prompts(first) == [first.message_id] and user_prompts(second) == [second.message_id]
    assert seqs(first) == list(range(17, 27))
    # the second receipt came in the middle of turn 2: the rest of turn 2 is not the second's
    assert seqs(second) == [20, *range(27, 35)]
    assert [e["data"]["turn"] for e in second.result.events if e["type"] in ("turn/start", "turn/end")] == [3, 3]
    assert first.result.finish_reason == second.result.finish_reason == "completed"


def test_06_an_approval_attempt_fails_closed_inside_the_turn() -> None:
    [run] = replay("06-errors.jsonl")
    assert run.result.finish_reason == "completed"
    decided = [e["data"]["outcome"] for e in run.result.events if e["type"] == "approval/decided"]
    assert decided == ["unavailable"]


def test_a_missing_receipt_is_a_protocol_error() -> None:
    collector = TurnCollector("session-simple", "no-such-message")
    collector.feed_all(notifications("01-simple-turn.jsonl"))
    assert not collector.receipt_seen
    with pytest.raises(SdkProtocolError, match="without the receipt of message 'no-such-message'"):
        collector.result(duration=0.0)


@pytest.mark.parametrize(
    ("event", "path"),
    [
        ({"type": 3, "seq": 1, "data": {}}, "params.event.type"),
        ({"type": "x", "seq": "1", "data": {}}, "params.event.seq"),
        ({"type": "x", "seq": 1, "data": []}, "params.event.data"),
        ("not an object", "params.event"),
    ],
)
def test_malformed_root_events_are_protocol_errors(event: object, path: str) -> None:
    collector = TurnCollector("s1", "m1")
    with pytest.raises(SdkProtocolError) as caught:
        collector.feed(Notification("session.event", {"sessionId": "s1", "event": event}))
    assert caught.value.path == path

"""EventLog: a turn's root events as compact JSON, decoded on access. Pure."""

from __future__ import annotations

from dsh_orchestra.session import EventLog, TurnResult

EVENTS = [{"type": "agent/inbox/spliced", "seq": 3, "data": {"inserted": [{"id": "m1"}]}},
          {"type": "turn/start", "seq": 4, "data": {"turn": 1}},
          {"type": "turn/end", "seq": 5, "data": {"turn": 1, "reason": {"kind": "completed"}}}]


def test_behaves_like_a_sequence_of_dicts() -> None:
    log = EventLog(EVENTS)
    assert len(log) == 3 and log[0] == EVENTS[0] and log[-1]["seq"] == 5
    assert list(log) == EVENTS and log == EVENTS and log == tuple(EVENTS) and log != EVENTS[:2]
    assert isinstance(log[1:], EventLog) and list(log[1:]) == EVENTS[1:]
    assert EVENTS[1] in log and log.index(EVENTS[2]) == 2
    assert [e["type"] for e in reversed(log)] == ["turn/end", "turn/start", "agent/inbox/spliced"]
    assert log.raw[1] == b'{"type":"turn/start","seq":4,"data":{"turn":1}}'
    assert EventLog.from_json(log.raw) == log and hash(EventLog.from_json(log.raw)) == hash(log)
    assert repr(log).startswith("EventLog([{'type': 'agent/inbox/spliced'")
    assert EventLog() == [] and not EventLog()


def test_is_immutable() -> None:
    log = EventLog(EVENTS)
    log[0]["data"]["inserted"].clear()
    assert log[0] == EVENTS[0]


def test_turn_result_accepts_plain_sequences() -> None:
    result = TurnResult(session_id="s", message_id="m1", final_response="", finish_reason="completed", error=None,
                        events=EVENTS, notifications=(), subagents=(), duration=0.0)
    assert isinstance(result.events, EventLog) and result.events == EVENTS
    assert result == TurnResult(session_id="s", message_id="m1", final_response="", finish_reason="completed",
                                error=None, events=tuple(EVENTS), notifications=(), subagents=(), duration=0.0)

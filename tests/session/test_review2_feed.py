"""A run's feed keeps notifications before the prompt's receipt as their wire lines and
decodes them again at the receipt: what the collector gets must be what it would have got
directly, also for notifications without a line (built in-process) mixed with lines."""

from __future__ import annotations

from typing import Any

from dsh_orchestra.protocol import encode_frame, notification_frame
from dsh_orchestra.session._session import _Feed
from dsh_orchestra.session._turn import TurnCollector
from dsh_orchestra.transport import Notification


def event(seq: int, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": "s", "event": {"type": kind, "seq": seq, "time": 0, "data": data}}


def wire(method: str, params: dict[str, Any]) -> Notification:
    """As the connection's reader makes it: with its line."""
    return Notification(method, params, encode_frame(notification_frame(method, params)).rstrip(b"\n"))


MESSAGE = {"id": "m-1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}
PARAMS = [
    event(0, "permission/preset", {}),
    event(1, "agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [MESSAGE]}),
    event(2, "turn/start", {"turn": 1}),
    event(3, "user/message", MESSAGE),
    event(4, "assistant/message", {"turn": 1, "step": 1, "stream": [], "message": {
        "id": "a-1", "role": "assistant", "content": [{"type": "text", "text": "yo"}]}}),
    event(5, "turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
]


def test_early_lines_and_lineless_notifications_reach_the_collector_as_they_were() -> None:
    notifications = [
        (wire if index % 2 else Notification)("session.event", params)  # lines and no lines, mixed
        for index, params in enumerate(PARAMS)
    ]
    extra = Notification("session.status", {"sessionId": "s", "status": "idle"}, b"")  # an empty line: kept as is
    direct = TurnCollector("s", "m-1")
    direct.feed_all([*notifications[:3], extra, *notifications[3:]])
    feed = _Feed("s", capacity=100)
    for notification in notifications[:3]:
        feed.push(notification)  # before the receipt is known
    feed.push(extra)
    feed.start("m-1")
    for notification in notifications[3:]:
        feed.push(notification)
    assert feed.collector().result(duration=0.0) == direct.result(duration=0.0)
    result = feed.collector().result(duration=0.0)
    assert result.final_response == "yo" and result.turns == (1,)
    assert [e["seq"] for e in result.events] == [1, 2, 3, 4, 5]

"""A run's feed before its prompt's receipt: early notifications are kept as their wire lines
(one bytes object each, not their decoded dicts) and decoded again when the message id is
known, so the turn collects exactly what it would have. Pure."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dsh_orchestra.protocol import SubscriberOverflowError
from dsh_orchestra.session._session import _Feed
from dsh_orchestra.transport import Notification

EVENTS = [{"type": "agent/inbox/spliced", "seq": 3, "time": 0, "data": {"inserted": [{"id": "m1"}]}},
          {"type": "turn/start", "seq": 4, "time": 0, "data": {"turn": 1}},
          {"type": "user/message", "seq": 5, "time": 0, "data": {"id": "m1", "source": {"kind": "user"}}},
          {"type": "turn/end", "seq": 6, "time": 0, "data": {"turn": 1, "reason": {"kind": "completed"}}}]


def wired(event: dict[str, Any]) -> Notification:
    """As the connection's reader makes it: ``raw`` is the frame's line."""
    params = {"sessionId": "s1", "event": event}
    line = orjson.dumps({"jsonrpc": "2.0", "method": "session.event", "params": params})
    return Notification("session.event", orjson.loads(line)["params"], line)


def test_early_notifications_are_kept_as_lines_and_collected_at_the_receipt() -> None:
    early = _Feed("s1", capacity=10)
    for event in EVENTS:
        early.push(wired(event))
    assert early._pending is not None and all(type(kept) is bytes for kept in early._pending)
    early.start("m1")
    late = _Feed("s1", capacity=10)  # the same events after the receipt: the same turn
    late.start("m1")
    for event in EVENTS:
        late.push(wired(event))
    assert early._pending is None
    result = early.collector().result(duration=0.0)
    assert result == late.collector().result(duration=0.0)
    assert list(result.events) == EVENTS and result.finish_reason == "completed"


def test_a_notification_without_a_line_is_kept_as_it_is() -> None:
    feed = _Feed("s1", capacity=10)
    made = Notification("session.event", {"sessionId": "s1", "event": EVENTS[0]})
    feed.push(made)
    assert feed._pending == [made]
    feed.start("m1")
    assert feed.collector().receipt_seen


def test_more_early_notifications_than_capacity_fail_the_run() -> None:
    feed = _Feed("s1", capacity=2)
    for event in EVENTS:
        feed.push(wired(event))
    feed.start("m1")
    with pytest.raises(SubscriberOverflowError):
        feed.collector()

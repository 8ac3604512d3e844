"""SessionRouter: session-tree scoping from subagent.started edges, fan-out, failure. Pure."""

from __future__ import annotations

import pytest
import trio

from dsh_orchestra.protocol import RuntimeExitedError, SubscriberOverflowError
from dsh_orchestra.session import SessionRouter
from dsh_orchestra.transport import Notification, Subscription


def event(session_id: str, seq: int = 0) -> Notification:
    return Notification("session.event", {"sessionId": session_id, "event": {"type": "x", "seq": seq, "data": {}}})


def started(parent: str, child: str) -> Notification:
    return Notification("subagent.started", {"parentSessionId": parent, "childSessionId": child})


def finished(parent: str, child: str) -> Notification:
    return Notification("subagent.finished", {"parentSessionId": parent, "childSessionId": child,
                                              "provider": "spawn", "agentId": child, "status": "ok",
                                              "stopReason": "completed"})


def drain(subscription: Subscription) -> list[Notification]:
    out = []
    while True:
        try:
            out.append(subscription.receive_nowait())
        except trio.WouldBlock:
            return out


def test_descendants_join_the_tree_in_wire_order() -> None:
    router = SessionRouter()
    root, other, child_sub = router.subscribe("root"), router.subscribe("other"), router.subscribe("child")
    stream = [event("root", 0), event("child", 3), started("root", "child"), event("child", 4),
              started("child", "grandchild"), event("grandchild", 3), event("other", 0),
              finished("child", "grandchild"), finished("root", "child"), event("root", 1)]
    for notification in stream:
        router.push(notification)
    # the child's event before its edge cannot be attributed (the runtime never sends one)
    assert drain(root) == [stream[0], stream[2], stream[3], stream[4], stream[5], stream[7], stream[8], stream[9]]
    assert drain(other) == [stream[6]]
    # a child's own subscription sees its events and the edges naming it
    assert drain(child_sub) == [stream[1], stream[2], stream[3], stream[4], stream[5], stream[7], stream[8]]
    assert router.parents == {"child": "root", "grandchild": "child"}
    assert router.root_of("grandchild") == "root" and router.root_of("unknown") == "unknown"


@pytest.mark.parametrize("edge", [started("a", "a"), started("", "b"), started("a", ""),
                                  Notification("subagent.started", {"parentSessionId": 1, "childSessionId": "b"})])
def test_unusable_edges_are_not_recorded(edge: Notification) -> None:
    router = SessionRouter()
    router.push(edge)
    assert router.parents == {}


def test_cycles_do_not_hang() -> None:
    """Nonsense edges from the peer (a -> b -> a) make a cycle; walking it stays bounded."""
    router = SessionRouter()
    a = router.subscribe("a")
    router.push(started("a", "b"))
    router.push(started("b", "a"))
    assert router.parents == {"b": "a", "a": "b"}
    router.push(event("b"))
    assert len(drain(a)) >= 3
    assert router.root_of("a") in ("a", "b")


def test_two_subscribers_of_one_root_both_get_everything_and_close_alone() -> None:
    router = SessionRouter()
    first, second = router.subscribe("s"), router.subscribe("s")
    router.push(event("s", 0))
    first.close()
    router.push(event("s", 1))
    assert [n.params["event"]["seq"] for n in drain(second)] == [0, 1]


def test_an_overflowing_subscriber_fails_alone() -> None:
    router = SessionRouter()
    slow, fast = router.subscribe("s", capacity=2), router.subscribe("s")
    for seq in range(5):
        router.push(event("s", seq))
    with pytest.raises(SubscriberOverflowError):
        slow.receive_nowait()
    assert len(drain(fast)) == 5


def test_failure_reaches_current_and_later_subscribers() -> None:
    router = SessionRouter()
    current = router.subscribe("s")
    router.push(event("s"))
    router.fail(RuntimeExitedError("dsh", -9, "tail"))
    assert current.receive_nowait().method == "session.event"  # buffered first
    with pytest.raises(RuntimeExitedError) as caught:
        current.receive_nowait()
    assert caught.value.returncode == -9
    with pytest.raises(RuntimeExitedError):
        router.subscribe("later").receive_nowait()

"""SessionRouter: session-tree scoping from subagent.started edges, fan-out, failure. Pure."""

from __future__ import annotations

from typing import Any

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


class Recorder:
    """A target that is not a Subscription (as a run's turn collector): it sees each push."""

    def __init__(self) -> None:
        self.seen: list[Notification] = []

    def push(self, notification: Notification) -> None:
        self.seen.append(notification)

    def fail(self, error: Exception) -> None:
        self.seen.append(Notification("failed", {}))


def routed(batches: list[list[Notification]], many: bool) -> tuple[dict[str, list[Any]], list[Notification], dict[str, str]]:
    router = SessionRouter()
    subscriptions = {name: router.subscribe(name, capacity=capacity) for name, capacity in
                     (("root", 1000), ("child", 1000), ("other", 1000), ("small", 3))}
    twin = router.subscribe("other", name="twin")
    recorder = Recorder()
    router.attach("mixed", recorder)
    mixed = router.subscribe("mixed")
    for batch in batches:
        if many:
            router.push_many(batch)
        else:
            for notification in batch:
                router.push(notification)
    got = {name: drained(subscription) for name, subscription in subscriptions.items()}
    got["twin"], got["mixed"] = drained(twin), drained(mixed)
    return got, recorder.seen, router.parents


def drained(subscription: Subscription) -> list[Any]:
    try:
        return drain(subscription)
    except SubscriberOverflowError:
        return ["overflowed"]


def test_push_many_delivers_exactly_what_push_one_by_one_does() -> None:
    """Runs of one session, edges inside a read, subagents' events going up, a subscription
    that overflows in a run, two subscriptions of one root, a target that is not a
    subscription, sessions nobody subscribed to and unusable session ids."""
    odd = [Notification("session.status", {"sessionId": 5}), Notification("session.status", {})]
    batches = [
        [event("root", 0), event("root", 1), event("other", 0), event("root", 2)],
        [event("child", 0), started("root", "child"), event("child", 1), event("child", 2), event("root", 3)],
        [event("small", index) for index in range(3)],
        [event("small", 3), event("other", 1), event("other", 2)],
        [event("mixed", 0), event("mixed", 1), *odd, event("nobody", 0), finished("root", "child"), event("child", 3)],
        [],
    ]
    assert routed(batches, many=True) == routed(batches, many=False)
    got, seen, parents = routed(batches, many=True)
    assert [n.params["event"]["seq"] for n in got["root"] if n.method == "session.event"] == [0, 1, 2, 1, 2, 3, 3]
    assert got["small"] == ["overflowed"] and got["other"] == got["twin"] == [batches[0][2], *batches[3][1:]]
    assert seen == got["mixed"] == batches[4][:2] and parents == {"child": "root"}


def test_push_many_with_an_overflowing_run_fails_that_subscription_alone() -> None:
    router = SessionRouter()
    small, big = router.subscribe("s", capacity=2), router.subscribe("s", capacity=10)
    router.push_many([event("s", 0), event("s", 1), event("s", 2)])
    with pytest.raises(SubscriberOverflowError):
        small.receive_nowait()
    assert [n.params["event"]["seq"] for n in drain(big)] == [0, 1, 2]
    router.push_many([event("s", 3)])
    assert [n.params["event"]["seq"] for n in drain(big)] == [3]

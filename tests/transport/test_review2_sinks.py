"""Adversarial cases for the connection's sinks and batch sinks (review of the session's
performance changes): what a sink added, removed or failing in the middle of a read gets."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from dsh_orchestra.protocol import SESSION_WAIT, encode_frame, notification_frame, result_frame
from dsh_orchestra.transport import Connection, Notification, Subscription

from transport_support import Peer, Wired, start_request


def chunk(*frames: dict[str, Any]) -> bytes:
    return b"".join(encode_frame(frame) for frame in frames)


async def test_a_subscriber_added_by_a_callback_gets_the_rest_of_the_read(wired: Wired) -> None:
    """No sink at the start of the read; the reply's callback subscribes: the notifications
    after the reply in the same read reach the new subscriber, as the next read's would."""
    added: list[Subscription] = []

    def callback(token: Any, reply: dict[str, Any] | None) -> None:
        added.append(wired.connection.subscribe("late"))

    with trio.fail_after(5):
        request_id = await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s1"}, callback)
        await wired.peer.receive()
        await wired.peer.send_raw(
            chunk(notification_frame("n", {"index": 0}), result_frame(request_id, {}),
                  notification_frame("n", {"index": 1}), notification_frame("n", {"index": 2}))
        )
        await wired.peer.notify("n", {"index": 3})
        [late] = [await _first(added)]
        got = [(await late.receive()).params["index"] for _ in range(3)]
    assert got == [1, 2, 3]


async def _first(added: list[Subscription]) -> Subscription:
    while not added:
        await trio.testing.wait_all_tasks_blocked()
    return added[0]


async def test_a_subscriber_added_by_a_batch_sink_mid_read_gets_the_rest(wired: Wired) -> None:
    """A batch sink called before a reply's callback (mid-read) subscribes: it gets what
    follows in that read."""
    added: list[Subscription] = []

    def batch_sink(notifications: list[Notification]) -> None:
        if not added:
            added.append(wired.connection.subscribe("from a batch sink"))

    wired.connection.add_sink(batch_sink)
    with trio.fail_after(5):
        request_id = await start_request(wired.connection, SESSION_WAIT, {}, lambda token, reply: None)
        await wired.peer.receive()
        await wired.peer.send_raw(
            chunk(notification_frame("n", {"index": 0}), result_frame(request_id, {}),
                  notification_frame("n", {"index": 1}))
        )
        late = await _first(added)
        assert (await late.receive()).params["index"] == 1


async def test_a_raising_batch_sink_before_a_callback_still_settles_the_request() -> None:
    """A batch sink that breaks its contract mid-read (before a reply's callback) crashes the
    reader; the request whose reply that was is still called back, once, with None (a turn of
    a group would otherwise never settle)."""
    calls: list[dict[str, Any] | None] = []

    def broken(notifications: list[Notification]) -> None:
        raise ValueError("broken batch sink")

    ours, theirs = trio.testing.memory_stream_pair()
    connection = Connection(ours, name="peer")
    peer = Peer(theirs)
    connection.add_sink(broken)
    with trio.fail_after(5):
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(connection.run)
                request_id = await start_request(connection, SESSION_WAIT, {}, lambda token, reply: calls.append(reply))
                await peer.receive()
                await peer.send_raw(chunk(notification_frame("n", {"index": 0}), result_frame(request_id, {})))
                await connection.wait_closed()
        except BaseExceptionGroup as group:
            assert group.subgroup(ValueError) is not None
        else:
            raise AssertionError("the broken sink's error was not raised")
    assert calls == [None] and connection.statistics().pending_requests == 0


async def test_a_batch_sink_closing_the_connection_before_a_callback_calls_it_back_once(wired: Wired) -> None:
    """A close from a batch sink run just before a reply's callback: the request is called
    back exactly once (with None: the close came first), and nothing after the close in that
    read reaches a sink."""
    calls: list[dict[str, Any] | None] = []
    batches: list[list[int]] = []

    def closing(notifications: list[Notification]) -> None:
        batches.append([n.params["index"] for n in notifications])
        wired.connection.close("closed by a batch sink")

    wired.connection.add_sink(closing)
    with trio.fail_after(5):
        request_id = await start_request(wired.connection, SESSION_WAIT, {}, lambda token, reply: calls.append(reply))
        await wired.peer.receive()
        await wired.peer.send_raw(
            chunk(notification_frame("n", {"index": 0}), result_frame(request_id, {}), notification_frame("n", {"index": 1}))
        )
        await wired.connection.wait_closed()
        await trio.testing.wait_all_tasks_blocked()
    assert calls == [None] and batches == [[0]]
    assert wired.connection.statistics().pending_requests == 0


async def test_a_request_in_a_read_of_notifications_is_handled_after_sinks_got_all_of_it(wired: Wired) -> None:
    """An incoming request (an approval, say) between notifications of one read: its handler
    runs once plain and batch sinks have every notification of that read, in wire order."""
    plain: list[int] = []
    batched: list[int] = []
    at_handler: list[tuple[list[int], list[int]]] = []

    async def handler(params: Any) -> Any:
        at_handler.append((list(plain), list(batched)))
        return {"ok": True}

    wired.connection.register("approval/request", handler)
    wired.connection.add_sink(lambda ns: plain.extend(n.params["index"] for n in ns))
    wired.connection.add_sink(lambda ns: batched.extend(n.params["index"] for n in ns))
    with trio.fail_after(5):
        await wired.peer.send_raw(
            chunk(notification_frame("n", {"index": 0}), {"jsonrpc": "2.0", "id": 7, "method": "approval/request", "params": {}},
                  notification_frame("n", {"index": 1}))
        )
        answer = await wired.peer.receive()
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}
    assert at_handler == [([0, 1], [0, 1])]

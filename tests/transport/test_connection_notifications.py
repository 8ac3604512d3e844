"""Notification fan-out: wire order, release order, overflow isolation, bounded memory.

Memory streams and trio's MockClock (``autojump_clock``): no real time passes, nothing sleeps.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from typing import Any

import pytest
import trio
import trio.testing
from transport_support import Peer, Wired

from dsh_orchestra.protocol import (
    SESSION_EVENT,
    SESSION_STATUS,
    SESSION_WAIT,
    SubscriberOverflowError,
    TransportClosedError,
    WaitParams,
    encode_frame,
    notification_frame,
    result_frame,
)
from dsh_orchestra.transport import Connection, Notification


def status(index: int, session: str = "s1") -> dict[str, Any]:
    return notification_frame(SESSION_STATUS, {"sessionId": session, "status": "running", "index": index})


async def test_notifications_reach_subscribers_in_wire_order(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    first = wired.connection.subscribe("first")
    second = wired.connection.subscribe("second")
    data = b"".join(encode_frame(status(index)) for index in range(2000))
    rng = random.Random(7)
    position = 0
    while position < len(data):  # arbitrary chunking, frames split across chunks
        step = rng.randint(1, 5000)
        await wired.peer.send_raw(data[position : position + step])
        position += step
    for subscription in (first, second):
        received = [(await subscription.receive()).params["index"] for _ in range(2000)]
        assert received == list(range(2000))
    assert wired.connection.statistics().notifications == 2000


async def test_a_notification_is_what_the_wire_said(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    subscription = wired.connection.subscribe()
    params = {"sessionId": "s1", "event": {"type": "turn/start", "seq": 4, "time": 1, "data": {"turn": 1}}}
    await wired.peer.notify(SESSION_EVENT, params)
    await wired.peer.send({"jsonrpc": "2.0", "method": "odd", "params": [1, 2]})
    await wired.peer.send({"method": "no-params"})
    assert await subscription.receive() == Notification(SESSION_EVENT, params)
    assert await subscription.receive() == Notification("odd", {})  # non-object params read as {}
    assert await subscription.receive() == Notification("no-params", {})


async def test_a_response_is_released_only_after_the_notifications_before_it(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    """When request() returns, everything the peer sent before the response is buffered."""
    subscription = wired.connection.subscribe()
    sunk: list[Notification] = []
    wired.connection.add_sink(sunk.extend)

    async def runtime(split: bool) -> None:
        request = await wired.peer.receive()
        frames = [status(index) for index in range(300)] + [result_frame(request["id"], {})]
        if split:  # one frame per chunk, with scheduling in between
            for frame in frames:
                await wired.peer.send(frame)
                await trio.lowlevel.checkpoint()
        else:
            await wired.peer.send(*frames)

    for split in (False, True):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime, split)
            await wired.connection.request(SESSION_WAIT, WaitParams(session_id="s1"))
            assert subscription.pending() == 300  # no await since the response came in
            assert len(sunk) == 300
        for index in range(300):
            assert subscription.receive_nowait().params["index"] == index
        sunk.clear()


async def test_a_stalled_subscriber_overflows_alone(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    """It fails with SubscriberOverflowError; other subscribers and a handler carry on."""
    stalled = wired.connection.subscribe("stalled", capacity=10)
    reader = wired.connection.subscribe("reader")
    handled: list[Any] = []

    async def handler(params: Any) -> dict[str, Any]:
        handled.append(params)
        return {"outcome": "rejected"}

    wired.connection.register("approval/request", handler)
    await wired.peer.send(*[status(index) for index in range(100)])
    await wired.peer.send({"jsonrpc": "2.0", "id": "req_1", "method": "approval/request", "params": {"x": 1}})
    assert await wired.peer.receive() == {"jsonrpc": "2.0", "id": "req_1", "result": {"outcome": "rejected"}}
    assert handled == [{"x": 1}]
    assert [(await reader.receive()).params["index"] for _ in range(100)] == list(range(100))
    with pytest.raises(SubscriberOverflowError, match=r"'stalled'.*10 notifications") as info:
        await stalled.receive()
    assert info.value.name == "stalled" and info.value.capacity == 10
    assert stalled.pending() == 0  # its buffer was dropped
    assert wired.connection.statistics().subscribers == 1  # and it was detached
    with pytest.raises(SubscriberOverflowError):
        stalled.receive_nowait()
    await wired.peer.send(status(100))
    assert (await reader.receive()).params["index"] == 100


async def test_an_overflowing_sink_does_not_make_the_next_one_miss_a_notification(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    """A subscription detaching itself mid-dispatch must not skip its neighbour."""
    tiny = wired.connection.subscribe("tiny", capacity=1)
    after = wired.connection.subscribe("after")
    await wired.peer.send(status(0), status(1), status(2))
    assert [(await after.receive()).params["index"] for _ in range(3)] == [0, 1, 2]
    with pytest.raises(SubscriberOverflowError):
        await tiny.receive()


async def test_memory_stays_bounded_with_a_subscriber_that_never_reads(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    stalled = wired.connection.subscribe("stalled", capacity=100)
    live = wired.connection.subscribe("live", capacity=500)
    payload = {"sessionId": "s1", "event": {"type": "x", "seq": 0, "time": 0, "data": {"text": "y" * 1000}}}
    chunk = encode_frame(notification_frame(SESSION_EVENT, payload)) * 200
    gc.collect()
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        received = 0
        for sent in range(200, 10_001, 200):  # 10,000 notifications of about 1 kB
            await wired.peer.send_raw(chunk)
            while received < sent:
                received += len(await live.receive_batch())
                assert live.pending() <= 500 and stalled.pending() <= 100
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    assert wired.connection.statistics().notifications == 10_000
    assert grown < 2_000_000, f"memory grew by {grown} bytes"  # 10 MB if anything was kept
    with pytest.raises(SubscriberOverflowError):
        stalled.receive_nowait()


async def test_a_filter_selects_what_a_subscription_buffers(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    mine = wired.connection.subscribe("mine", filter=lambda n: n.params.get("sessionId") == "s2", capacity=5)
    await wired.peer.send(*[status(index, "s1") for index in range(50)], status(50, "s2"))
    assert (await mine.receive()).params["index"] == 50
    assert mine.pending() == 0


async def test_closing_a_subscription_detaches_it(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    subscription = wired.connection.subscribe()
    assert wired.connection.statistics().subscribers == 1
    await subscription.aclose()
    assert wired.connection.statistics().subscribers == 0
    with pytest.raises(trio.ClosedResourceError):
        await subscription.receive()


async def test_buffered_notifications_are_delivered_before_the_end_of_stream(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    subscription = wired.connection.subscribe()
    await wired.peer.send(status(0), status(1))
    await wired.peer.stream.send_stream.aclose()
    await wired.connection.wait_closed()
    assert (await subscription.receive()).params["index"] == 0
    assert (await subscription.receive()).params["index"] == 1
    with pytest.raises(TransportClosedError, match="closed its stream"):
        await subscription.receive()
    late = wired.connection.subscribe("late")
    with pytest.raises(TransportClosedError):
        await late.receive()


async def test_sinks_see_every_notification_in_order_until_removed(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[int] = []

    def sink(notifications: list[Notification]) -> None:
        seen.extend(notification.params["index"] for notification in notifications)

    wired.connection.add_sink(sink)
    probe = wired.connection.subscribe()
    await wired.peer.send(status(0), status(1))
    await probe.receive_batch()
    wired.connection.remove_sink(sink)
    wired.connection.remove_sink(sink)  # removing twice is harmless
    await wired.peer.send(status(2))
    await probe.receive()
    assert seen == [0, 1]


async def test_frames_that_break_the_rules_are_counted_not_fatal(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    subscription = wired.connection.subscribe()
    await wired.peer.send_raw(b'not json\n[1,2]\n\n{"id":null,"result":{}}\n{"result":1}\n\xff\xfe\n')
    await wired.peer.send(status(0))
    assert (await subscription.receive()).params["index"] == 0
    stats = wired.connection.statistics()
    assert stats.ignored_lines == 5  # blank lines are not counted
    assert stats.frames_received == 3  # the three objects; two of them are not usable frames
    assert not wired.connection.closed


async def test_an_oversized_frame_closes_the_connection_with_a_clear_error(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    connection = Connection(ours, max_frame_size=1000)
    await nursery.start(connection.run)
    subscription = connection.subscribe()
    peer = Peer(theirs)

    async def runtime() -> None:
        await peer.receive()
        await peer.send(notification_frame("big", {"pad": "x" * 2000}))

    nursery.start_soon(runtime)
    with pytest.raises(TransportClosedError, match="maximum frame size of 1000 bytes"):
        await connection.request(SESSION_WAIT, WaitParams(session_id="s1"))
    with pytest.raises(TransportClosedError, match="maximum frame size"):
        await subscription.receive()


async def test_a_notification_read_from_the_wire_is_a_plain_notification(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    """The reader builds it without the frozen __init__ (docs/benchmarks.md, W1): what comes
    out is exactly what ``Notification(...)`` makes, in every way a user can tell."""
    import pickle
    import weakref

    import attrs
    import cattrs

    subscription = wired.connection.subscribe()
    params = {"sessionId": "s1", "event": {"type": "turn/start", "seq": 4}}
    await wired.peer.notify(SESSION_EVENT, params)
    read = await subscription.receive()
    made = Notification(SESSION_EVENT, params, read.raw)
    assert type(read) is Notification and read == made and repr(read) == repr(made)
    assert read.raw == encode_frame(notification_frame(SESSION_EVENT, params)).rstrip(b"\n")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        read.method = "other"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        del read.params  # type: ignore[misc]
    with pytest.raises(TypeError):  # dict params: unhashable, as a made one
        hash(read)
    assert attrs.asdict(read) == attrs.asdict(made)
    assert cattrs.unstructure(read) == cattrs.unstructure(made)
    assert attrs.evolve(read, method="x") == Notification("x", params)
    restored = pickle.loads(pickle.dumps(read))
    assert type(restored) is Notification and restored == read and restored.raw == read.raw
    assert weakref.ref(read)() is read
    assert attrs.fields(type(read)) == attrs.fields(Notification)


async def test_batch_sinks_get_each_read_once_in_wire_order(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    batches: list[list[int]] = []
    seen: list[int] = []

    def batch_sink(notifications: list[Notification]) -> None:
        batches.append([notification.params["index"] for notification in notifications])

    wired.connection.add_sink(batch_sink)
    wired.connection.add_sink(lambda notifications: seen.extend(n.params["index"] for n in notifications))
    assert wired.connection.statistics().subscribers == 2
    probe = wired.connection.subscribe()
    await wired.peer.send_raw(b"".join(encode_frame(status(index)) for index in range(3)))
    await wired.peer.send_raw(encode_frame(status(3)) + encode_frame(result_frame(99, {})) + encode_frame(status(4)))
    for _ in range(5):
        await probe.receive()
    assert [index for batch in batches for index in batch] == seen == [0, 1, 2, 3, 4]
    assert all(batches) and len(batches) <= 2
    wired.connection.remove_sink(batch_sink)
    wired.connection.remove_sink(batch_sink)  # removing twice is harmless
    await wired.peer.send(status(5))
    await probe.receive()
    assert len([index for batch in batches for index in batch]) == 5 and seen[-1] == 5


async def test_a_close_from_a_sink_still_delivers_what_was_read_before_it(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    """A sink fed before the one that closes the connection mid-read keeps that read's
    notifications, then gets its owner's fail(); nothing after the close."""

    class Owner:
        def __init__(self) -> None:
            self.got: list[Any] = []

        def push_many(self, notifications: list[Notification]) -> None:
            self.got.extend(notification.params["index"] for notification in notifications)

        def fail(self, error: BaseException) -> None:
            self.got.append(type(error).__name__)

    owner = Owner()
    wired.connection.add_sink(owner.push_many)

    def closer(notifications: list[Notification]) -> None:
        if any(notification.params["index"] == 1 for notification in notifications):
            wired.connection.close("closed by a sink")

    wired.connection.add_sink(closer)
    await wired.peer.send_raw(b"".join(encode_frame(status(index)) for index in range(4)))
    await wired.connection.wait_closed()
    assert owner.got == [0, 1, 2, 3, "TransportClosedError"]

"""Adversarial cases of a subscriber reading the pipe itself (``Connection.pump``).

Real OS pipes, so no MockClock; every test is bounded by ``trio.fail_after`` and sleeps never.
"""

from __future__ import annotations

import fcntl
import os
from typing import Any

import pytest
import trio
import trio.testing
from test_pipes import LIMIT
from test_pump import note, wired

from dsh_orchestra.protocol import SESSION_WAIT, TransportClosedError, WaitParams, encode_frame, notification_frame, result_frame
from dsh_orchestra.transport import Connection, Notification

F_SETPIPE_SZ = 1031  # Linux: grow a pipe's buffer


def mine(notification: Notification) -> bool:
    return notification.method == "mine"


def picky(notification: Notification) -> bool:
    """A filter with a bug: it raises on the notification ``bad``."""
    if notification.method == "bad":
        raise ValueError("a filter's bug")
    return True


async def start_lending(connection: Connection, peer: Any) -> None:
    """Make the reader task wait in a way a subscriber can take over (pump's first call)."""
    with connection.subscribe(filter=mine) as first:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer.send, notification_frame("mine", {}))
            await first.receive()
    await trio.testing.wait_all_tasks_blocked()  # the reader task waits for the pipe again


def preload(stream: Any, data: bytes) -> None:
    """Write ``data`` into the pipe now, whole (the pipe is grown to hold it)."""
    fd = stream.fileno()
    size = fcntl.fcntl(fd, F_SETPIPE_SZ, 1 << 20)
    assert len(data) <= size
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


async def test_a_subscriber_reading_a_full_pipe_lets_other_tasks_run() -> None:
    """A pump that keeps finding full reads (a busy session next to an idle one) must still
    be a schedule point per chunk, as the reader task is: a request's reply read in its
    first chunk reaches the requester then, not after the whole backlog."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            seen_at_reply: list[int] = []

            async def requester() -> None:
                await connection.request(SESSION_WAIT, WaitParams(session_id="s"))
                seen_at_reply.append(connection.statistics().notifications)

            got: list[Notification] = []
            with connection.subscribe(filter=mine) as subscription:

                async def consumer() -> None:
                    got.append(await subscription.receive())  # reads the whole backlog in its task

                nursery.start_soon(consumer)
                await waiting(subscription)  # the subscriber reads the pipe: the request parks
                nursery.start_soon(requester)
                request = await peer.receive()
                await trio.testing.wait_all_tasks_blocked()
                others = b"".join(encode_frame(notification_frame("other", {"pad": "x" * 200, "i": i})) for i in range(3500))
                preload(theirs.send_stream, encode_frame(result_frame(request["id"], {})) + others + encode_frame(notification_frame("mine", {})))
                with trio.fail_after(LIMIT):
                    while not got:
                        await trio.testing.wait_all_tasks_blocked()
            assert got[0].method == "mine"
            assert connection.statistics().lent_reads > 10
            with trio.fail_after(LIMIT):
                while not seen_at_reply:
                    await trio.testing.wait_all_tasks_blocked()
            assert seen_at_reply[0] < 1000, seen_at_reply  # a few chunks' worth at most, not 3,500


async def test_a_receive_reading_a_full_pipe_can_be_cancelled() -> None:
    """Cancelling a subscriber (its deadline, another task) lands while it reads a backlog."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            others = b"".join(encode_frame(notification_frame("other", {"pad": "x" * 200, "i": i})) for i in range(3500))
            preload(theirs.send_stream, others + encode_frame(notification_frame("mine", {})))
            with connection.subscribe(filter=mine) as subscription:
                with trio.CancelScope() as scope:

                    async def cancel() -> None:
                        scope.cancel()

                    nursery.start_soon(cancel)
                    await subscription.receive()
                assert scope.cancelled_caught
                assert connection.statistics().notifications < 1000
                assert (await subscription.receive()).method == "mine"  # nothing lost after


async def waiting(subscription: Any) -> None:
    """Return once every task is blocked and ``subscription`` waits in the pipe."""
    await trio.testing.wait_all_tasks_blocked()
    assert subscription.pipe_wait


async def test_a_receive_cancelled_after_reading_half_a_frame_loses_and_repeats_nothing() -> None:
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            watcher = connection.subscribe()
            subscription = connection.subscribe()
            line = encode_frame(note(1))
            with trio.CancelScope() as scope:

                async def half_then_cancel() -> None:
                    await waiting(subscription)
                    await peer.send_raw(line[:10])
                    await trio.testing.wait_all_tasks_blocked()  # read by the subscriber: half a frame
                    assert connection.statistics().lent_reads == 1 and subscription.pipe_wait
                    scope.cancel()

                nursery.start_soon(half_then_cancel)
                await subscription.receive()
            assert scope.cancelled_caught
            await peer.send_raw(line[10:] + encode_frame(note(2)))  # read by the reader task
            assert (await watcher.receive()).params == {"index": 1}
            assert (await watcher.receive()).params == {"index": 2}
            assert [subscription.receive_nowait().params["index"] for _ in range(2)] == [1, 2]
            assert watcher.pending() == subscription.pending() == 0
            assert connection.statistics().frames_received == 3  # start_lending's, 1 and 2


async def test_two_sessions_subscribers_both_waiting_get_their_own_in_order() -> None:
    from dsh_orchestra.session import SessionRouter

    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            router = SessionRouter(source=lambda: connection)
            connection.add_sink(router.push_many)
            await start_lending(connection, peer)
            subscriptions = {"a": router.subscribe("a"), "b": router.subscribe("b")}
            got: dict[str, list[int]] = {"a": [], "b": []}

            async def consume(session: str) -> None:
                for _ in range(100):
                    got[session].append((await subscriptions[session].receive()).params["i"])

            async with trio.open_nursery() as consumers:
                consumers.start_soon(consume, "a")
                consumers.start_soon(consume, "b")
                for i in range(200):
                    if i % 3 == 0:
                        await trio.testing.wait_all_tasks_blocked()
                    session = "ab"[i % 2]
                    await peer.send(notification_frame("session.event", {"sessionId": session, "i": i}))
            assert got == {"a": list(range(0, 200, 2)), "b": list(range(1, 200, 2))}
            assert connection.statistics().lent_reads > 10


async def test_after_a_subscriber_stops_receiving_the_reader_task_reads_again() -> None:
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            subscription = connection.subscribe()
            nursery.start_soon(peer.send, note(1))
            assert (await subscription.receive()).params == {"index": 1}
            assert connection.statistics().lent_reads >= 1
            nursery.start_soon(peer.answer, {"n": 2})
            assert await connection.request(SESSION_WAIT, WaitParams(session_id="s")) == {"n": 2}
            lent = connection.statistics().lent_reads  # the request may have read its own reply
            await peer.send(note(3))
            await trio.testing.wait_all_tasks_blocked()
            assert subscription.pending() == 1
            assert connection.statistics().lent_reads == lent  # the reader task read those


async def test_a_peer_request_read_by_a_subscriber_is_answered_even_if_its_handler_needs_later_frames() -> None:
    """The handler waits for a notification sent after its request, which only the pumping
    subscriber's task can read: it is read, the handler answers, the subscriber continues."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            later = trio.Event()

            async def ask(params: Any) -> Any:
                await later.wait()
                return {"answer": params["q"]}

            connection.register("ask", ask)
            await start_lending(connection, peer)
            subscription = connection.subscribe()

            async def runtime() -> None:
                await waiting(subscription)
                await peer.send({"jsonrpc": "2.0", "id": 7, "method": "ask", "params": {"q": 1}})
                await waiting(subscription)  # the handler waits; the subscriber is back in the pipe
                await peer.send(note(1))

            nursery.start_soon(runtime)
            assert (await subscription.receive()).params == {"index": 1}
            later.set()
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 7, "result": {"answer": 1}}
            assert connection.statistics().lent_reads == 2  # both read by the subscriber


@pytest.mark.parametrize("ending", ["end of file", "oversized frame"])
async def test_the_pipe_ending_mid_pump_fails_every_waiter(ending: str) -> None:
    with trio.fail_after(LIMIT):
        async with wired(max_frame_size=200) as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            pumping, parked = connection.subscribe(), connection.subscribe()
            errors: list[BaseException] = []

            async def expect_closed(receive: Any, *args: Any) -> None:
                try:
                    await receive(*args)
                except TransportClosedError as exc:
                    errors.append(exc)

            async with trio.open_nursery() as waiters:
                waiters.start_soon(expect_closed, pumping.receive)
                await waiting(pumping)
                waiters.start_soon(expect_closed, parked.receive)  # the pipe is taken: it parks
                waiters.start_soon(expect_closed, connection.request, SESSION_WAIT, WaitParams(session_id="s"))
                await trio.testing.wait_all_tasks_blocked()
                assert pumping.pipe_wait and not parked.pipe_wait
                await peer.receive()
                await peer.send_raw(encode_frame(note(1))[:20])  # half a frame, then the end
                await trio.testing.wait_all_tasks_blocked()
                if ending == "end of file":
                    await theirs.send_stream.aclose()
                else:
                    await peer.send_raw(b"x" * 500)
            assert len(errors) == 3
            if ending == "oversized frame":
                assert all("over the limit" in str(error) for error in errors)
            await connection.wait_closed()


async def test_overflow_while_a_subscriber_pumps_fails_only_the_one_that_fell_behind() -> None:
    from dsh_orchestra.protocol import SubscriberOverflowError

    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            pumping = connection.subscribe(capacity=3)
            idle = connection.subscribe(capacity=2)
            nursery.start_soon(peer.send, note(1))
            assert (await pumping.receive()).params == {"index": 1}
            nursery.start_soon(peer.send, note(2), note(3))
            assert (await pumping.receive()).params == {"index": 2}  # idle overflows meanwhile
            assert (await pumping.receive()).params == {"index": 3}
            with pytest.raises(SubscriberOverflowError):
                await idle.receive()
            # the pumping one overflows in its own read: it fails alone, the pipe goes on
            async def flood() -> None:
                await waiting(pumping)
                await peer.send(*(note(i) for i in range(4, 10)))

            nursery.start_soon(flood)
            with pytest.raises(SubscriberOverflowError):
                await pumping.receive()
            other = connection.subscribe()
            nursery.start_soon(peer.answer, {"n": 1})
            assert await connection.request(SESSION_WAIT, WaitParams(session_id="s")) == {"n": 1}
            assert connection.statistics().subscribers == 1
            nursery.start_soon(peer.send, note(10))
            assert (await other.receive()).params == {"index": 10}


async def test_a_sink_raising_while_a_subscriber_reads_fails_the_connection_not_a_request() -> None:
    """A filter that raises (a user's bug) in a chunk the subscriber's task reads: the frames
    after it in that chunk are undeliverable, so the connection fails as the reader task's
    would (waiters get TransportClosedError) instead of reading on with a reply lost."""

    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            connection.subscribe(filter=picky)
            subscription = connection.subscribe()
            outcome: list[BaseException] = []

            async def requester() -> None:
                try:
                    await connection.request(SESSION_WAIT, WaitParams(session_id="s"))
                except TransportClosedError as exc:
                    outcome.append(exc)

            async def consumer() -> None:
                with pytest.raises(ValueError, match="a filter's bug"):
                    await subscription.receive()
                outcome.append(ValueError("raised in the consumer"))

            nursery.start_soon(consumer)
            await waiting(subscription)  # the consumer reads the pipe: the request parks
            nursery.start_soon(requester)
            request = await peer.receive()
            await trio.testing.wait_all_tasks_blocked()
            await peer.send(notification_frame("bad", {}), result_frame(request["id"], {}))
            await connection.wait_closed()
            with trio.fail_after(LIMIT):
                while len(outcome) < 2:
                    await trio.testing.wait_all_tasks_blocked()
            (closed,) = [error for error in outcome if isinstance(error, TransportClosedError)]
            assert isinstance(closed.__cause__, ValueError)


async def test_a_sink_raising_while_a_request_reads_fails_the_request_as_closed() -> None:
    """The same bug hit by a request reading its own reply: the request gets
    TransportClosedError caused by the sink's error, not the error itself."""

    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            await start_lending(connection, peer)
            connection.subscribe(filter=picky)

            async def runtime() -> None:
                request = await peer.receive()
                await trio.testing.wait_all_tasks_blocked()  # the request reads the pipe
                await peer.send(notification_frame("bad", {}), result_frame(request["id"], {}))

            nursery.start_soon(runtime)
            with pytest.raises(TransportClosedError, match="got no reply") as caught:
                await connection.request(SESSION_WAIT, WaitParams(session_id="s"))
            assert isinstance(caught.value.__cause__, ValueError)
            assert connection.closed

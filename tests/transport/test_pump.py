"""A subscriber's ``receive()`` reading the pipe itself (``Connection.pump``), over real OS pipes.

Real I/O, so no MockClock; every test is bounded by ``trio.fail_after`` and sleeps never.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from test_pipes import LIMIT, pipes
from transport_support import Peer

from dsh_orchestra.protocol import (
    SESSION_WAIT,
    FrameTooLargeError,
    TransportClosedError,
    WaitParams,
    notification_frame,
    result_frame,
)
from dsh_orchestra.transport import Connection, Notification


def note(index: int) -> dict[str, object]:
    return notification_frame("n", {"index": index})


@asynccontextmanager
async def wired(**options: Any) -> AsyncIterator[tuple[Connection, Peer, trio.Nursery, Any]]:
    """(connection, peer, nursery, theirs): a running Connection over OS pipes; closed after."""
    async with pipes() as (ours, theirs), trio.open_nursery() as nursery:
        connection = Connection(ours, **options)
        await nursery.start(connection.run)
        yield connection, Peer(theirs), nursery, theirs
        connection.close()


async def test_a_waiting_subscriber_reads_the_pipe_itself_in_wire_order() -> None:
    with trio.fail_after(LIMIT):
        async with wired(max_frame_size=1024) as (connection, peer, nursery, theirs):
            with connection.subscribe() as subscription:

                async def runtime() -> None:
                    for index in range(300):
                        await trio.testing.wait_all_tasks_blocked()  # the subscriber waits
                        await peer.send(note(index))

                nursery.start_soon(runtime)
                received = [(await subscription.receive()).params["index"] for _ in range(300)]
            assert received == list(range(300))
            stats = connection.statistics()
            assert stats.lent_reads >= 290  # nearly every wait read the pipe itself
            assert stats.notifications == stats.frames_received == 300


async def test_requests_are_answered_while_a_subscriber_reads() -> None:
    """Responses read by a subscriber's task wake their requests; the raw line comes along."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            subscription = connection.subscribe()
            got: list[Notification] = []

            async def consume() -> None:
                for _ in range(100):
                    got.append(await subscription.receive())

            async def runtime() -> None:
                for _ in range(100):
                    request = await peer.receive()
                    await peer.send(note(request["id"]), result_frame(request["id"], {"n": 1}))

            nursery.start_soon(consume)
            nursery.start_soon(runtime)
            for _ in range(100):
                assert await connection.request(SESSION_WAIT, WaitParams(session_id="s")) == {"n": 1}
            with trio.fail_after(LIMIT):
                while len(got) < 100:
                    await trio.testing.wait_all_tasks_blocked()
            assert [n.params["index"] for n in got] == list(range(1, 101))
            assert got[0].raw == b'{"jsonrpc":"2.0","method":"n","params":{"index":1}}'


async def test_a_cancelled_receive_hands_the_pipe_back_to_the_reader() -> None:
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            subscription = connection.subscribe()
            with trio.move_on_after(0) as scope:  # cancelled at its first wait: in the pipe
                await subscription.receive()
            assert scope.cancelled_caught
            with trio.CancelScope() as scope:

                async def cancel_when_waiting() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()

                nursery.start_soon(cancel_when_waiting)
                await subscription.receive()
            assert scope.cancelled_caught

            async def runtime() -> None:
                request = await peer.receive()
                await peer.send(note(1), result_frame(request["id"], {}))

            nursery.start_soon(runtime)
            assert await connection.request(SESSION_WAIT, WaitParams(session_id="s")) == {}  # the reader read it
            assert subscription.receive_nowait().params == {"index": 1}


async def test_closing_or_pushing_wakes_a_receive_waiting_in_the_pipe() -> None:
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            subscription = connection.subscribe()
            pushed = Notification("pushed", {})

            async def push_when_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                subscription.push(pushed)

            nursery.start_soon(push_when_waiting)
            assert await subscription.receive() == pushed

            async def close_when_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                subscription.close()

            nursery.start_soon(close_when_waiting)
            with pytest.raises(trio.ClosedResourceError):
                await subscription.receive()
            # the pipe still works for everyone else
            other = connection.subscribe()
            await peer.send(note(5))
            assert (await other.receive()).params == {"index": 5}


async def test_the_connection_closing_fails_a_receive_waiting_in_the_pipe() -> None:
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            subscription = connection.subscribe()

            async def close_when_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                connection.close()

            nursery.start_soon(close_when_waiting)
            with pytest.raises(TransportClosedError):
                await subscription.receive()


async def test_end_of_stream_read_by_a_subscriber_is_reported_by_the_reader() -> None:
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            subscription = connection.subscribe()

            async def runtime() -> None:
                await trio.testing.wait_all_tasks_blocked()
                await peer.send(note(1), note(2))
                await theirs.send_stream.aclose()

            nursery.start_soon(runtime)
            assert (await subscription.receive()).params == {"index": 1}
            assert (await subscription.receive()).params == {"index": 2}
            with pytest.raises(TransportClosedError, match="closed its stream"):
                await subscription.receive()
            await connection.wait_closed()


async def test_an_oversized_frame_read_by_a_subscriber_fails_the_connection() -> None:
    with trio.fail_after(LIMIT):
        async with wired(max_frame_size=100) as (connection, peer, nursery, theirs):
            subscription = connection.subscribe()

            async def runtime() -> None:
                await trio.testing.wait_all_tasks_blocked()
                await peer.send(note(1))
                await trio.testing.wait_all_tasks_blocked()
                await peer.send_raw(b"x" * 500)

            nursery.start_soon(runtime)
            assert (await subscription.receive()).params == {"index": 1}
            with pytest.raises(TransportClosedError, match="over the limit") as caught:
                await subscription.receive()
            assert isinstance(caught.value.__cause__, FrameTooLargeError)
            with pytest.raises(TransportClosedError):
                await connection.request(SESSION_WAIT, WaitParams(session_id="s"))


async def test_two_consumers_each_get_everything_in_order() -> None:
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            subscriptions = [connection.subscribe(), connection.subscribe()]
            got: list[list[int]] = [[], []]

            async def consume(index: int) -> None:
                for _ in range(200):
                    got[index].append((await subscriptions[index].receive()).params["index"])

            async with trio.open_nursery() as consumers:
                consumers.start_soon(consume, 0)
                consumers.start_soon(consume, 1)
                for index in range(200):
                    if index % 7 == 0:
                        await trio.testing.wait_all_tasks_blocked()
                    await peer.send(note(index))
            assert got == [list(range(200)), list(range(200))]


async def test_a_socket_read_and_written_through_one_descriptor_is_not_lent() -> None:
    """Interrupting a wait wakes every waiter of the descriptor, a writer's too: no lending."""
    left, right = socket.socketpair()
    left.setblocking(False)
    ours = trio.lowlevel.FdStream(os.dup(left.fileno()))
    theirs = trio.SocketStream(trio.socket.from_stdlib_socket(right))
    left.close()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            connection = Connection(ours)
            await nursery.start(connection.run)
            subscription = connection.subscribe()
            nursery.start_soon(Peer(theirs).notify, "n", {"index": 1})
            assert (await subscription.receive()).params == {"index": 1}
            assert connection.statistics().lent_reads == 0
            connection.close()
    await ours.aclose()
    await theirs.aclose()

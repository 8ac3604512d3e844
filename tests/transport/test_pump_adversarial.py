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

            nursery.start_soon(requester)
            request = await peer.receive()
            await trio.testing.wait_all_tasks_blocked()  # the requester and the reader wait
            others = b"".join(encode_frame(notification_frame("other", {"pad": "x" * 200, "i": i})) for i in range(3500))
            preload(theirs.send_stream, encode_frame(result_frame(request["id"], {})) + others + encode_frame(notification_frame("mine", {})))
            with connection.subscribe(filter=mine) as subscription:
                got = await subscription.receive()  # reads the whole backlog in this task
            assert got.method == "mine"
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

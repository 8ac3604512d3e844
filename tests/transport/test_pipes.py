"""The file-descriptor fast path (``_pipes``): a Connection over real OS pipes, in process.

Real I/O, so no MockClock; every test is bounded by ``trio.fail_after`` and sleeps never.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from transport_support import Peer

from dsh_orchestra.protocol import SESSION_WAIT, TransportClosedError, WaitParams, notification_frame, result_frame
from dsh_orchestra.transport import Connection
from dsh_orchestra.transport._pipes import FdReceiver, FdSender, StreamReceiver, StreamSender, byte_io

LIMIT = 10  # seconds; the tests take milliseconds


@asynccontextmanager
async def pipes() -> AsyncIterator[tuple[trio.StapledStream[Any, Any], trio.StapledStream[Any, Any]]]:
    """(ours, theirs): two OS pipes wrapped as trio FdStreams, like a process's stdin/stdout."""
    to_us_read, to_us_write = os.pipe()
    to_them_read, to_them_write = os.pipe()
    fd = trio.lowlevel.FdStream
    ours = trio.StapledStream(fd(to_them_write), fd(to_us_read))
    theirs = trio.StapledStream(fd(to_us_write), fd(to_them_read))
    try:
        yield ours, theirs
    finally:
        for stream in (ours.send_stream, ours.receive_stream, theirs.send_stream, theirs.receive_stream):
            await stream.aclose()


async def test_byte_io_picks_the_fast_path_only_for_fd_streams() -> None:
    read_fd, write_fd = os.pipe()
    write_end, read_end = trio.lowlevel.FdStream(write_fd), trio.lowlevel.FdStream(read_fd)
    try:
        receiver, sender = byte_io(trio.StapledStream(write_end, read_end))
        assert isinstance(receiver, FdReceiver) and isinstance(sender, FdSender)
        memory, _ = trio.testing.memory_stream_pair()
        receiver, sender = byte_io(memory)
        assert isinstance(receiver, StreamReceiver) and isinstance(sender, StreamSender)
    finally:
        write_end.close()
        read_end.close()


async def test_requests_and_notifications_over_pipes() -> None:
    with trio.fail_after(LIMIT):
        async with pipes() as (ours, theirs), trio.open_nursery() as nursery:
            connection = Connection(ours)
            await nursery.start(connection.run)
            subscription = connection.subscribe()
            peer = Peer(theirs)

            async def runtime() -> None:
                for _ in range(200):
                    request = await peer.receive()
                    await peer.send(notification_frame("n", {"id": request["id"]}), result_frame(request["id"], {"n": 1}))

            nursery.start_soon(runtime)
            for _ in range(200):
                assert await connection.request(SESSION_WAIT, WaitParams(session_id="s")) == {"n": 1}
                assert subscription.pending() == 1  # the notification before the response
                subscription.receive_nowait()
            connection.close()


async def test_frames_larger_than_the_pipe_in_both_directions() -> None:
    """4 MiB each way: partial writes wait for room, reads reassemble."""
    big = "é" * (2 * 1024 * 1024)
    with trio.fail_after(LIMIT):
        async with pipes() as (ours, theirs), trio.open_nursery() as nursery:
            connection = Connection(ours)
            await nursery.start(connection.run)
            peer = Peer(theirs)

            async def runtime() -> None:
                request = await peer.receive()
                assert request["params"]["pad"] == big
                await peer.send(result_frame(request["id"], {"pad": big}))

            nursery.start_soon(runtime)
            assert await connection.request("echo", {"pad": big}) == {"pad": big}
            connection.close()


async def test_end_of_stream_over_pipes_fails_pending_requests() -> None:
    with trio.fail_after(LIMIT):
        async with pipes() as (ours, theirs), trio.open_nursery() as nursery:
            connection = Connection(ours)
            await nursery.start(connection.run)

            async def runtime() -> None:
                await Peer(theirs).receive()
                await theirs.send_stream.aclose()

            nursery.start_soon(runtime)
            with pytest.raises(TransportClosedError, match="closed its stream"):
                await connection.request(SESSION_WAIT, WaitParams(session_id="s"))


async def test_a_peer_that_stopped_reading_breaks_the_write() -> None:
    with trio.fail_after(LIMIT):
        async with pipes() as (ours, theirs), trio.open_nursery() as nursery:
            connection = Connection(ours)
            await nursery.start(connection.run)
            await theirs.receive_stream.aclose()  # the runtime closed its stdin
            with pytest.raises(TransportClosedError, match="cannot write"):
                await connection.request(SESSION_WAIT, WaitParams(session_id="s"))
            connection.close()


async def test_closing_our_read_end_stops_the_reader() -> None:
    with trio.fail_after(LIMIT):
        async with pipes() as (ours, theirs), trio.open_nursery() as nursery:
            connection = Connection(ours)
            await nursery.start(connection.run)

            async def runtime() -> None:
                await Peer(theirs).receive()
                await ours.receive_stream.aclose()

            nursery.start_soon(runtime)
            with pytest.raises(TransportClosedError, match="stream broke"):
                await connection.request(SESSION_WAIT, WaitParams(session_id="s"))


async def test_a_write_cancelled_half_way_fails_the_connection() -> None:
    """A torn frame would corrupt the next one: the connection gives up instead."""
    with trio.fail_after(LIMIT):
        async with pipes() as (ours, theirs), trio.open_nursery() as nursery:
            connection = Connection(ours)
            await nursery.start(connection.run)
            with trio.CancelScope() as scope:

                async def cancel_when_stuck() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()

                nursery.start_soon(cancel_when_stuck)
                await connection.request("big", {"pad": "x" * (1024 * 1024)})  # the peer never reads
            assert scope.cancelled_caught
            assert connection.closed
            assert connection.closed_error is not None
            assert "partial frame" in str(connection.closed_error)
            with pytest.raises(TransportClosedError, match="partial frame"):
                await connection.request(SESSION_WAIT, WaitParams(session_id="s"))

"""A request reading its own reply from the pipe (``Connection.pump`` via ``request``), over
real OS pipes. No MockClock (real I/O); every test is bounded by ``trio.fail_after``."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from test_pipes import LIMIT
from test_pump import note, wired

from dsh_orchestra.protocol import SESSION_WAIT, TransportClosedError, WaitParams, result_frame


def wait_params() -> WaitParams:
    return WaitParams(session_id="s")


async def test_sequential_requests_read_their_own_replies() -> None:
    """After the first request (which switches the reader to lending), each request's task
    reads its reply itself; notifications in between reach subscribers in wire order."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            subscription = connection.subscribe()

            async def runtime() -> None:
                for index in range(50):
                    request = await peer.receive()
                    await trio.testing.wait_all_tasks_blocked()  # the request waits for its reply
                    await peer.send(note(index), result_frame(request["id"], {"n": index}))

            nursery.start_soon(runtime)
            answers = [await connection.request(SESSION_WAIT, wait_params()) for _ in range(50)]
            assert answers == [{"n": index} for index in range(50)]
            assert connection.statistics().lent_reads >= 48  # all but the first one or two
            assert [subscription.receive_nowait().params["index"] for _ in range(50)] == list(range(50))


async def test_concurrent_requests_are_answered_whoever_reads() -> None:
    """One request reads the pipe, the others park; replies in any order wake each its own."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            nursery.start_soon(peer.answer, {"warm": True})
            await connection.request(SESSION_WAIT, wait_params())  # the reader now lends
            results: dict[int, object] = {}

            async def ask(index: int) -> None:
                results[index] = await connection.request(SESSION_WAIT, WaitParams(session_id=f"s{index}"))

            for index in range(5):
                nursery.start_soon(ask, index)
            requests = [await peer.receive() for _ in range(5)]
            await trio.testing.wait_all_tasks_blocked()
            for request in reversed(requests):  # last asked, first answered
                await peer.send(result_frame(request["id"], {"sid": request["params"]["sessionId"]}))
            with trio.fail_after(LIMIT):
                while len(results) < 5:
                    await trio.testing.wait_all_tasks_blocked()
            assert results == {index: {"sid": f"s{index}"} for index in range(5)}


async def test_a_request_cancelled_while_reading_hands_the_pipe_back() -> None:
    """Cancelled mid-wait: nothing read is lost; the reader task (or the next request) reads on."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            nursery.start_soon(peer.answer, {"warm": True})
            await connection.request(SESSION_WAIT, wait_params())
            subscription = connection.subscribe()
            with trio.CancelScope() as scope:

                async def cancel_when_waiting() -> None:
                    await peer.receive()
                    await trio.testing.wait_all_tasks_blocked()  # the request waits in the pipe
                    scope.cancel()

                nursery.start_soon(cancel_when_waiting)
                await connection.request(SESSION_WAIT, wait_params())
            assert scope.cancelled_caught
            await peer.send(note(1))  # read by the reader task now
            assert (await subscription.receive()).params == {"index": 1}
            nursery.start_soon(peer.answer, {"after": True})
            assert await connection.request(SESSION_WAIT, wait_params()) == {"after": True}


async def test_closing_the_connection_fails_a_request_reading_the_pipe() -> None:
    """close() while the request waits for the pipe in its own task: TransportClosedError at once."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            nursery.start_soon(peer.answer, {"warm": True})
            await connection.request(SESSION_WAIT, wait_params())

            async def close_when_waiting() -> None:
                await peer.receive()
                await trio.testing.wait_all_tasks_blocked()  # the request waits in the pipe
                connection.close("closed by the test")

            nursery.start_soon(close_when_waiting)
            with pytest.raises(TransportClosedError, match="got no reply: closed by the test"):
                await connection.request(SESSION_WAIT, wait_params())


async def test_end_of_stream_fails_a_request_reading_the_pipe() -> None:
    """The peer closes its end while the request reads: the request fails, nothing hangs."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            nursery.start_soon(peer.answer, {"warm": True})
            await connection.request(SESSION_WAIT, wait_params())

            async def hang_up() -> None:
                await peer.receive()
                await trio.testing.wait_all_tasks_blocked()
                await theirs.send_stream.aclose()

            nursery.start_soon(hang_up)
            with pytest.raises(TransportClosedError, match="got no reply"):
                await connection.request(SESSION_WAIT, wait_params())
            await connection.wait_closed()


class _ReaderSteps(trio.abc.Instrument):
    """Counts the steps of the connection's reader task (``Connection.run``)."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Connection.run"):
            self.steps += 1


async def test_the_reader_task_stays_parked_while_a_request_reads_chunk_after_chunk() -> None:
    """A request reading 20 chunks before its reply does not wake the reader task after each
    (it would only park again); the reader reads on once the request has its reply, and once
    a later request reading chunk after chunk is cancelled."""
    with trio.fail_after(LIMIT):
        async with wired() as (connection, peer, nursery, theirs):
            seen: list[int] = []
            connection.add_sink(lambda notifications: seen.extend(n.params["index"] for n in notifications))
            nursery.start_soon(peer.answer, {"warm": True})
            await connection.request(SESSION_WAIT, wait_params())  # the reader now lends

            async def runtime(count: int, reply: bool) -> None:
                request = await peer.receive()
                for index in range(count):
                    await trio.testing.wait_all_tasks_blocked()  # one chunk per read
                    await peer.send(note(index))
                await trio.testing.wait_all_tasks_blocked()
                if reply:
                    await peer.send(result_frame(request["id"], {"done": True}))

            steps = _ReaderSteps()
            trio.lowlevel.add_instrument(steps)
            try:
                nursery.start_soon(runtime, 20, True)
                lent = connection.statistics().lent_reads
                assert await connection.request(SESSION_WAIT, wait_params()) == {"done": True}
                assert connection.statistics().lent_reads - lent == 21  # every chunk read by the request
                assert steps.steps <= 2, steps.steps  # was one step per chunk
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert seen == list(range(20))

            await peer.send(note(20))  # nobody asks: the reader task reads it
            await trio.testing.wait_all_tasks_blocked()
            assert seen[-1] == 20

            with trio.CancelScope() as scope:
                nursery.start_soon(runtime, 5, False)

                async def cancel_after_the_chunks() -> None:
                    while len(seen) < 26:
                        await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()

                nursery.start_soon(cancel_after_the_chunks)
                await connection.request(SESSION_WAIT, wait_params())
            assert scope.cancelled_caught
            assert seen == list(range(21)) + list(range(5))
            await peer.send(note(99))  # the reader task was woken by the cancelled request
            await trio.testing.wait_all_tasks_blocked()
            assert seen[-1] == 99

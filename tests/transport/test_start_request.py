"""Requests answered through a target (``Connection.send_request``), no task waiting.

The target (here mostly a callback, ``transport_support.start_request``) is woken exactly
once, in the reader, with the reply or with None when the connection closed first; never
after ``forget``; possibly before ``send_request`` returns.
``result_of`` turns a reply into what ``request`` returns or raises. Memory streams.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import pytest
import trio
import trio.testing
from transport_support import Peer, Wired, start_request

from dsh_orchestra.protocol import (
    SESSION_PROMPT,
    SESSION_WAIT,
    EmptyResult,
    JsonRpcResponseError,
    PromptParams,
    PromptResult,
    SdkProtocolError,
    TextBlock,
    TransportClosedError,
    error_frame,
    result_frame,
)
from dsh_orchestra.transport import Connection


class Calls:
    """A callback that records (token, reply) and wakes the test."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any] | None]] = []
        self.event = trio.Event()

    def __call__(self, token: Any, reply: dict[str, Any] | None) -> None:
        self.calls.append((token, reply))
        self.event.set()


PARAMS = PromptParams(session_id="s1", content_blocks=[TextBlock(text="hi")])


async def test_the_reply_goes_to_the_callback_with_its_token(wired: Wired) -> None:
    calls = Calls()
    with trio.fail_after(5):
        request_id = await start_request(wired.connection, SESSION_PROMPT, PARAMS, calls, "turn-1")
        request = await wired.peer.receive()
        assert request["id"] == request_id and request["method"] == SESSION_PROMPT
        assert request["params"] == {"sessionId": "s1", "contentBlocks": [{"type": "text", "text": "hi"}]}
        assert wired.connection.statistics().pending_requests == 1 and calls.calls == []
        await wired.peer.send(result_frame(request_id, {"messageId": "m-1"}))
        await calls.event.wait()
    [(token, reply)] = calls.calls
    assert token == "turn-1" and reply is not None
    assert wired.connection.result_of(SESSION_PROMPT, reply, PromptResult) == PromptResult(message_id="m-1")
    assert wired.connection.result_of(SESSION_PROMPT, reply) == {"messageId": "m-1"}
    assert wired.connection.statistics().pending_requests == 0
    assert wired.connection.forget(request_id) is False  # answered already


async def test_result_of_raises_what_request_raises(wired: Wired) -> None:
    calls = Calls()
    with trio.fail_after(5):
        first = await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s1"}, calls, 1)
        second = await start_request(wired.connection, SESSION_PROMPT, PARAMS, calls, 2)
        await wired.peer.receive()
        await wired.peer.receive()
        # answered in reverse order, in one chunk: each by its id
        await wired.peer.send(result_frame(second, {"unexpected": 1}),
                              error_frame(first, -32603, "unknown SDK session: s1"))
        while len(calls.calls) < 2:
            await trio.testing.wait_all_tasks_blocked()
    replies = dict(calls.calls)
    with pytest.raises(JsonRpcResponseError, match="unknown SDK session"):
        wired.connection.result_of(SESSION_WAIT, replies[1], EmptyResult)
    with pytest.raises(SdkProtocolError):
        wired.connection.result_of(SESSION_PROMPT, replies[2], PromptResult)


async def test_a_closing_connection_calls_back_once_with_none(wired: Wired) -> None:
    calls = Calls()
    with trio.fail_after(5):
        await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s1"}, calls, "a")
        await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s2"}, calls, "b")
        await wired.peer.stream.aclose()  # the runtime hangs up
        await wired.connection.wait_closed()
        await trio.testing.wait_all_tasks_blocked()
    assert sorted(token for token, _ in calls.calls) == ["a", "b"]
    assert all(reply is None for _, reply in calls.calls)
    assert wired.connection.statistics().pending_requests == 0
    with pytest.raises(TransportClosedError, match="'session/wait' got no reply"):
        wired.connection.result_of(SESSION_WAIT, None)
    with pytest.raises(TransportClosedError):  # closed: refused, never called back
        await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s3"}, calls, "c")
    assert len(calls.calls) == 2


async def test_a_forgotten_request_is_never_called_back(wired: Wired) -> None:
    calls = Calls()
    with trio.fail_after(5):
        forgotten = await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s1"}, calls, "gone")
        kept = await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s2"}, calls, "kept")
        assert wired.connection.forget(forgotten) is True and wired.connection.forget(forgotten) is False
        await wired.peer.receive()
        await wired.peer.receive()
        await wired.peer.send(result_frame(forgotten, {}), result_frame(kept, {}))  # a late reply: ignored
        await calls.event.wait()
        await trio.testing.wait_all_tasks_blocked()
        wired.connection.close()
    assert [token for token, _ in calls.calls] == ["kept"]
    assert wired.connection.statistics().pending_requests == 0


async def test_cancelled_before_sending_sends_nothing(wired: Wired) -> None:
    calls = Calls()
    with trio.CancelScope() as scope:
        scope.cancel()
        await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s1"}, calls, "x")
    assert scope.cancelled_caught
    assert wired.connection.statistics().pending_requests == 0 and wired.connection.statistics().frames_sent == 0
    # the connection works on: a plain request alongside a callback one
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(start_request, wired.connection, SESSION_WAIT, {"sessionId": "s2"}, calls, "y")
            waiting = await wired.peer.receive()
            await wired.peer.send(result_frame(waiting["id"], {}))
            await calls.event.wait()
            nursery.start_soon(wired.peer.answer)
            assert await wired.connection.request(SESSION_WAIT, {"sessionId": "s3"}) == {}
    assert [token for token, _ in calls.calls] == ["y"]


async def closed_while_writing(nursery: trio.Nursery, send: Callable[[Connection], Awaitable[object]],
                               check: Callable[[], None] = lambda: None) -> list[object]:
    """``send`` on a connection whose peer stopped reading, closed while the frame is half-way
    out (``check`` runs then); returns what ``send`` returned or raised, once the write ended."""
    ours, theirs = trio.testing.lockstep_stream_pair()
    connection = Connection(ours, name="stuck peer")
    await nursery.start(connection.run)
    outcome: list[object] = []

    async def run() -> None:
        try:
            outcome.append(await send(connection))
        except TransportClosedError as exc:
            outcome.append(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as inner:
            inner.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()  # blocked writing: nobody reads
            assert connection.statistics().pending_requests == 1
            connection.close()
            assert connection.statistics().pending_requests == 0
            check()
            await Peer(theirs).receive()  # the peer reads: the write ends
    return outcome


class Target:
    """A ``send_request`` target: records each reply it is woken with."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any] | None] = []
        self.event = trio.Event()

    def wake(self, reply: dict[str, Any] | None = None) -> None:
        self.replies.append(reply)
        self.event.set()


async def test_send_request_wakes_its_target_once_with_the_reply(wired: Wired) -> None:
    answered, forgotten, closed = Target(), Target(), Target()
    with trio.fail_after(5):
        first = await wired.connection.send_request(SESSION_PROMPT, PARAMS, answered)
        second = await wired.connection.send_request(SESSION_WAIT, {"sessionId": "s1"}, forgotten)
        await wired.connection.send_request(SESSION_WAIT, {"sessionId": "s2"}, closed)
        request = await wired.peer.receive()
        assert request["id"] == first and request["method"] == SESSION_PROMPT
        assert wired.connection.statistics().pending_requests == 3
        assert wired.connection.forget(second) is True and wired.connection.forget(second) is False
        await wired.peer.send(result_frame(second, {}), result_frame(first, {"messageId": "m-1"}),
                              result_frame(first, {"messageId": "again"}))  # late and duplicate: ignored
        await answered.event.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert forgotten.replies == [] and closed.replies == []
        [reply] = answered.replies
        assert wired.connection.result_of(SESSION_PROMPT, reply, PromptResult) == PromptResult(message_id="m-1")
        assert wired.connection.forget(first) is False  # answered already
        await wired.peer.stream.aclose()  # the runtime hangs up: the one still open gets None
        await wired.connection.wait_closed()
    assert closed.replies == [None] and answered.replies == [reply] and forgotten.replies == []
    assert wired.connection.statistics().pending_requests == 0
    with pytest.raises(TransportClosedError):  # closed: refused, never woken
        await wired.connection.send_request(SESSION_WAIT, {"sessionId": "s3"}, forgotten)
    assert forgotten.replies == []


async def test_send_request_closed_while_writing_wakes_with_none(nursery: trio.Nursery) -> None:
    """Unlike ``start_request``'s callback, the target learns of the close at once."""
    target = Target()

    def woken_at_once() -> None:
        assert target.replies == [None]

    outcome = await closed_while_writing(
        nursery, lambda connection: connection.send_request(SESSION_WAIT, {"sessionId": "s1"}, target), woken_at_once)
    assert len(outcome) == 1 and target.replies == [None]  # woken once; the write itself ended


async def test_send_request_cancelled_before_sending_sends_nothing(wired: Wired) -> None:
    target = Target()
    with trio.CancelScope() as scope:
        scope.cancel()
        await wired.connection.send_request(SESSION_WAIT, {"sessionId": "s1"}, target)
    assert scope.cancelled_caught and target.replies == []
    assert wired.connection.statistics().pending_requests == 0 and wired.connection.statistics().frames_sent == 0
async def test_a_batch_sink_has_what_came_before_the_reply_when_the_callback_runs(wired: Wired) -> None:
    """Notifications and the reply in one read: the callback (which may hand the turn to a
    router's collector) runs after batch sinks got the notifications before the reply, and
    before they get those after it, as with one-at-a-time sinks."""
    from dsh_orchestra.protocol import encode_frame, notification_frame

    got: list[int] = []
    wired.connection.add_sink(lambda notifications: got.extend(n.params["index"] for n in notifications))
    seen_at_reply: list[list[int]] = []

    def callback(token: Any, reply: dict[str, Any] | None) -> None:
        seen_at_reply.append(list(got))

    with trio.fail_after(5):
        request_id = await start_request(wired.connection, SESSION_WAIT, {"sessionId": "s1"}, callback)
        await wired.peer.receive()
        await wired.peer.send_raw(
            b"".join(encode_frame(notification_frame("n", {"index": index})) for index in range(3))
            + encode_frame(result_frame(request_id, {}))
            + encode_frame(notification_frame("n", {"index": 3}))
        )
        while len(got) < 4:
            await trio.testing.wait_all_tasks_blocked()
    assert seen_at_reply == [[0, 1, 2]] and got == [0, 1, 2, 3]
    assert wired.connection.statistics().notifications == 4

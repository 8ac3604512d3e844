"""Outgoing requests: matching by id, errors kept verbatim, timeouts, close and end of stream.

Memory streams and trio's MockClock (``autojump_clock``): no real time passes, nothing sleeps.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from transport_support import Peer, Wired

from dsh_orchestra.protocol import (
    SESSION_PROMPT,
    SESSION_QUERY,
    SESSION_WAIT,
    SHUTDOWN,
    EmptyResult,
    JsonRpcResponseError,
    MethodNotSupportedError,
    PromptParams,
    PromptResult,
    RuntimeExitedError,
    SdkProtocolError,
    TextBlock,
    TransportClosedError,
    WaitParams,
    error_frame,
    result_frame,
)
from dsh_orchestra.transport import Connection


async def test_a_request_gets_its_typed_result(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    async def runtime() -> None:
        request = await wired.peer.receive()
        assert request == {
            "jsonrpc": "2.0", "id": request["id"], "method": SESSION_PROMPT,
            "params": {"sessionId": "s1", "contentBlocks": [{"type": "text", "text": "hi"}]},
        }
        await wired.peer.send(result_frame(request["id"], {"messageId": "m-1", "extra": True}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime)
        result = await wired.connection.request(
            SESSION_PROMPT, PromptParams(session_id="s1", content_blocks=[TextBlock(text="hi")]), PromptResult
        )
    assert result == PromptResult(message_id="m-1")


async def test_params_none_is_omitted_and_raw_results_pass_through(wired: Wired) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wired.peer.answer, {"anything": [1, 2]})
        assert await wired.connection.request(SHUTDOWN) == {"anything": [1, 2]}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wired.peer.send, result_frame(2, None))
        assert await wired.connection.request(SHUTDOWN, None, EmptyResult) == EmptyResult()


async def test_out_of_order_replies_to_concurrent_requests(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    """Responses are matched by id, whatever order they come back in."""
    results: dict[str, Any] = {}

    async def call(name: str) -> None:
        results[name] = await wired.connection.request("echo", {"name": name})

    async with trio.open_nursery() as nursery:
        for name in "abcde":
            nursery.start_soon(call, name)
        requests = [await wired.peer.receive() for _ in range(5)]
        assert len({request["id"] for request in requests}) == 5
        order = [requests[i] for i in (3, 0, 4, 2, 1)]
        await wired.peer.send(*[result_frame(r["id"], {"echo": r["params"]["name"]}) for r in order[:2]])
        for request in order[2:]:
            await trio.sleep(1)
            await wired.peer.send(result_frame(request["id"], {"echo": request["params"]["name"]}))
    assert results == {name: {"echo": name} for name in "abcde"}


async def test_error_code_message_and_data_are_kept(wired: Wired) -> None:
    data = {"detail": [1, {"x": None}]}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _reply_error(wired.peer, -32000, "custom failure", data))
        with pytest.raises(JsonRpcResponseError) as info:
            await wired.connection.request(SESSION_WAIT, WaitParams(session_id="s1"))
    error = info.value
    assert type(error) is JsonRpcResponseError
    assert (error.method, error.code, error.message, error.data) == (SESSION_WAIT, -32000, "custom failure", data)
    assert "custom failure" in str(error) and "-32000" in str(error)


async def _reply_error(peer: Peer, code: Any, message: Any, data: Any = None) -> None:
    request = await peer.receive()
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    await peer.send({"jsonrpc": "2.0", "id": request["id"], "error": error})


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        ("x", "m", (None, "m")),
        (True, "m", (None, "m")),
        (-32603, None, (-32603, "JSON-RPC error")),
    ],
)
async def test_odd_error_objects(wired: Wired, code: Any, message: Any, expected: tuple[Any, str]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_reply_error, wired.peer, code, message)
        with pytest.raises(JsonRpcResponseError) as info:
            await wired.connection.request(SESSION_WAIT, {"sessionId": "s1"})
    assert (info.value.code, info.value.message) == expected


@pytest.mark.parametrize(
    ("code", "message"),
    [(-32603, "unknown DeepSeek Harness SDK runtime method: session/query"), (-32601, "method not found: session/query")],
)
async def test_unknown_method_answers_raise_method_not_supported(wired: Wired, code: int, message: str) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_reply_error, wired.peer, code, message)
        with pytest.raises(MethodNotSupportedError) as info:
            await wired.connection.request(SESSION_QUERY, {"sessionId": "s1", "contentBlocks": []})
    assert (info.value.code, info.value.message) == (code, message)
    assert isinstance(info.value, JsonRpcResponseError)


async def test_a_result_that_does_not_fit_raises_a_protocol_error(wired: Wired) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wired.peer.answer, {"messageId": 5})
        with pytest.raises(SdkProtocolError, match=r"'session/prompt'.*result\.messageId") as info:
            await wired.connection.request(SESSION_PROMPT, {"sessionId": "s", "contentBlocks": []}, PromptResult)
    assert info.value.method == SESSION_PROMPT


async def _pending(connection: Connection, count: int, errors: list[BaseException]) -> None:
    async def call(index: int) -> None:
        try:
            await connection.request(SESSION_WAIT, WaitParams(session_id=f"s{index}"))
        except TransportClosedError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(call, index)


async def test_close_fails_each_pending_request_with_its_own_error(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pending, wired.connection, 3, errors)
        for _ in range(3):
            await wired.peer.receive()
        wired.connection.close("shutting down for the test")
    assert len(errors) == 3
    assert len({id(error) for error in errors}) == 3  # each waiter gets its own exception
    for error in errors:
        assert "got no reply" in str(error) and "shutting down for the test" in str(error)
    assert wired.connection.statistics().pending_requests == 0


async def test_end_of_stream_fails_each_pending_request_with_its_own_error(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pending, wired.connection, 4, errors)
        for _ in range(4):
            await wired.peer.receive()
        await trio.sleep(5)
        await wired.peer.stream.send_stream.aclose()  # the runtime closes its stdout
    assert len(errors) == 4 and len({id(error) for error in errors}) == 4
    assert all("closed its stream" in str(error) for error in errors)
    assert wired.connection.closed


async def test_the_lost_hook_names_the_reason_every_waiter_gets(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    reasons: list[str] = []

    async def lost(reason: str) -> TransportClosedError:
        reasons.append(reason)
        return RuntimeExitedError("dsh", 3, "boom on stderr")

    connection = Connection(ours, name="runtime", lost_hook=lost)
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(connection.run)
        nursery.start_soon(_pending, connection, 2, errors)
        peer = Peer(theirs)
        await peer.receive()
        await peer.receive()
        await theirs.send_stream.aclose()
    assert reasons == ["closed its stream"]
    assert len(errors) == 2 and errors[0] is not errors[1]
    for error in errors:
        assert isinstance(error, TransportClosedError)
        assert error.returncode == 3 and error.stderr_tail == "boom on stderr"
        assert "exited" in str(error)


async def test_close_detaches_without_closing_the_stream(nursery: trio.Nursery) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    connection = Connection(ours)
    await nursery.start(connection.run)
    await connection.aclose()
    await connection.aclose()  # idempotent
    peer = Peer(theirs)
    await ours.send_all(b'{"still":"open"}\n')  # our end still writes...
    assert await peer.receive() == {"still": "open"}
    await peer.send({"jsonrpc": "2.0", "method": "x"})  # ...and still reads
    assert await ours.receive_some(100) == b'{"jsonrpc":"2.0","method":"x"}\n'


async def test_requests_after_close_raise_at_once(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    wired.connection.close()
    start = trio.current_time()
    with pytest.raises(TransportClosedError):
        await wired.connection.request(SESSION_WAIT, WaitParams(session_id="s1"))
    with pytest.raises(TransportClosedError):
        await wired.connection.notify("anything")
    assert trio.current_time() == start
    assert wired.connection.closed and wired.connection.closed_error is not None


async def test_requests_after_end_of_stream_raise_at_once(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    await wired.peer.stream.send_stream.aclose()
    await wired.connection.wait_closed()
    with pytest.raises(TransportClosedError, match="closed its stream"):
        await wired.connection.request(SESSION_WAIT, WaitParams(session_id="s1"))


async def test_timeouts_leave_no_pending_entry(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    """1,000 requests to a method that never answers, each abandoned by move_on_after."""
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wired.peer.drain, seen)
        for _ in range(1000):
            with trio.move_on_after(30) as scope:
                await wired.connection.request(SESSION_WAIT, WaitParams(session_id="hung"))
            assert scope.cancelled_caught
            assert wired.connection.statistics().pending_requests == 0
        await trio.sleep(1)
        assert len(seen) == 1000
        nursery.cancel_scope.cancel()
    assert wired.connection.statistics().pending_requests == 0
    assert not wired.connection.closed


async def test_a_late_response_after_cancellation_is_ignored(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    with trio.move_on_after(10):
        await wired.connection.request(SESSION_WAIT, WaitParams(session_id="s1"))
    late = await wired.peer.receive()
    await wired.peer.send(result_frame(late["id"], {"late": True}), error_frame(late["id"], -1, "also late"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wired.peer.answer, {"fresh": True})
        assert await wired.connection.request(SESSION_WAIT, {"sessionId": "s2"}) == {"fresh": True}
    stats = wired.connection.statistics()
    assert stats.pending_requests == 0 and not wired.connection.closed


async def test_a_cancelled_caller_sends_nothing(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await wired.connection.request(SESSION_WAIT, WaitParams(session_id="s1"))
    assert wired.connection.statistics().frames_sent == 0
    assert wired.connection.statistics().pending_requests == 0


async def test_ids_are_distinct_integers_and_responses_with_other_id_types_do_not_match(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    async def runtime() -> None:
        request = await wired.peer.receive()
        assert type(request["id"]) is int
        await wired.peer.send(result_frame(str(request["id"]), {"wrong": "type"}))  # "1" is not 1
        await trio.sleep(1)
        await wired.peer.send(result_frame(request["id"], {"right": "id"}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime)
        assert await wired.connection.request("m") == {"right": "id"}


async def test_concurrent_writers_never_interleave(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    big = "x" * 200_000
    async with trio.open_nursery() as nursery:
        for index in range(20):
            nursery.start_soon(wired.connection.notify, "n", {"index": index, "pad": big})
        for _ in range(20):
            frame = await wired.peer.receive()
            assert frame["params"]["pad"] == big
    assert wired.connection.statistics().frames_sent == 20


async def test_run_twice_is_misuse(wired: Wired) -> None:
    with pytest.raises(RuntimeError, match="already started"):
        await wired.connection.run()

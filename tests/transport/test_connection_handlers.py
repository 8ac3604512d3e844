"""Incoming (server-to-client) requests: answers, error codes, handler tasks, ids.

Memory streams and trio's MockClock (``autojump_clock``): no real time passes, nothing sleeps.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from transport_support import Wired

from dsh_orchestra.protocol import (
    APPROVAL_REQUEST,
    SESSION_STATUS,
    SESSION_WAIT,
    ApprovalRequestParams,
    ApprovalRequestResult,
    WaitParams,
    notification_frame,
    result_frame,
)
from dsh_orchestra.transport import NoReply, RpcError


def approval(request_id: Any, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": APPROVAL_REQUEST,
            "params": {"sessionId": "s1", "toolName": "bash"} if params is None else params}


@pytest.mark.parametrize("request_id", ["req_0123456789abcdef0123456789abcdef", 7, 0, ""])
async def test_an_unknown_method_is_answered_32601_with_the_same_id(
    wired: Wired, autojump_clock: trio.testing.MockClock, request_id: Any
) -> None:
    await wired.peer.send({"jsonrpc": "2.0", "id": request_id, "method": "user-question/ask", "params": {}})
    reply = await wired.peer.receive()
    assert reply == {"jsonrpc": "2.0", "id": request_id,
                     "error": {"code": -32601, "message": "method not found: user-question/ask"}}
    assert type(reply["id"]) is type(request_id)


async def test_a_typed_handler_gets_structured_params_and_its_result_is_unstructured(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[ApprovalRequestParams] = []

    async def decide(params: ApprovalRequestParams) -> ApprovalRequestResult:
        seen.append(params)
        return ApprovalRequestResult(outcome="allowed-once")

    wired.connection.register(APPROVAL_REQUEST, decide, ApprovalRequestParams)
    await wired.peer.send(approval("req_1", {"sessionId": "s1", "toolName": "bash", "callId": "c1", "future": 1}))
    assert await wired.peer.receive() == {"jsonrpc": "2.0", "id": "req_1", "result": {"outcome": "allowed-once"}}
    assert seen == [ApprovalRequestParams(session_id="s1", tool_name="bash", call_id="c1")]


async def test_invalid_params_are_answered_32602_and_the_handler_is_not_called(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    calls: list[Any] = []

    async def decide(params: Any) -> Any:
        calls.append(params)

    wired.connection.register(APPROVAL_REQUEST, decide, ApprovalRequestParams)
    await wired.peer.send(approval(3, {"sessionId": 5, "toolName": "bash"}))
    reply = await wired.peer.receive()
    assert reply["id"] == 3 and reply["error"]["code"] == -32602
    assert "'approval/request'" in reply["error"]["message"] and "params.sessionId" in reply["error"]["message"]
    await wired.peer.send(approval(4, [1, 2]))  # array params read as {}: required fields missing
    reply = await wired.peer.receive()
    assert reply["id"] == 4 and reply["error"]["code"] == -32602
    assert calls == []


async def test_a_failing_handler_is_answered_32603_with_its_message(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    async def explode(params: Any) -> Any:
        raise ValueError("the policy file is unreadable")

    async def explode_quietly(params: Any) -> Any:
        raise KeyError()

    wired.connection.register(APPROVAL_REQUEST, explode)
    wired.connection.register("other", explode_quietly)
    await wired.peer.send(approval("a"))
    assert await wired.peer.receive() == {
        "jsonrpc": "2.0", "id": "a", "error": {"code": -32603, "message": "the policy file is unreadable"}
    }
    await wired.peer.send({"jsonrpc": "2.0", "id": "b", "method": "other"})
    assert (await wired.peer.receive())["error"] == {"code": -32603, "message": "KeyError"}
    assert not wired.connection.closed


async def test_rpc_error_answers_exactly_that_error(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    async def refuse(params: Any) -> Any:
        raise RpcError(-32001, "denied by policy", {"rule": "no-bash"})

    wired.connection.register(APPROVAL_REQUEST, refuse)
    await wired.peer.send(approval("a"))
    assert (await wired.peer.receive())["error"] == {"code": -32001, "message": "denied by policy",
                                                     "data": {"rule": "no-bash"}}


async def test_no_reply_sends_nothing(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    async def stay_silent(params: Any) -> Any:
        raise NoReply()

    wired.connection.register(APPROVAL_REQUEST, stay_silent)
    await wired.peer.send(approval("silent"), {"jsonrpc": "2.0", "id": "next", "method": "unknown"})
    assert (await wired.peer.receive())["id"] == "next"


async def test_a_handler_returning_none_answers_an_empty_object(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    async def nothing(params: Any) -> None:
        return None

    wired.connection.register(APPROVAL_REQUEST, nothing)
    await wired.peer.send(approval(1))
    assert await wired.peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_a_slow_handler_does_not_block_the_reader(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    """Each handler runs in its own task: notifications and responses keep flowing."""
    release = trio.Event()

    async def slow(params: Any) -> dict[str, str]:
        await release.wait()
        return {"outcome": "rejected"}

    wired.connection.register(APPROVAL_REQUEST, slow)
    subscription = wired.connection.subscribe()

    async def runtime() -> None:
        await wired.peer.send(approval("slow"), notification_frame(SESSION_STATUS, {"sessionId": "s1", "status": "idle"}))
        request = await wired.peer.receive()
        await wired.peer.send(result_frame(request["id"], {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime)
        await wired.connection.request(SESSION_WAIT, WaitParams(session_id="s1"))
        assert (await subscription.receive()).method == SESSION_STATUS
        assert wired.connection.statistics().handlers_running == 1
        release.set()
    assert await wired.peer.receive() == {"jsonrpc": "2.0", "id": "slow", "result": {"outcome": "rejected"}}
    assert wired.connection.statistics().handlers_running == 0


async def test_many_handlers_run_at_once(wired: Wired, autojump_clock: trio.testing.MockClock) -> None:
    async def sleepy(params: Any) -> dict[str, Any]:
        await trio.sleep(10)
        return params

    wired.connection.register("sleepy", sleepy)
    start = trio.current_time()
    await wired.peer.send(*[{"jsonrpc": "2.0", "id": i, "method": "sleepy", "params": {"i": i}} for i in range(50)])
    replies = [await wired.peer.receive() for _ in range(50)]
    assert trio.current_time() - start == pytest.approx(10)  # concurrently, not 50 x 10 s
    assert sorted(reply["id"] for reply in replies) == list(range(50))


async def test_handlers_are_cancelled_when_the_connection_closes(
    wired: Wired, autojump_clock: trio.testing.MockClock
) -> None:
    started = trio.Event()
    cancelled: list[bool] = []

    async def hang(params: Any) -> Any:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)
            raise

    wired.connection.register(APPROVAL_REQUEST, hang)
    await wired.peer.send(approval(1))
    await started.wait()
    await wired.connection.aclose()
    assert cancelled == [True]
    assert wired.connection.statistics().handlers_running == 0


@pytest.mark.parametrize("bad_id", [None, True, False, 1.5, [1], {"a": 1}])
async def test_a_request_without_a_usable_id_is_a_notification(
    wired: Wired, autojump_clock: trio.testing.MockClock, bad_id: Any
) -> None:
    """The runtime never answers an ``"id": null`` request; neither do we."""
    subscription = wired.connection.subscribe()
    await wired.peer.send({"jsonrpc": "2.0", "id": bad_id, "method": APPROVAL_REQUEST, "params": {"a": 1}},
                          {"jsonrpc": "2.0", "id": "probe", "method": "unknown"})
    assert (await wired.peer.receive())["id"] == "probe"  # nothing was sent for the first frame
    notification = await subscription.receive()
    assert notification.method == APPROVAL_REQUEST and notification.params == {"a": 1}

"""ApprovalService on its own: fail closed, deadlines, close(), records. No runtime."""

from __future__ import annotations

import io
import time
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from dsh_orchestra.approvals import (
    ALLOWED_ONCE,
    CANCELLED,
    REJECTED,
    ApprovalRequest,
    ApprovalService,
    AuditLog,
    Decision,
    allow,
    allow_tools,
    first_match,
)
from dsh_orchestra.protocol import ApprovalRequestParams


def params(tool: str = "bash", session: str = "s1", call: str = "c1", reason: str | None = "why") -> ApprovalRequestParams:
    return ApprovalRequestParams(session_id=session, tool_name=tool, call_id=call, reason=reason)


def audit_lines(stream: io.BytesIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


async def test_a_decision_is_answered_recorded_and_audited() -> None:
    stream = io.BytesIO()
    service = ApprovalService(first_match(allow_tools("bash", name="bash ok")), runtime="rt-1", audit=AuditLog(stream=stream))
    result = await service.handle(params())
    assert result.outcome == ALLOWED_ONCE
    (record,) = service.take(["s1"])
    assert (record.runtime, record.session_id, record.tool_name, record.call_id, record.reason) == ("rt-1", "s1", "bash", "c1", "why")
    assert (record.outcome, record.rule, record.error, record.via) == (ALLOWED_ONCE, "bash ok", None, "approval/request")
    assert record.latency_s >= 0
    (line,) = audit_lines(stream)
    assert set(line) == {"time", "runtime", "session", "tool", "call_id", "reason", "outcome", "rule", "note", "latency_s", "error", "via"}
    assert line["outcome"] == ALLOWED_ONCE and line["session"] == "s1" and line["time"].endswith("Z")
    assert service.take(["s1"]) == ()  # taken once


async def test_no_rule_matching_means_rejected() -> None:
    service = ApprovalService(lambda request: None)
    assert (await service.handle(params())).outcome == REJECTED
    (record,) = service.take(["s1"])
    assert (record.rule, record.error) == ("default", None)


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        (lambda r: 1 / 0, "policy raised ZeroDivisionError"),
        (lambda r: "allowed-once", "policy returned str 'allowed-once', not a Decision"),
        (lambda r: True, "policy returned bool True"),
    ],
)
async def test_a_failing_policy_fails_closed_and_the_error_is_recorded(policy: Any, error: str) -> None:
    stream = io.BytesIO()
    service = ApprovalService(policy, audit=AuditLog(stream=stream))
    assert (await service.handle(params())).outcome == REJECTED
    (record,) = service.take(["s1"])
    assert record.outcome == REJECTED and record.rule == "fail-closed" and error in (record.error or "")
    assert error in audit_lines(stream)[0]["error"]


async def test_an_async_policy_past_its_deadline_is_cancelled_and_rejected(autojump_clock: trio.testing.MockClock) -> None:
    cancelled = []

    async def slow(request: ApprovalRequest) -> Decision:
        try:
            await trio.sleep(100)
        finally:
            cancelled.append(True)
        return allow()

    service = ApprovalService(slow, deadline=5)
    start = trio.current_time()
    assert (await service.handle(params())).outcome == REJECTED
    assert trio.current_time() - start == pytest.approx(5)
    assert cancelled == [True]
    (record,) = service.take(["s1"])
    assert "longer than its deadline of 5 s" in (record.error or "")


async def test_a_sync_policy_that_returns_too_late_is_rejected() -> None:
    def slow(request: ApprovalRequest) -> Decision:
        time.sleep(0.15)
        return allow()

    service = ApprovalService(slow, deadline=0.05)
    assert (await service.handle(params())).outcome == REJECTED
    assert "deadline" in (service.take(["s1"])[0].error or "")


async def test_the_policy_deadline_attribute_is_used() -> None:
    class Timed:
        deadline = 7.5

        def __call__(self, request: ApprovalRequest) -> Decision:
            return allow()

    assert ApprovalService(Timed()).deadline == 7.5
    assert ApprovalService(Timed(), deadline=1).deadline == 1.0
    with pytest.raises(ValueError):
        ApprovalService(Timed(), deadline=0)


async def test_every_request_asks_the_policy_no_caching() -> None:
    seen: list[str | None] = []

    def policy(request: ApprovalRequest) -> Decision:
        seen.append(request.call_id)
        return Decision(outcome=ALLOWED_ONCE if len(seen) == 1 else CANCELLED, rule="once")

    service = ApprovalService(policy)
    outcomes = [(await service.handle(params(call="same"))).outcome for _ in range(3)]
    assert outcomes == [ALLOWED_ONCE, CANCELLED, CANCELLED] and seen == ["same"] * 3


async def test_close_rejects_pending_and_later_requests(nursery: trio.Nursery) -> None:
    entered = trio.Event()

    async def forever(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    service = ApprovalService(forever)
    results: list[str] = []

    async def ask() -> None:
        results.append((await service.handle(params())).outcome)

    nursery.start_soon(ask)
    await entered.wait()
    assert service.pending == 1
    service.close()
    service.close()  # idempotent
    await trio.testing.wait_all_tasks_blocked()
    assert results == [REJECTED] and service.pending == 0
    assert (await service.handle(params(call="c2"))).outcome == REJECTED
    first, second = service.take(["s1"])
    assert "closing while the policy decided" in (first.error or "")
    assert "closing; rejected without asking" in (second.error or "")


async def test_a_cancelled_handler_records_rejected_and_sends_nothing() -> None:
    entered = trio.Event()

    async def forever(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    service = ApprovalService(forever)
    async with trio.open_nursery() as nursery:

        async def ask() -> None:
            await service.handle(params())
            raise AssertionError("a cancelled handler must not return an answer")

        nursery.start_soon(ask)
        await entered.wait()
        nursery.cancel_scope.cancel()
    (record,) = service.take(["s1"])
    assert record.outcome == REJECTED and record.error == "the connection closed before the decision was sent"


async def test_take_returns_the_interval_and_drops_older_records() -> None:
    service = ApprovalService(lambda r: allow())
    await service.handle(params(call="old"))
    await trio.sleep(0.01)
    since = trio.current_time()
    await service.handle(params(call="new"))
    await service.handle(params(session="child", call="kid"))
    taken = service.take(["s1", "child"], since)
    assert [r.call_id for r in taken] == ["new", "kid"]
    assert service.take(["s1"]) == ()  # the old one was dropped, not kept for later


async def test_secrets_are_redacted_in_records_and_the_audit_line() -> None:
    stream = io.BytesIO()
    secret = "hunter2-very-secret"
    service = ApprovalService(lambda r: 1 / 0, audit=AuditLog(stream=stream), secrets=[secret])
    await service.handle(params(reason=f"use {secret} and api_key=abc123 please", call=f"call-{secret}"))
    (record,) = service.take(["s1"])
    assert secret not in repr(record) and "abc123" not in (record.reason or "")
    line = stream.getvalue().decode()
    assert secret not in line and "abc123" not in line and "***" in line

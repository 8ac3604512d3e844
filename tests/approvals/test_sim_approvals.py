"""Approvals end to end against the simulated runtime (in-process, and as a process)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

import orjson
import pytest
import trio

from approval_support import SimWire, events_of, result_text, tool_results
from dsh_orchestra.approvals import (
    ALLOWED_ONCE,
    CANCELLED,
    REJECTED,
    ApprovalRequest,
    ApprovalService,
    Decision,
    LoadedPolicy,
    allow,
    allow_tools,
    budget,
    callback,
    deny_tools,
    first_match,
    read_audit,
)
from dsh_orchestra.protocol import TransportClosedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime

SimFactory = Callable[..., tuple[RuntimeSpec, SimWire]]


def answered_once(wire: SimWire, method: str = "approval/request") -> list[dict[str, Any]]:
    """Every server request of ``method`` got exactly one reply; the replies, in order."""
    replies = []
    for request in wire.server_requests(method):
        got = wire.replies_to(request["id"])
        assert len(got) == 1, f"request {request['id']} got {len(got)} replies: {got}"
        replies.append(got[0])
    return replies


async def test_without_a_policy_no_flag_is_sent_and_the_runtime_fails_closed(sim: SimFactory) -> None:
    spec, wire = sim()
    async with open_runtime(spec) as runtime:
        result = await runtime.session().run("DEPLOY now")
        assert runtime.approvals is None
    assert "approvalRequests" not in wire.initialize_params() and "capabilities" not in wire.initialize_params()
    assert wire.runtime is not None and not wire.runtime.approvals_enabled
    assert wire.server_requests("approval/request") == []
    assert result.final_response == "deploy was unavailable" and result.approvals == ()
    (decided,) = events_of(result, "approval/decided")
    assert decided["outcome"] == "unavailable"
    (tool,) = tool_results(result)
    assert tool["message"]["isError"] is True and "no approval channel" in result_text(tool)


@pytest.mark.parametrize(
    ("policy", "outcome", "rule"),
    [
        (allow_tools("bash", name="bash ok"), ALLOWED_ONCE, "bash ok"),
        (deny_tools("bash", name="no bash"), REJECTED, "no bash"),
        (allow_tools("read"), REJECTED, "default"),  # a rule that does not apply: the default
        (first_match(allow_tools("read")), REJECTED, "default"),
        (callback(lambda r: "cancelled", name="cb"), CANCELLED, "cb"),
    ],
)
async def test_the_policy_decides_and_the_flag_is_sent(sim: SimFactory, policy: Any, outcome: str, rule: str) -> None:
    spec, wire = sim()
    async with open_runtime(spec, approvals=policy) as runtime:
        session = runtime.session("eval-1")
        result = await session.run("DEPLOY now")
    assert wire.initialize_params()["approvalRequests"] is True
    assert wire.runtime is not None and wire.runtime.approvals_enabled
    assert [r["result"] for r in answered_once(wire)] == [{"outcome": outcome}]
    assert result.final_response == f"deploy was {outcome}"
    (record,) = result.approvals
    assert (record.session_id, record.tool_name, record.outcome, record.rule, record.runtime) == ("eval-1", "bash", outcome, rule, "sim")
    assert record.reason == "escalate sandbox to danger-full-access: needs network"
    assert record.call_id == events_of(result, "approval/asked")[0]["callId"]
    (tool,) = tool_results(result)
    assert bool(tool["message"].get("isError")) is (outcome != ALLOWED_ONCE)


async def test_an_async_policy(sim: SimFactory) -> None:
    async def policy(request: ApprovalRequest) -> Decision:
        await trio.sleep(0.01)
        return allow("async", note=f"ok for {request.tool_name}")

    spec, wire = sim()
    async with open_runtime(spec, approvals=policy) as runtime:
        result = await runtime.session().run("WRITE it")
    assert result.final_response == "write was allowed-once"
    assert (result.approvals[0].tool_name, result.approvals[0].note) == ("write", "ok for write")


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        (lambda request: 1 / 0, "policy raised ZeroDivisionError: division by zero"),
        (lambda request: {"outcome": "allowed-once"}, "policy returned dict"),
    ],
)
async def test_a_broken_policy_is_rejected_and_audited(sim: SimFactory, tmp_path: Path, policy: Any, error: str) -> None:
    spec, wire = sim()
    audit = tmp_path / "audit.jsonl"
    async with open_runtime(spec, approvals=policy, audit=audit) as runtime:
        result = await runtime.session().run("DEPLOY now")
    assert [r["result"] for r in answered_once(wire)] == [{"outcome": "rejected"}]
    assert result.final_response == "deploy was rejected"
    (record,) = result.approvals
    assert record.rule == "fail-closed" and error in (record.error or "")
    (line,) = read_audit(audit)
    assert line.outcome == REJECTED and error in (line.error or "")


async def test_a_policy_past_its_deadline_is_rejected_and_its_late_answer_never_sent(sim: SimFactory) -> None:
    finished = trio.Event()

    async def slow(request: ApprovalRequest) -> Decision:
        try:
            await trio.sleep(100)
        finally:
            finished.set()
        return allow()

    spec, wire = sim()
    async with open_runtime(spec, approvals=LoadedPolicy(slow, deadline=0.2)) as runtime:
        start = trio.current_time()
        result = await runtime.session().run("DEPLOY now")
        # the deadline, not the policy's 100 s; the slack is for a loaded machine (2 s before)
        assert trio.current_time() - start < 20
        assert finished.is_set()  # the policy was cancelled at its deadline
        await trio.sleep(0.1)
    assert [r["result"] for r in answered_once(wire)] == [{"outcome": "rejected"}]
    assert "deadline of 0.2 s" in (result.approvals[0].error or "")


async def test_a_slow_sync_policy_is_rejected(sim: SimFactory) -> None:
    def slow(request: ApprovalRequest) -> Decision:
        time.sleep(0.3)
        return allow()

    spec, wire = sim()
    async with open_runtime(spec, approvals=ApprovalService(slow, deadline=0.1, runtime="mine")) as runtime:
        result = await runtime.session().run("DEPLOY now")
    assert [r["result"] for r in answered_once(wire)] == [{"outcome": "rejected"}]
    assert result.approvals[0].runtime == "mine" and "deadline" in (result.approvals[0].error or "")


async def test_every_approval_asks_the_policy_again(sim: SimFactory) -> None:
    seen: list[str | None] = []

    def policy(request: ApprovalRequest) -> Decision:
        seen.append(request.call_id)
        return allow("counted")

    spec, wire = sim()
    async with open_runtime(spec, approvals=budget(policy, 2, tools="bash")) as runtime:
        session = runtime.session()
        first = await session.run("TRIPLE")
        second = await session.run("DEPLOY again")
    assert len(seen) == 2 and len(set(seen)) == 2  # asked per call; the third was over budget
    assert [r.outcome for r in first.approvals] == [ALLOWED_ONCE, ALLOWED_ONCE, REJECTED]
    assert [r.rule for r in first.approvals] == ["counted", "counted", "budget"]
    assert [r.outcome for r in second.approvals] == [REJECTED]  # its own interval only
    assert len(answered_once(wire)) == 4


async def test_a_subagents_approvals_belong_to_the_parents_turn(sim: SimFactory) -> None:
    spec, _ = sim()
    async with open_runtime(spec, approvals=allow_tools("bash")) as runtime:
        result = await runtime.session("parent").run("DELEGATE")
    (record,) = result.approvals
    assert record.session_id != "parent" and record.session_id in {s.child_session_id for s in result.subagents}
    assert result.final_response == "child reported"


async def test_a_decision_outside_any_run_does_not_leak_into_the_next_run(sim: SimFactory) -> None:
    spec, _ = sim()
    async with open_runtime(spec, approvals=allow_tools("bash")) as runtime:
        session = runtime.session()
        await session.prompt("DEPLOY by hand")
        await session.wait()
        result = await session.run("WRITE next")
    assert [r.tool_name for r in result.approvals] == ["write"]


async def test_the_audit_log_is_flushed_per_decision_and_redacted(
    sim: SimFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_key, env_secret = "sk-live-THE-API-KEY-1234", "env-secret-value-5678"
    script = """
[[rules]]
match = "LEAK"
reply = "leak was {outcome}"
approval = { tool = "bash", reason = "curl -H 'x-api-key: sk-live-THE-API-KEY-1234' -d env-secret-value-5678" }
"""
    spec, _ = sim(script)
    spec = spec.evolve(api_key=api_key, env={"SERVICE_TOKEN": env_secret})
    audit = tmp_path / "audit.jsonl"
    async with open_runtime(spec, approvals=lambda r: 1 / 0 if "x" in (r.reason or "") else None, audit=audit) as runtime:
        result = await runtime.session().run("LEAK it")
        lines = audit.read_bytes().splitlines()  # before the runtime (and the log) closes
        assert len(lines) == 1
    line = orjson.loads(lines[0])
    assert set(line) >= {"time", "runtime", "session", "tool", "call_id", "reason", "outcome", "rule", "latency_s", "error"}
    assert line["tool"] == "bash" and line["outcome"] == "rejected" and line["rule"] == "fail-closed"
    assert line["error"].startswith("policy raised ZeroDivisionError") and line["latency_s"] >= 0
    raw = audit.read_text()
    assert api_key not in raw and env_secret not in raw and "***" in line["reason"]
    assert api_key not in repr(result.approvals) and env_secret not in repr(result.approvals)


async def test_closing_the_runtime_rejects_a_pending_decision(sim: SimFactory, tmp_path: Path) -> None:
    entered = trio.Event()

    async def forever(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    spec, wire = sim()
    audit = tmp_path / "audit.jsonl"
    async with open_runtime(spec, approvals=forever, audit=audit) as runtime:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.session().run, "DEPLOY now")
            await entered.wait()
            nursery.cancel_scope.cancel()  # the caller gives up: the runtime closes next
    (record,) = read_audit(audit)
    assert record.outcome == REJECTED and "closing" in (record.error or "")
    assert [r["result"] for r in answered_once(wire)] == [{"outcome": "rejected"}]


async def test_a_lost_connection_rejects_a_pending_decision_and_sends_nothing(
    process_sim: Callable[..., RuntimeSpec], tmp_path: Path
) -> None:
    entered = trio.Event()

    async def forever(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    audit = tmp_path / "audit.jsonl"
    with trio.fail_after(20):
        async with open_runtime(process_sim(), approvals=forever, audit=audit) as runtime:
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    with pytest.raises(TransportClosedError):
                        await runtime.session().run("DEPLOY now")

                nursery.start_soon(run)
                await entered.wait()
                assert runtime.actor.pid is not None
                os.kill(runtime.actor.pid, signal.SIGKILL)
    (record,) = read_audit(audit)
    assert record.outcome == REJECTED and record.error == "the connection closed before the decision was sent"


async def test_50_sessions_with_3_approvals_each_and_a_slow_policy(sim: SimFactory, tmp_path: Path) -> None:
    """session/wait completes only after approvals on many sessions, all answered concurrently:
    no decision is made before the first approval of every session is waiting for one (were
    they answered one at a time, the first would wait forever and fail_after would fire)."""
    active = peak = 0
    all_waiting = trio.Event()

    async def slow(request: ApprovalRequest) -> Decision:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 50:
            all_waiting.set()
        try:
            await all_waiting.wait()
            await trio.sleep(0.05)
        finally:
            active -= 1
        return allow("slow", note=request.session_id)

    spec, wire = sim()
    audit = tmp_path / "audit.jsonl"
    results: dict[str, Any] = {}
    with trio.fail_after(30):
        async with open_runtime(spec, approvals=slow, audit=audit) as runtime:

            async def one(n: int) -> None:
                results[f"s{n}"] = await runtime.session(f"s{n}").run("TRIPLE")

            async with trio.open_nursery() as nursery:
                for n in range(50):
                    nursery.start_soon(one, n)
    assert len(results) == 50
    for session_id, result in results.items():
        assert result.final_response == "three steps done"
        assert [(r.session_id, r.outcome, r.note) for r in result.approvals] == [(session_id, ALLOWED_ONCE, session_id)] * 3
    assert len(read_audit(audit)) == 150 and len(answered_once(wire)) == 150
    assert peak == 50  # the decisions overlapped: the connection kept answering while each waited


async def test_approvals_on_many_sessions_over_a_process(process_sim: Callable[..., RuntimeSpec]) -> None:
    async def slow(request: ApprovalRequest) -> Decision:
        await trio.sleep(0.05)
        return allow("slow")

    results = []
    with trio.fail_after(30):
        async with open_runtime(process_sim(), approvals=slow) as runtime:

            async def one(n: int) -> None:
                results.append(await runtime.session(f"p{n}").run("TRIPLE"))

            async with trio.open_nursery() as nursery:
                for n in range(10):
                    nursery.start_soon(one, n)
    assert len(results) == 10 and all([r.outcome for r in res.approvals] == [ALLOWED_ONCE] * 3 for res in results)


def test_relay_needs_a_patch_loading_runtime(workspace: Path, dsh_home: Path) -> None:
    with pytest.raises(ValueError, match="approval_relay='on' needs a runtime that loads --patch"):
        RuntimeSpec.simulator(dsh_home=dsh_home, cwd=workspace, approval_relay="on")
    with pytest.raises(ValueError, match="approval_relay"):
        RuntimeSpec(connect=lambda: None, cwd=workspace, approval_relay="on")  # type: ignore[arg-type,return-value]
    # "auto" (the default) never relays to the simulator: it gets approval/request instead
    assert not RuntimeSpec.simulator(dsh_home=dsh_home, cwd=workspace).relays(approvals=True, answerer=True)


async def test_relay_needs_a_policy(workspace: Path, dsh_home: Path) -> None:
    spec = RuntimeSpec(dsh_home=dsh_home, cwd=workspace, approval_relay="on")
    with pytest.raises(ValueError, match="needs open_runtime"):
        async with open_runtime(spec):
            pass


async def test_bad_policy_and_answerer_values_are_refused(sim: SimFactory) -> None:
    spec, _ = sim()
    with pytest.raises(TypeError, match="approvals must be a policy"):
        async with open_runtime(spec, approvals="allow everything"):
            pass
    with pytest.raises(TypeError, match="answerer must be a callable"):
        async with open_runtime(spec, answerer=42):
            pass


async def test_a_runtime_that_stops_waiting_ignores_the_answer_that_still_comes(sim: SimFactory) -> None:
    """The protocol has no "approval withdrawn" notification: our answer after the runtime's
    own timeout is sent (we cannot know) and ignored; the runtime went on with cancelled."""
    script = """
[[rules]]
match = "IMPATIENT"
reply = "outcome {outcome}"
approval = { tool = "bash", reason = "quick", timeout = 0.1 }
"""
    # The policy answers only after the turn ended (the runtime gave up on it), and the test then
    # waits for that answer to be written: no fixed 0.3 s and 0.4 s (before) to order them.
    gave_up = trio.Event()

    async def slow(request: ApprovalRequest) -> Decision:
        await gave_up.wait()
        return allow("slow")

    spec, wire = sim(script)
    async with open_runtime(spec, approvals=slow) as runtime:
        result = await runtime.session().run("IMPATIENT")
        gave_up.set()
        with trio.fail_after(30):
            while not all(wire.replies_to(r["id"]) for r in wire.server_requests("approval/request")):  # noqa: ASYNC110 - the recorded wire has no event to wait on
                await trio.sleep(0.01)
    assert result.final_response == "outcome cancelled"
    assert [r["result"] for r in answered_once(wire)] == [{"outcome": "allowed-once"}]

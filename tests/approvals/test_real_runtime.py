"""Approvals on the real runtime 0.2.1-rc.2 (bundled dsh, fake model on 127.0.0.1).

0.2.1-rc.2 sends no ``approval/request``: without the relay it decides every approval
``unavailable`` itself (fail closed), with or without a policy on our side. With
``RuntimeSpec(relay_approvals=True)`` the same policy answers its internal chain.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, Callable

import pytest
import trio

from approval_support import events_of, result_text, tool_results
from dsh_orchestra.approvals import ALLOWED_ONCE, REJECTED, ApprovalRequest, Decision, allow, allow_tools, first_match, read_audit
from dsh_orchestra.protocol import unstructure
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime, open_runtime
from dsh_orchestra.session._relay import SOCKET_ENV
from dsh_orchestra.testing._script import Script, parse_script

pytestmark = pytest.mark.integration

ESCALATE = {"description": "x", "command": "echo hi", "sandbox_permissions": "danger-full-access", "justification": "test"}


@pytest.fixture
def model_script() -> Script:
    return parse_script({"rules": [
        {"name": "escalate", "match": "ESC", "reply": "done", "tools": [{"name": "bash", "input": ESCALATE}]},
        {"name": "delegate", "match": "SPAWN", "reply": "spawned", "after_subagents": "child reported",
         "spawn": [{"description": "child escalates", "prompt": "CHILD wants danger"}]},
        {"name": "child", "match": "CHILD", "reply": "child done", "tools": [{"name": "bash", "input": ESCALATE}]},
        {"name": "environment", "match": "ENVIRONMENT", "reply": "looked", "tools": [{"name": "bash", "input": {
            **ESCALATE, "command": 'echo "sock=${DSH_ORCHESTRA_APPROVAL_SOCKET:-unset} key=${DEEPSEEK_API_KEY:-unset}"'}}]},
    ]})


def sent_initialize(runtime: Runtime) -> dict[str, Any]:
    """The initialize params this runtime's actor sent (built exactly as the handshake does)."""
    actor = runtime.actor
    raw: dict[str, Any] = unstructure(actor.spec.initialize_params(
        approval_requests=actor.approval_requests, user_questions=actor.user_questions))
    return raw


def the_tool(result: Any) -> tuple[bool, str]:
    (tool,) = tool_results(result)
    return bool(tool["message"].get("isError")), result_text(tool)


async def test_without_a_policy_nothing_changes(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    with trio.fail_after(30):
        async with open_runtime(dsh_spec()) as runtime:
            result = await runtime.session().run("ESC now")
            init = sent_initialize(runtime)
    assert "approvalRequests" not in init and "capabilities" not in init
    (asked,) = events_of(result, "approval/asked")
    (decided,) = events_of(result, "approval/decided")
    assert asked["toolName"] == "bash" and decided == {"id": asked["id"], "outcome": "unavailable"}
    is_error, text = the_tool(result)
    assert is_error and "no approval channel is available" in text
    assert result.approvals == () and result.finish_reason == "completed"


async def test_a_policy_alone_cannot_reach_the_real_runtime_it_still_fails_closed(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    calls: list[ApprovalRequest] = []

    def allow_everything(request: ApprovalRequest) -> Decision:
        calls.append(request)
        return allow("everything")

    with trio.fail_after(30):
        async with open_runtime(dsh_spec(), approvals=allow_everything) as runtime:
            result = await runtime.session().run("ESC now")
            assert sent_initialize(runtime)["approvalRequests"] is True
    (decided,) = events_of(result, "approval/decided")
    assert decided["outcome"] == "unavailable"
    is_error, text = the_tool(result)
    assert is_error and "no approval channel is available" in text
    assert calls == [] and result.approvals == ()


async def test_relay_allowed_runs_the_escalated_command(dsh_spec: Callable[..., RuntimeSpec], tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    with trio.fail_after(40):
        async with open_runtime(dsh_spec(relay_approvals=True), approvals=first_match(allow_tools("bash", name="bash ok")),
                                audit=audit) as runtime:
            relay = runtime.relay
            assert relay is not None and relay.directory is not None
            directory = relay.directory
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
            assert runtime.actor.spec.env[SOCKET_ENV] == str(directory / "approvals.sock")
            assert runtime.actor.spec.patches[-1] == str(directory / "patch.yml")
            assert sorted(p.name for p in directory.iterdir()) == ["answerer.mjs", "approvals.sock", "patch.yml"]
            assert SOCKET_ENV in runtime.actor.spec.process_env()  # the runtime process has it
            result = await runtime.session("relay-1").run("ESC now")
            environment = await runtime.session("relay-2").run("ENVIRONMENT")
        # The patch is not persisted in DSH_HOME: a later launch without it (here: to resume the
        # session) is the plain runtime again.
        async with open_runtime(dsh_spec()) as runtime:
            later = await (await runtime.resume("relay-1")).run("ESC again")
    is_error, text = the_tool(result)
    assert not is_error and text.strip() == "hi"
    (asked,) = events_of(result, "approval/asked")
    (decided,) = events_of(result, "approval/decided")
    assert decided["outcome"] == ALLOWED_ONCE
    (record,) = result.approvals
    assert (record.session_id, record.tool_name, record.call_id, record.outcome, record.rule, record.via) == (
        "relay-1", "bash", asked["callId"], ALLOWED_ONCE, "bash ok", "relay")
    assert record.reason == asked["reason"] == "escalate sandbox to danger-full-access: test"
    assert [r.outcome for r in read_audit(audit)] == [ALLOWED_ONCE, ALLOWED_ONCE]
    assert not directory.exists()
    # The commands the runtime runs for the model see neither the socket nor the api key.
    assert the_tool(environment) == (False, "sock=unset key=unset\n")
    assert events_of(later, "approval/decided")[0]["outcome"] == "unavailable" and later.approvals == ()


async def test_relay_rejected_or_failing_policy_is_a_tool_error(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    def policy(request: ApprovalRequest) -> Decision | None:
        if request.session_id == "broken":
            raise RuntimeError("policy bug")
        return None  # no rule: rejected

    with trio.fail_after(30):
        async with open_runtime(dsh_spec(relay_approvals=True), approvals=policy) as runtime:
            rejected = await runtime.session("plain").run("ESC now")
            failed = await runtime.session("broken").run("ESC now")
            directory = runtime.relay.directory if runtime.relay else None
    for result in (rejected, failed):
        assert events_of(result, "approval/decided")[0]["outcome"] == REJECTED
        is_error, text = the_tool(result)
        assert is_error and "rejected escalating this command" in text
    assert [(r.outcome, r.rule, r.error) for r in rejected.approvals] == [(REJECTED, "default", None)]
    assert [(r.outcome, r.rule, r.error) for r in failed.approvals] == [
        (REJECTED, "fail-closed", "policy raised RuntimeError: policy bug")]
    assert directory is not None and not directory.exists()


async def test_relay_pending_at_close_is_rejected_and_nothing_is_left(dsh_spec: Callable[..., RuntimeSpec], tmp_path: Path) -> None:
    entered = trio.Event()

    async def forever(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    audit = tmp_path / "audit.jsonl"
    with trio.fail_after(30):
        async with open_runtime(dsh_spec(relay_approvals=True), approvals=forever, audit=audit) as runtime:
            directory = runtime.relay.directory if runtime.relay else None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runtime.session().run, "ESC now")
                await entered.wait()
                nursery.cancel_scope.cancel()
    (record,) = read_audit(audit)
    assert record.outcome == REJECTED and "closing" in (record.error or "") and record.via == "relay"
    assert directory is not None and not directory.exists()


async def test_subagents_never_reach_the_relay(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    calls: list[ApprovalRequest] = []

    def allow_everything(request: ApprovalRequest) -> Decision:
        calls.append(request)
        return allow("everything")

    with trio.fail_after(40):
        async with open_runtime(dsh_spec(relay_approvals=True), approvals=allow_everything) as runtime:
            result = await runtime.session().run("SPAWN a child")
    (child,) = {s.child_session_id for s in result.subagents}
    child_events = [n.params["event"] for n in result.notifications
                    if n.method == "session.event" and n.params.get("sessionId") == child]
    # The child's approval/policy "never" (source delegation) is among its first events, which
    # are never notified (seq 0-2); what shows is the ask rejected without asking anyone.
    decided = [e["data"]["outcome"] for e in child_events if e["type"] == "approval/decided"]
    results = [e["data"] for e in child_events if e["type"] == "tool/result"]
    assert decided == [REJECTED] and calls == [] and result.approvals == ()
    assert [result_text(r) for r in results] == [
        'Error: the user rejected escalating this command to "danger-full-access"; it stays denied, '
        "so stop and explain instead of working around it"]


async def test_a_pool_of_relayed_runtimes(dsh_spec: Callable[..., RuntimeSpec], tmp_path: Path) -> None:
    """relay_approvals is a spec field: every runtime of a pool gets its own relay."""
    from dsh_orchestra.pool import open_pool

    audit = tmp_path / "audit.jsonl"
    with trio.fail_after(40):
        async with open_pool(dsh_spec(relay_approvals=True), 2, approvals=allow_tools("bash"), audit=audit) as pool:
            await pool.wait_live(2)
            async with trio.open_nursery() as nursery:
                results: list[Any] = []

                async def one(n: int) -> None:
                    results.append(await pool.run_prompt("ESC now", session_id=f"pooled-{n}"))

                for n in range(4):
                    nursery.start_soon(one, n)
            directories = {r.relay.directory for r in pool.runtimes if r.relay is not None}
    assert len(directories) == 2 and not any(d is not None and d.exists() for d in directories)
    assert sorted(r.approvals[0].session_id for r in results) == [f"pooled-{n}" for n in range(4)]
    assert all(the_tool(r) == (False, "hi\n") for r in results)
    assert {r.runtime for r in read_audit(audit)} == {"dsh#0", "dsh#1"}


async def test_a_failed_start_with_the_relay_leaves_nothing(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    import tempfile
    from glob import glob

    from dsh_orchestra.protocol import RuntimeStartError

    pattern = str(Path(tempfile.gettempdir()) / "dsh-orchestra-relay-*")
    before = set(glob(pattern))
    with trio.fail_after(30), pytest.raises(RuntimeStartError, match='no adapter registered for provider "nope"'):
        async with open_runtime(dsh_spec(relay_approvals=True, provider="nope"), approvals=allow_tools("bash")):
            pass
    assert set(glob(pattern)) - before == set()

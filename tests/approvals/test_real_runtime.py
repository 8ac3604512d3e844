"""Approvals and questions on the real runtime 0.2.1-rc.2 (bundled dsh, fake model on 127.0.0.1).

0.2.1-rc.2 sends no ``approval/request``: without the relay it decides every approval
``unavailable`` itself (fail closed), with or without a policy on our side. With a policy
the relay is on by default (``approval_relay="auto"``) and the same policy answers its
internal chain, subagents' escalations included; with an answerer the relay mounts the
question tool and answers its questions.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import Any, Callable

import pytest
import trio

from approval_support import events_of, result_text, tool_results
from dsh_orchestra.approvals import ALLOWED_ONCE, REJECTED, ApprovalRequest, Decision, allow, allow_tools, first_match, read_audit
from dsh_orchestra.protocol import unstructure
from dsh_orchestra.questions import DISMISS, first_option
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime, open_runtime
from dsh_orchestra.runtime._relay import SOCKET_ENV
from dsh_orchestra.testing import Script, parse_script

pytestmark = pytest.mark.integration

# A hang guard around a start and a few turns of the real runtime (30 and 40 s before): 8 dsh starting at once took 37 s each beside a disk-heavy load (7.7 s without it), and some over 60 s.
REAL_RUN = 240

ESCALATE = {"description": "x", "command": "echo hi", "sandbox_permissions": "danger-full-access", "justification": "test"}
CHILD_ESCALATE = {**ESCALATE, "command": "echo from-child > child.txt"}
ASK = {"questions": [{"id": "colour", "question": "Which colour?", "header": "Pick",
                      "options": [{"label": "red", "description": "warm"}, {"label": "blue"}]}]}


@pytest.fixture
def model_script() -> Script:
    return parse_script({"rules": [
        {"name": "escalate", "match": "ESC", "reply": "done", "tools": [{"name": "bash", "input": ESCALATE}]},
        {"name": "delegate", "match": "SPAWN", "reply": "spawned", "after_subagents": "child reported",
         "spawn": [{"description": "child escalates", "prompt": "CHILD wants danger"}]},
        {"name": "child", "match": "CHILD", "reply": "child done", "tools": [{"name": "bash", "input": CHILD_ESCALATE}]},
        {"name": "ask", "match": "QUESTION", "reply": "asked", "tools": [{"name": "ask_user_question", "input": ASK}]},
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
    with trio.fail_after(REAL_RUN):
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


async def test_with_the_relay_off_a_policy_cannot_reach_the_runtime_and_says_so(
    dsh_spec: Callable[..., RuntimeSpec], caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[ApprovalRequest] = []

    def allow_everything(request: ApprovalRequest) -> Decision:
        calls.append(request)
        return allow("everything")

    caplog.set_level(logging.WARNING, logger="dsh_orchestra")
    with trio.fail_after(REAL_RUN):
        async with open_runtime(dsh_spec(approval_relay="off"), approvals=allow_everything, answerer=first_option) as runtime:
            assert runtime.relay is None
            result = await runtime.session().run("ESC now")
            assert sent_initialize(runtime)["approvalRequests"] is True
    (decided,) = events_of(result, "approval/decided")
    assert decided["outcome"] == "unavailable"
    is_error, text = the_tool(result)
    assert is_error and "no approval channel is available" in text
    assert calls == [] and result.approvals == ()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "dsh_orchestra.session"]
    assert len(warned) == 2
    assert warned[0].startswith("the approval policy cannot take effect") and warned[1].startswith("the answerer cannot take effect")


async def test_relay_allowed_runs_the_escalated_command(dsh_spec: Callable[..., RuntimeSpec], tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    with trio.fail_after(120):  # two runtime launches and three turns: ~6 s, much more on a loaded machine
        async with open_runtime(dsh_spec(), approvals=first_match(allow_tools("bash", name="bash ok")),
                                audit=audit) as runtime:  # approval_relay "auto": on for the bundled dsh
            relay = runtime.relay
            assert relay is not None and relay.directory is not None
            directory = relay.directory
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
            assert runtime.actor.spec.env[SOCKET_ENV] == str(directory / "approvals.sock")
            assert runtime.actor.spec.patches[-1] == str(directory / "patch.yml")
            assert sorted(p.name for p in directory.iterdir()) == ["answerer.mjs", "approvals.sock", "ask-user.yml", "patch.yml"]
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

    with trio.fail_after(REAL_RUN):
        async with open_runtime(dsh_spec(), approvals=policy) as runtime:
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
    with trio.fail_after(REAL_RUN):
        async with open_runtime(dsh_spec(), approvals=forever, audit=audit) as runtime:
            directory = runtime.relay.directory if runtime.relay else None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runtime.session().run, "ESC now")
                await entered.wait()
                nursery.cancel_scope.cancel()
    (record,) = read_audit(audit)
    assert record.outcome == REJECTED and "closing" in (record.error or "") and record.via == "relay"
    assert directory is not None and not directory.exists()


@pytest.mark.parametrize("allowed", [True, False])
async def test_subagents_escalations_reach_the_same_policy(dsh_spec: Callable[..., RuntimeSpec], workspace: Path, allowed: bool) -> None:
    calls: list[ApprovalRequest] = []

    def policy(request: ApprovalRequest) -> Decision | None:
        calls.append(request)
        return allow("children may") if allowed else None

    with trio.fail_after(REAL_RUN):
        async with open_runtime(dsh_spec(), approvals=policy) as runtime:
            result = await runtime.session("parent").run("SPAWN a child")
    (child,) = {s.child_session_id for s in result.subagents}
    child_events = [n.params["event"] for n in result.notifications
                    if n.method == "session.event" and n.params.get("sessionId") == child]
    # The runtime pinned the child to "never" (source delegation) at creation; the relay plugin
    # switched it back to "ask" before its first step, so its escalation was asked of the policy.
    assert {"policy": "ask"} in [e["data"] for e in child_events if e["type"] == "approval/policy"]
    decided = [e["data"]["outcome"] for e in child_events if e["type"] == "approval/decided"]
    results = [result_text(e["data"]) for e in child_events if e["type"] == "tool/result"]
    assert [c.session_id for c in calls] == [child] and [c.tool_name for c in calls] == ["bash"]
    (record,) = result.approvals  # the parent's run collects its child's decision
    assert (record.session_id, record.via) == (child, "relay")
    if allowed:
        assert decided == [ALLOWED_ONCE] and record.outcome == ALLOWED_ONCE
        assert (workspace / "child.txt").read_text() == "from-child\n"  # the side effect is on disk
    else:
        assert decided == [REJECTED] and record.outcome == REJECTED and not (workspace / "child.txt").exists()
        assert results and "rejected escalating this command" in results[0]


async def test_a_question_is_answered_by_the_answerer_through_the_relay(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    with trio.fail_after(REAL_RUN):
        async with open_runtime(dsh_spec(), answerer=first_option) as runtime:
            assert runtime.relay is not None and runtime.actor.spec.patches[-1].endswith("ask-user.yml")
            result = await runtime.session("asker").run("QUESTION please")
    is_error, text = the_tool(result)
    assert not is_error and orjson_loads(text) == {"answers": [{"id": "colour", "selected": ["red"]}]}
    (record,) = result.questions
    assert (record.session_id, record.question_id, record.question, record.options) == ("asker", "colour", "Which colour?", ("red", "blue"))
    assert (record.outcome, record.selected, record.answered_by, record.via) == ("answered", ("red",), "first_option", "relay")
    assert result.final_response == "asked"


@pytest.mark.parametrize(("answerer", "code"), [(lambda r: DISMISS, "ASK_CANCELLED"), (lambda r: 1 / 0, "PROVIDER_ERROR")])
async def test_a_dismissed_or_failed_question_fails_the_tool(dsh_spec: Callable[..., RuntimeSpec], answerer: Any, code: str) -> None:
    with trio.fail_after(REAL_RUN):
        async with open_runtime(dsh_spec(), answerer=answerer) as runtime:
            result = await runtime.session().run("QUESTION please")
    (tool,) = tool_results(result)
    assert tool["message"]["isError"] and tool.get("error", {}).get("code") == code, tool
    (record,) = result.questions
    assert record.outcome == ("dismissed" if code == "ASK_CANCELLED" else "failed")


async def test_without_an_answerer_the_question_tool_is_not_mounted(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    with trio.fail_after(REAL_RUN):
        async with open_runtime(dsh_spec(), approvals=allow_tools("bash")) as runtime:
            result = await runtime.session().run("QUESTION please")
    (tool,) = tool_results(result)
    assert tool["message"]["isError"] and tool.get("error", {}).get("code") == "UNKNOWN_TOOL", tool
    assert result.questions == ()


def orjson_loads(text: str) -> Any:
    import orjson

    return orjson.loads(text)


def test_relay_approvals_is_a_deprecated_alias_of_approval_relay(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="approval_relay"):
        spec = RuntimeSpec(dsh_home=tmp_path, relay_approvals=True)
    assert spec.approval_relay == "on" and spec.relay_approvals is None and spec.evolve(name="x").approval_relay == "on"
    with pytest.warns(DeprecationWarning):
        assert RuntimeSpec(dsh_home=tmp_path, relay_approvals=False).approval_relay == "off"
    with pytest.raises(ValueError, match="approval_relay must be one of"):
        RuntimeSpec(dsh_home=tmp_path, approval_relay="yes")
    with pytest.raises(ValueError, match="loads --patch files"):
        RuntimeSpec(dsh_home=tmp_path, command=["my-runtime"], approval_relay="on")
    assert RuntimeSpec.simulator(dsh_home=tmp_path).relays(approvals=True, answerer=True) is False
    assert RuntimeSpec(dsh_home=tmp_path).relays(approvals=False, answerer=False) is False


async def test_relay_on_without_a_policy_or_answerer_is_an_error(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    with pytest.raises(ValueError, match="needs open_runtime"):
        async with open_runtime(dsh_spec(), approval_relay="on"):
            pass


async def test_a_pool_of_relayed_runtimes(dsh_spec: Callable[..., RuntimeSpec], tmp_path: Path) -> None:
    """approval_relay is a spec field (auto by default): every runtime of a pool gets its own relay."""
    from dsh_orchestra.pool import open_pool

    audit = tmp_path / "audit.jsonl"
    with trio.fail_after(REAL_RUN):
        async with open_pool(dsh_spec(), 2, approvals=allow_tools("bash"), audit=audit) as pool:
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
    import os

    from dsh_orchestra._scratch import scratch_root
    from dsh_orchestra.protocol import RuntimeStartError

    def relay_dirs() -> set[Path]:  # this process's relay directories, in either scratch root
        roots = {r for r in (scratch_root(), scratch_root("/tmp")) if r is not None}
        return {p for root in roots for p in root.glob(f"relay-{os.getpid()}-*")}

    before = relay_dirs()
    with trio.fail_after(REAL_RUN), pytest.raises(RuntimeStartError, match='no adapter registered for provider "nope"'):
        async with open_runtime(dsh_spec(provider="nope"), approvals=allow_tools("bash")):
            pass
    assert relay_dirs() - before == set()

"""Built-in policies and combinators: plain logic, sync and async, no runtime."""

from __future__ import annotations

import io
from typing import Any

import pytest
import trio

from dsh_orchestra.approvals import (
    ALLOWED_ONCE,
    CANCELLED,
    REJECTED,
    ApprovalRequest,
    Decision,
    Rule,
    all_of,
    allow,
    allow_tools,
    any_of,
    ask_terminal,
    budget,
    by_session,
    callback,
    deny_tools,
    first_match,
    reason_matches,
    reject,
)
from dsh_orchestra.approvals._policies import call_policy


def req(tool: str = "bash", session: str = "s1", reason: str | None = None, call: str | None = "c1") -> ApprovalRequest:
    return ApprovalRequest(session_id=session, tool_name=tool, call_id=call, reason=reason, runtime="rt")


async def ask(policy: Any, request: ApprovalRequest) -> Any:
    return await call_policy(policy, request)


def test_decision_validates_its_outcome_and_only_allowed_once_allows() -> None:
    with pytest.raises(ValueError, match="outcome must be one of"):
        Decision(outcome="allowed")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Decision(outcome=REJECTED, rule=3)  # type: ignore[arg-type]
    assert Decision(outcome=ALLOWED_ONCE).allowed
    assert not Decision(outcome=REJECTED).allowed
    assert not Decision(outcome=CANCELLED).allowed
    assert allow("r").outcome == ALLOWED_ONCE and reject("r").outcome == REJECTED


async def test_rule_conditions_all_must_hold() -> None:
    rule = Rule("r", ALLOWED_ONCE, tools=["ba*", "read"], sessions="eval-*", reason=r"network")
    assert rule(req("bash", "eval-1", "needs network")) == Decision(outcome=ALLOWED_ONCE, rule="r")
    assert rule(req("bash", "prod-1", "needs network")) is None
    assert rule(req("write", "eval-1", "needs network")) is None
    assert rule(req("bash", "eval-1", None)) is None
    with pytest.raises(ValueError, match="outcome"):
        Rule("r", "yes")
    with pytest.raises(ValueError, match="glob"):
        Rule("r", REJECTED, tools=[])


async def test_named_builtins() -> None:
    assert (await ask(allow_tools("read", "glob"), req("glob"))).outcome == ALLOWED_ONCE
    assert await ask(allow_tools("read"), req("bash")) is None
    assert (await ask(deny_tools("b*"), req("bash"))).outcome == REJECTED
    assert (await ask(by_session("ci-*", CANCELLED), req(session="ci-7"))).outcome == CANCELLED
    assert (await ask(reason_matches(r"^escalate", REJECTED), req(reason="escalate sandbox"))).rule == "reason"


async def test_first_match_tries_rules_in_order_then_the_default() -> None:
    async def async_rule(request: ApprovalRequest) -> Decision | None:
        await trio.lowlevel.checkpoint()
        return allow("async") if request.tool_name == "grep" else None

    policy = first_match(deny_tools("bash", name="no-bash"), async_rule, allow_tools("*", name="rest"))
    assert (await ask(policy, req("bash"))).rule == "no-bash"
    assert (await ask(policy, req("grep"))).rule == "async"
    assert (await ask(policy, req("write"))).rule == "rest"
    fallback = await ask(first_match(allow_tools("read")), req("bash"))
    assert fallback == Decision(outcome=REJECTED, rule="default", note="no rule matched")
    assert (await ask(first_match(default=ALLOWED_ONCE), req())).outcome == ALLOWED_ONCE
    with pytest.raises(ValueError):
        first_match(default="maybe")


async def test_first_match_refuses_a_rule_returning_garbage() -> None:
    with pytest.raises(TypeError, match="a rule returned str 'yes'"):
        await ask(first_match(lambda r: "yes"), req())


async def test_all_of_needs_every_policy_and_stops_at_the_first_refusal() -> None:
    calls: list[str] = []

    def counting(name: str, decision: Decision | None) -> Any:
        def policy(request: ApprovalRequest) -> Decision | None:
            calls.append(name)
            return decision

        return policy

    both = all_of(counting("a", allow("a")), counting("b", allow("b")))
    decided = await ask(both, req())
    assert decided.outcome == ALLOWED_ONCE and decided.note == "a & b"
    calls.clear()
    refused = await ask(all_of(counting("a", reject("no")), counting("b", allow("b"))), req())
    assert refused.rule == "no" and calls == ["a"]
    undecided = await ask(all_of(counting("a", allow("a")), counting("b", None)), req())
    assert undecided.outcome == REJECTED and undecided.rule == "all-of"
    with pytest.raises(TypeError, match="all_of"):
        await ask(all_of(lambda r: 1), req())
    with pytest.raises(ValueError):
        all_of()


async def test_any_of_takes_the_first_allowing_policy() -> None:
    assert (await ask(any_of(deny_tools("*", name="d"), allow_tools("bash", name="a")), req())).rule == "a"
    assert (await ask(any_of(deny_tools("*", name="d"), allow_tools("read")), req())).rule == "d"
    assert await ask(any_of(allow_tools("read")), req()) is None
    with pytest.raises(TypeError, match="any_of"):
        await ask(any_of(lambda r: object()), req())


async def test_budget_counts_approvals_per_session() -> None:
    policy = budget(allow_tools("bash"), 2, tools="bash")
    outcomes = [(await ask(policy, req(session="s1"))).outcome for _ in range(3)]
    assert outcomes == [ALLOWED_ONCE, ALLOWED_ONCE, REJECTED]
    assert (await ask(policy, req(session="s2"))).outcome == ALLOWED_ONCE  # its own count
    assert await ask(policy, req("read", session="s1")) is None  # another tool: passes through
    used_up = await ask(policy, req(session="s1"))
    assert used_up.rule == "budget" and "used up" in used_up.note
    with pytest.raises(ValueError):
        budget(allow_tools("bash"), -1)


async def test_budget_of_a_rule_that_does_not_apply_falls_through() -> None:
    policy = first_match(budget(Rule("ci", ALLOWED_ONCE, sessions="ci-*"), 0), allow_tools("*", name="rest"))
    assert (await ask(policy, req(session="dev-1"))).rule == "rest"
    assert (await ask(policy, req(session="ci-1"))).rule == "budget"


@pytest.mark.parametrize(
    ("value", "outcome"),
    [(True, ALLOWED_ONCE), (False, REJECTED), ("cancelled", CANCELLED), (allow("mine"), ALLOWED_ONCE), (None, None)],
)
async def test_callback_adapts_plain_answers(value: Any, outcome: str | None) -> None:
    decided = await ask(callback(lambda r: value), req())
    assert (decided.outcome if decided is not None else None) == outcome


async def test_callback_accepts_async_functions_and_refuses_garbage() -> None:
    async def yes(request: ApprovalRequest) -> bool:
        await trio.lowlevel.checkpoint()
        return True

    assert (await ask(callback(yes), req())).outcome == ALLOWED_ONCE
    with pytest.raises(TypeError, match="callback returned int"):
        await ask(callback(lambda r: 3), req())
    with pytest.raises(ValueError):
        await ask(callback(lambda r: "maybe"), req())


@pytest.mark.parametrize(("typed", "outcome"), [("y\n", ALLOWED_ONCE), ("YES\n", ALLOWED_ONCE), ("n\n", REJECTED), ("", REJECTED)])
async def test_ask_terminal_allows_only_on_yes(typed: str, outcome: str) -> None:
    out = io.StringIO()
    policy = ask_terminal(stream_in=io.StringIO(typed), stream_out=out)
    decided = await ask(policy, req("bash", "s9", "escalate sandbox to danger-full-access: tests"))
    assert decided.outcome == outcome and decided.rule == "terminal"
    shown = out.getvalue()
    assert "session s9" in shown and "tool: bash" in shown and "escalate sandbox" in shown and "[y/N]" in shown

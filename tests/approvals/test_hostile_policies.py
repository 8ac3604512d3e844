"""Hostile input to the approval layer: regexes that backtrack on model-chosen text, policies
whose modules fail to import, deadlines that are not numbers, files that are not UTF-8."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from approval_support import SimWire
from dsh_orchestra.approvals import (
    REJECTED,
    ApprovalRequest,
    ApprovalService,
    PolicyFileError,
    Rule,
    first_match,
    load_policy,
    parse_rules,
    replay,
)
from dsh_orchestra.approvals._policies import call_policy
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime

REASON = "a" * 29 + "!"  # 30 characters that backtracking patterns cannot match

SCRIPT = f"""
[[rules]]
name = "hostile"
match = "HOSTILE"
reply = "hostile was {{outcome}}"
approval = {{ tool = "bash", reason = "{REASON}" }}
"""

SimFactory = Callable[..., tuple[RuntimeSpec, SimWire]]


@pytest.mark.parametrize(("pattern", "engine_gives_up"), [("(a+)+$", False), ("(a|a)+$", True), ("(a|aa|aaa)+$", True)])
async def test_a_backtracking_reason_is_rejected_by_its_deadline_while_others_run(
    sim: SimFactory, pattern: str, engine_gives_up: bool
) -> None:
    """Rule reason "(a+)+$" (and patterns that backtrack in every engine) against a 30-character
    reason, deadline 1 s: rejected no later than its deadline, while another session's turn
    completes in the meantime on the same runtime (the event loop was never stalled)."""
    spec, _ = sim(SCRIPT)
    policy = first_match(Rule("hostile rule", "allowed-once", tools="bash", reason=pattern))
    service = ApprovalService(policy, deadline=1.0)
    finished: dict[str, float] = {}
    records = []
    with trio.fail_after(30):
        async with open_runtime(spec, approvals=service) as runtime:
            started = time.monotonic()

            async def hostile() -> None:
                result = await runtime.session("hostile").run("HOSTILE")
                finished["hostile"] = time.monotonic() - started
                assert result.final_response == "hostile was rejected"
                records.extend(result.approvals)

            async def others() -> None:
                for n in range(3):
                    result = await runtime.session(f"other-{n}").run("hello")
                    assert result.finish_reason == "completed"
                finished["others"] = time.monotonic() - started

            async with trio.open_nursery() as nursery:
                nursery.start_soon(hostile)
                nursery.start_soon(others)
    [record] = records
    assert record.outcome == REJECTED
    # at its deadline, not when the regex would finish (minutes) nor at the unbounded match's 30 s;
    # the slack is for a loaded machine (0.5 s, before, was little for a starved event loop)
    assert record.latency_s < 1.0 + 5.0
    assert (record.error is not None) == engine_gives_up
    if record.error is not None:  # the engine gave up: failed closed at the deadline
        assert record.rule == "fail-closed" and "deadline" in record.error and record.latency_s >= 1.0
        assert finished["others"] < finished["hostile"]  # the other sessions ran while it was pending
    else:  # the regex package sees through "(a+)+$": no match, at once, and the default decided
        assert record.rule == "default"


async def test_a_rule_called_outside_a_decision_is_still_bounded() -> None:
    """Direct calls and budget() use the same bounded matching (no deadline: a bound of its own)."""
    rule = Rule("r", "allowed-once", reason="(a|a)+$")
    request = ApprovalRequest(session_id="s", tool_name="bash", reason=REASON)
    started = time.monotonic()
    timed_out = False
    with trio.move_on_after(0.5) as scope:
        try:
            await call_policy(rule, request)
        except TimeoutError:  # the match's own bound (the deadline + 0.05 s) ran out first: a
            timed_out = True  # loaded machine can deliver trio's cancellation later than that
    assert scope.cancelled_caught or timed_out
    assert time.monotonic() - started < 0.5 + 5.0  # not the 30 s of an unbounded match; slack for load
    quick = Rule("r", "allowed-once", reason="^a+!$")
    assert (await call_policy(quick, request)) is not None and quick(request) is not None


async def test_replay_bounds_the_regex_too() -> None:
    from dsh_orchestra.approvals import DecisionRecord

    record = DecisionRecord(time="t", runtime="r", session_id="s", tool_name="bash", call_id=None, reason=REASON,
                            outcome="allowed-once", rule="x", note="", latency_s=0.0)
    started = time.monotonic()
    report = await replay([record], first_match(Rule("r", "allowed-once", reason="(a|a)+$")), deadline=0.5)
    assert time.monotonic() - started < 0.5 + 5.0  # not the 30 s of an unbounded match; slack for load
    assert report.changed[0].new_outcome == REJECTED and "deadline" in (report.changed[0].new_error or "")


def test_module_policy_deadline_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/approvals.md: the policy's ``deadline`` attribute sets the decision deadline, for a
    module:attr policy as for a rules file (it used to be 30 s)."""
    (tmp_path / "deadline_policies.py").write_text(
        "async def slow(request):\n    return None\nslow.deadline = 2.5\n"
        "class Slow:\n    deadline = 0.25\n    async def __call__(self, request):\n        return None\n"
        "instance = Slow()\n"
        "def nan(request):\n    return None\nnan.deadline = float('nan')\n"
        "def text(request):\n    return None\ntext.deadline = '5'\n"
        "def plain(request):\n    return None\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_policy("deadline_policies:slow").deadline == 2.5
    assert ApprovalService(load_policy("deadline_policies:slow")).deadline == 2.5
    assert ApprovalService(load_policy("deadline_policies:instance")).deadline == 0.25
    assert ApprovalService(load_policy("deadline_policies:plain")).deadline == 30.0
    assert ApprovalService(load_policy("deadline_policies:slow"), deadline=7).deadline == 7.0  # explicit wins
    for bad in ("nan", "text"):
        with pytest.raises(PolicyFileError, match="deadline"):
            load_policy(f"deadline_policies:{bad}")


async def test_module_policy_deadline_applies_to_decisions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         autojump_clock: trio.testing.MockClock) -> None:
    (tmp_path / "sleepy_policy.py").write_text(
        "import trio\nasync def sleepy(request):\n    await trio.sleep(10)\nsleepy.deadline = 2\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    service = ApprovalService(load_policy("sleepy_policy:sleepy"))
    from dsh_orchestra.protocol import ApprovalRequestParams

    started = trio.current_time()
    result = await service.handle(ApprovalRequestParams(session_id="s", tool_name="bash"))
    assert result.outcome == REJECTED and trio.current_time() - started == pytest.approx(2.0)
    assert "deadline of 2 s" in (service.take(["s"])[0].error or "")


@pytest.mark.parametrize("body", ["raise RuntimeError('boom at import')\n", "def broken(:\n",
                                  "import no_such_module_anywhere\n", "x = 1 / 0\n"])
def test_a_policy_module_that_fails_to_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    name = f"failing_policy_{abs(hash(body))}"
    (tmp_path / f"{name}.py").write_text(body, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PolicyFileError, match="cannot import module") as caught:
        load_policy(f"{name}:decide")
    assert caught.value.parameter == "policy" and caught.value.value == f"{name}:decide"


@pytest.mark.parametrize("deadline", ["nan", "inf", "-inf", "0", "-1", "true", '"5"'])
def test_rules_file_deadline_must_be_a_finite_positive_number(deadline: str) -> None:
    import tomllib

    with pytest.raises(PolicyFileError, match="deadline"):
        parse_rules(tomllib.loads(f"deadline = {deadline}\n"), source="rules.toml")


def test_rules_file_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('default = "rejected"\n# caf\xe9\n'.encode("latin-1"))
    with pytest.raises(PolicyFileError, match=r"latin1\.toml.*not UTF-8"):
        load_policy(str(path))


@pytest.mark.parametrize(("elapsed", "error"), [
    (2.0, "policy took longer than its deadline of 1 s"),  # the regex bound ran out with the deadline
    (0.5, "policy raised TimeoutError: regex timed out"),  # a timeout of the policy's own, earlier
])
async def test_a_timeout_at_the_deadline_is_the_deadline(elapsed: float, error: str, mock_clock: trio.testing.MockClock) -> None:
    """A bounded match gives up just after the deadline it was bounded by; whether its
    TimeoutError or the cancellation reaches ``decide`` first, the record says the deadline."""
    from dsh_orchestra.approvals._service import decide

    def timed_out(request: ApprovalRequest) -> None:
        mock_clock.jump(elapsed)
        raise TimeoutError("regex timed out")

    decision, why = await decide(timed_out, ApprovalRequest(session_id="s", tool_name="bash", reason="x"), 1.0)
    assert decision is None and why == error

"""TOML rules files and ``load_policy("FILE" | "module:attr")``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_orchestra.approvals import (
    ALLOWED_ONCE,
    CANCELLED,
    REJECTED,
    ApprovalRequest,
    LoadedPolicy,
    PolicyFileError,
    load_policy,
    load_rules_file,
    parse_rules,
)
from dsh_orchestra.approvals._policies import call_policy

REPO = Path(__file__).resolve().parents[2]

RULES = """
default = "cancelled"
deadline = 2.5

[[rules]]
name = "no prod"
sessions = "prod-*"
outcome = "rejected"
note = "never in production"

[[rules]]
name = "read-only"
tools = ["read", "glob", "grep"]
outcome = "allowed-once"

[[rules]]
name = "tests may escalate"
tools = "bash"
reason = "^escalate sandbox to danger-full-access: run the tests"
outcome = "allowed-once"
budget = 1
"""


def req(tool: str, session: str = "s1", reason: str | None = None) -> ApprovalRequest:
    return ApprovalRequest(session_id=session, tool_name=tool, reason=reason)


async def test_a_rules_file_decides_in_order_with_its_default(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(RULES, encoding="utf-8")
    loaded = load_policy(str(path))
    assert isinstance(loaded, LoadedPolicy) and loaded.deadline == 2.5 and loaded.source == str(path)

    async def decide(request: ApprovalRequest) -> tuple[str, str]:
        decision = await call_policy(loaded, request)
        return decision.outcome, decision.rule

    assert await decide(req("read", "prod-1")) == (REJECTED, "no prod")
    assert await decide(req("grep")) == (ALLOWED_ONCE, "read-only")
    tests = "escalate sandbox to danger-full-access: run the tests"
    assert await decide(req("bash", reason=tests)) == (ALLOWED_ONCE, "tests may escalate")
    assert await decide(req("bash", reason=tests)) == (REJECTED, "tests may escalate (budget)")
    assert await decide(req("bash", "s2", reason=tests)) == (ALLOWED_ONCE, "tests may escalate")
    assert await decide(req("bash", reason="escalate sandbox to danger-full-access: rm -rf")) == (CANCELLED, "default")


async def test_without_a_default_nothing_matching_is_rejected() -> None:
    loaded = parse_rules({"rules": [{"tools": "read", "outcome": "allowed-once"}]})
    decision = await call_policy(loaded, req("bash"))
    assert (decision.outcome, decision.rule) == (REJECTED, "default")
    assert loaded.deadline is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rule": []}, "unknown top-level key"),
        ({"default": "allow"}, "default must be one of"),
        ({"deadline": 0}, "deadline must be a positive number"),
        ({"deadline": True}, "deadline must be a positive number"),
        ({"rules": {"name": "x"}}, "rules must be an array of tables"),
        ({"rules": [{"name": "x"}]}, "rule 'x': outcome is required"),
        ({"rules": [{"name": "x", "outcome": "yes"}]}, "rule 'x': outcome must be one of"),
        ({"rules": [{"name": "x", "outcome": "rejected", "tool": "bash"}]}, "unknown key"),
        ({"rules": [{"name": "x", "outcome": "rejected", "tools": []}]}, "tools must be a non-empty string"),
        ({"rules": [{"name": "x", "outcome": "rejected", "reason": "("}]}, "rule 'x'"),
        ({"rules": [{"name": "x", "outcome": "rejected", "budget": -1}]}, "budget must be an integer"),
        ({"rules": [{"name": "", "outcome": "rejected"}]}, "name must be a non-empty string"),
    ],
)
def test_rules_file_mistakes_are_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyFileError, match=message):
        parse_rules(data, source="p.toml")


def test_unreadable_or_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="cannot read policy file"):
        load_policy(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("default = ", encoding="utf-8")
    with pytest.raises(PolicyFileError, match="not valid TOML"):
        load_rules_file(bad)
    with pytest.raises(PolicyFileError, match="not of the form module:attr"):
        load_policy("no-such-thing")
    with pytest.raises(PolicyFileError):
        load_policy("")


async def test_load_policy_from_a_python_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_policies.py").write_text(
        "from dsh_orchestra.approvals import LoadedPolicy, allow, first_match, allow_tools\n"
        "async def mine(request):\n"
        "    return allow('mine') if request.tool_name == 'bash' else None\n"
        "loaded = LoadedPolicy(first_match(allow_tools('read')), deadline=4.0)\n"
        "NOT_CALLABLE = 3\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = load_policy("my_policies:mine")
    assert (await call_policy(mine, req("bash"))).rule == "mine"
    assert load_policy("my_policies:loaded").deadline == 4.0
    with pytest.raises(PolicyFileError, match="has no attribute 'missing'"):
        load_policy("my_policies:missing")
    with pytest.raises(PolicyFileError, match="not a callable policy"):
        load_policy("my_policies:NOT_CALLABLE")
    with pytest.raises(PolicyFileError, match="cannot import module"):
        load_policy("no_such_module_here:x")


@pytest.mark.parametrize("path", ["recipes/quickstart/policy.toml", "recipes/approvals/policy.toml"])
async def test_shipped_policies_load(path: str) -> None:
    loaded = load_policy(str(REPO / path))
    assert (await call_policy(loaded, req("read"))).outcome == ALLOWED_ONCE
    assert (await call_policy(loaded, req("bash"))).outcome == REJECTED


def test_every_problem_of_a_rule_is_named_at_once() -> None:
    """The converter checks the whole table: unknown keys first, then each bad key, in one message."""
    with pytest.raises(PolicyFileError) as caught:
        parse_rules({"rules": [{"name": "x", "outcome": "nope", "tools": 3, "extra": 1}]}, source="p.toml")
    assert str(caught.value) == (
        "p.toml: rule 'x': unknown key(s) ['extra']; expected ['budget', 'name', 'note', 'outcome', 'reason', "
        "'sessions', 'tools']; outcome must be one of allowed-once, rejected, cancelled, not 'nope'; tools must be "
        "a non-empty string or list of non-empty strings, not 3"
    )

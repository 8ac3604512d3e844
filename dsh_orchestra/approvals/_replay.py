"""``replay``: decide recorded approvals again with a new policy and report what would change.

Its own module: it needs both the audit records (``_audit``) and the live decision path
(``_service``), and neither of those needs the other's half.
"""

from __future__ import annotations

from typing import Any, Iterable

import attrs

from ._model import REJECTED, DecisionRecord, Policy
from ._service import DEFAULT_DEADLINE, decide


@attrs.frozen(kw_only=True)
class ReplayChange:
    """One recorded decision that the new policy decides differently."""

    record: DecisionRecord
    new_outcome: str
    new_rule: str
    new_error: str | None = None


@attrs.frozen(kw_only=True)
class ReplayReport:
    """What ``replay`` found: how many decisions, and which would change."""

    total: int
    changed: tuple[ReplayChange, ...]

    @property
    def unchanged(self) -> int:
        """How many decisions the new policy decides the same way."""
        return self.total - len(self.changed)

    def to_text(self, *, source: str = "the audit log", policy: str = "the new policy") -> str:
        """A readable report: one summary line, then one line per decision that would change."""
        lines = [
            f"replayed {self.total} decision{'s' if self.total != 1 else ''} from {source} against {policy}: "
            f"{len(self.changed)} would change, {self.unchanged} unchanged"
        ]
        for change in self.changed:
            r = change.record
            where = f"session {r.session_id} tool {r.tool_name}" + (f" call {r.call_id}" if r.call_id else "")
            line = (f"  {r.time}  {where}: {r.outcome} (rule {r.rule!r}) -> "
                    f"{change.new_outcome} (rule {change.new_rule!r})")
            if change.new_error:
                line += f" [error: {change.new_error}]"
            lines.append(line)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "total": self.total,
            "changed": len(self.changed),
            "unchanged": self.unchanged,
            "changes": [
                {
                    "time": c.record.time,
                    "runtime": c.record.runtime,
                    "session": c.record.session_id,
                    "tool": c.record.tool_name,
                    "call_id": c.record.call_id,
                    "old_outcome": c.record.outcome,
                    "old_rule": c.record.rule,
                    "new_outcome": c.new_outcome,
                    "new_rule": c.new_rule,
                    "new_error": c.new_error,
                }
                for c in self.changed
            ],
        }


async def replay(records: Iterable[DecisionRecord], policy: Policy, *, deadline: float | None = None) -> ReplayReport:
    """Run ``policy`` over recorded decisions (in order) and report which would change.

    Each decision gets the same treatment as live: ``deadline`` (default: the policy's own, else
    ``DEFAULT_DEADLINE``), and a policy that raises, returns something invalid or takes too long
    counts as ``rejected`` (fail closed), with the error in the change.
    """
    given = deadline if deadline is not None else getattr(policy, "deadline", None)
    limit = float(given) if given is not None else DEFAULT_DEADLINE
    changed = []
    total = 0
    for record in records:
        if record.rule == "refused" and record.via == "relay":
            continue  # refused before any policy was asked: nothing to decide again
        total += 1
        decision, error = await decide(policy, record.request(), limit)
        outcome = decision.outcome if decision is not None else REJECTED
        rule = decision.rule if decision is not None else "fail-closed"
        if outcome != record.outcome:
            changed.append(ReplayChange(record=record, new_outcome=outcome, new_rule=rule, new_error=error))
    return ReplayReport(total=total, changed=tuple(changed))

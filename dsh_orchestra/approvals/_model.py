"""What a policy sees and returns: ApprovalRequest in, Decision out; DecisionRecord for audit.

Imports only the protocol layer.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Literal, Union

import attrs

Outcome = Literal["allowed-once", "rejected", "cancelled"]
ALLOWED_ONCE: Outcome = "allowed-once"
REJECTED: Outcome = "rejected"
CANCELLED: Outcome = "cancelled"
OUTCOMES: tuple[Outcome, ...] = (ALLOWED_ONCE, REJECTED, CANCELLED)


@attrs.frozen(kw_only=True)
class ApprovalRequest:
    """One ``approval/request`` from a runtime, as a policy sees it."""

    session_id: str
    tool_name: str
    call_id: str | None = None
    reason: str | None = None
    runtime: str = ""


def _outcome(instance: Any, attribute: Any, value: Any) -> None:
    if value not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {value!r}")


@attrs.frozen(kw_only=True)
class Decision:
    """A policy's answer: the outcome, the name of the rule that decided, a short note.

    Only ``allowed-once`` approves, and it approves one operation.
    """

    outcome: Outcome = attrs.field(validator=_outcome)
    rule: str = attrs.field(default="policy", validator=attrs.validators.instance_of(str))
    note: str = attrs.field(default="", validator=attrs.validators.instance_of(str))

    @property
    def allowed(self) -> bool:
        """True only for ``allowed-once``."""
        return self.outcome == ALLOWED_ONCE


def allow(rule: str = "allow", note: str = "") -> Decision:
    """An ``allowed-once`` decision."""
    return Decision(outcome=ALLOWED_ONCE, rule=rule, note=note)


def reject(rule: str = "reject", note: str = "") -> Decision:
    """A ``rejected`` decision."""
    return Decision(outcome=REJECTED, rule=rule, note=note)


PolicyResult = Union[Decision, None, Awaitable[Union[Decision, None]]]
Policy = Callable[[ApprovalRequest], Any]
"""Any sync or async callable taking an ApprovalRequest and returning a Decision.

Returning None means "no rule matched": the default (rejected) applies.
"""


@attrs.frozen(kw_only=True)
class DecisionRecord:
    """One decision as audited: what was asked, what was answered, by which rule, how fast."""

    time: str
    runtime: str
    session_id: str
    tool_name: str
    call_id: str | None
    reason: str | None
    outcome: Outcome
    rule: str
    note: str
    latency_s: float
    error: str | None = None
    via: str = "approval/request"
    time_monotonic: float = attrs.field(default=0.0, eq=False)

    def request(self) -> ApprovalRequest:
        """The request this record answered (for replay)."""
        return ApprovalRequest(
            session_id=self.session_id,
            tool_name=self.tool_name,
            call_id=self.call_id,
            reason=self.reason,
            runtime=self.runtime,
        )

    def to_json(self) -> dict[str, Any]:
        """The audit-log line (no monotonic clock); ``via`` names the channel that asked."""
        return {
            "time": self.time,
            "runtime": self.runtime,
            "session": self.session_id,
            "tool": self.tool_name,
            "call_id": self.call_id,
            "reason": self.reason,
            "outcome": self.outcome,
            "rule": self.rule,
            "note": self.note,
            "latency_s": round(self.latency_s, 6),
            "error": self.error,
            "via": self.via,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DecisionRecord:
        """Read one audit-log line back.

        Raises:
            KeyError / TypeError / ValueError: the line is not an audit record.
        """
        if not isinstance(raw, dict):
            raise TypeError(f"an audit record is a JSON object, not {type(raw).__name__}")
        if raw.get("outcome") not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {raw.get('outcome')!r}")
        for key in ("call_id", "reason", "error"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise TypeError(f"{key} must be a string or null, not {type(raw[key]).__name__}")
        return cls(
            time=str(raw["time"]),
            runtime=str(raw.get("runtime", "")),
            session_id=str(raw["session"]),
            tool_name=str(raw["tool"]),
            call_id=raw.get("call_id"),
            reason=raw.get("reason"),
            outcome=raw["outcome"],
            rule=str(raw.get("rule", "")),
            note=str(raw.get("note", "")),
            latency_s=float(raw.get("latency_s", 0.0)),
            error=raw.get("error"),
            via=str(raw.get("via", "approval/request")),
        )

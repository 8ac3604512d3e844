"""ApprovalService: answers ``approval/request`` with a policy, fails closed, audits every decision.

Fail closed: a policy that raises, returns something invalid, or misses its deadline yields
``rejected`` with the error recorded; a request still pending when the connection goes away
is recorded as rejected and never answered. Imports only the protocol layer (and trio).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from typing import Any, Iterable

import trio

from ..protocol import ApprovalRequestParams, ApprovalRequestResult
from ._audit import AuditLog, redact_text
from ._model import REJECTED, ApprovalRequest, Decision, DecisionRecord, Policy
from ._policies import call_policy

log = logging.getLogger("dsh_orchestra.approvals")

DEFAULT_DEADLINE = 30.0


def coerce_decision(value: Any) -> tuple[Decision | None, str | None]:
    """A policy's return value as (decision, error); None means "no rule matched: rejected"."""
    if isinstance(value, Decision):
        return value, None
    if value is None:
        return Decision(outcome=REJECTED, rule="default", note="no rule matched"), None
    return None, f"policy returned {type(value).__name__} {value!r}, not a Decision"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ApprovalService:
    """Decides one runtime's approval requests with ``policy``.

    ``deadline`` bounds async policies (a sync policy runs inline and cannot be interrupted).
    Records are kept per session until taken (``take``) and appended to ``audit`` at once.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        runtime: str = "",
        audit: AuditLog | None = None,
        deadline: float | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        self.policy = policy
        self.runtime = runtime
        self.audit = audit
        given = deadline if deadline is not None else getattr(policy, "deadline", None)
        self.deadline = float(given) if given is not None else DEFAULT_DEADLINE
        self.secrets = [s for s in secrets if s]
        if audit is not None:
            audit.add_secrets(self.secrets)
        self._by_session: dict[str, list[DecisionRecord]] = defaultdict(list)
        self.pending = 0
        self.decided = 0

    async def handle(self, params: ApprovalRequestParams) -> ApprovalRequestResult:
        """The ``approval/request`` handler.

        Cancellation (the connection closed or shut down): recorded as rejected, nothing sent.
        """
        request = ApprovalRequest(
            session_id=params.session_id,
            tool_name=params.tool_name,
            call_id=params.call_id,
            reason=params.reason,
            runtime=self.runtime,
        )
        started = trio.current_time()
        decision: Decision | None = None
        error: str | None = "the connection closed before the decision was sent"
        self.pending += 1
        try:
            decision, error = await self._decide(request)
        finally:
            self.pending -= 1
            final = decision or Decision(outcome=REJECTED, rule="fail-closed", note="failed closed")
            self._record(request, final, trio.current_time() - started, error, started)
        return ApprovalRequestResult(outcome=final.outcome)

    async def _decide(self, request: ApprovalRequest) -> tuple[Decision | None, str | None]:
        try:
            with trio.move_on_after(self.deadline) as scope:
                value = await call_policy(self.policy, request)
        except Exception as exc:  # noqa: BLE001 (fail closed; the error is recorded)
            log.warning("approval policy raised for %s/%s: %r", request.session_id, request.tool_name, exc)
            return None, f"policy raised {type(exc).__name__}: {exc}"
        if scope.cancelled_caught:
            return None, f"policy took longer than its deadline of {self.deadline:g} s"
        return coerce_decision(value)

    def _record(self, request: ApprovalRequest, decision: Decision, latency: float, error: str | None, started: float) -> None:
        record = DecisionRecord(
            time=_now(),
            runtime=self.runtime,
            session_id=request.session_id,
            tool_name=request.tool_name,
            call_id=request.call_id,
            reason=redact_text(request.reason, self.secrets),
            outcome=decision.outcome,
            rule=decision.rule,
            note=decision.note,
            latency_s=latency,
            error=redact_text(error, self.secrets),
            time_monotonic=started,
        )
        self.decided += 1
        self._by_session[request.session_id].append(record)
        if self.audit is not None:
            try:
                self.audit.write(record)
            except OSError as exc:
                log.error("cannot write the approval audit log: %s", exc)
        log.info(
            "approval %s for %s on session %s by rule %r",
            record.outcome, record.tool_name, record.session_id, record.rule,
        )

    def take(self, session_ids: Iterable[str]) -> tuple[DecisionRecord, ...]:
        """Remove and return the records of these sessions, oldest first."""
        out: list[DecisionRecord] = []
        for session_id in session_ids:
            out.extend(self._by_session.pop(session_id, ()))
        out.sort(key=lambda r: r.time_monotonic)
        return tuple(out)

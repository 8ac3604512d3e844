"""ApprovalService: answers ``approval/request`` with a policy, fails closed, audits every decision.

Fail closed: a policy that raises, returns something invalid, or misses its deadline yields
``rejected`` with the error recorded; a request still pending when the connection goes away
is recorded as rejected and never answered; once ``close()`` was called (the runtime is
shutting down) every pending and every later request is rejected without asking the policy.
Nothing is cached: each request is decided on its own. Imports only the protocol layer (and trio).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from functools import partial
from typing import Any, Iterable

import trio

from .._params import Param, ParamValueError
from .._records import take_by_session
from .._redact import Redactor
from ..protocol import ApprovalRequestParams, ApprovalRequestResult
from ._audit import AuditLog
from ._model import REJECTED, ApprovalRequest, Decision, DecisionRecord, Policy
from ._policies import USER_ERRORS, call_policy

log = logging.getLogger("dsh_orchestra.approvals")

DEFAULT_DEADLINE = 30.0
"""Seconds a policy may take (per request) unless the policy or the service says otherwise."""

VIA_RPC = "approval/request"
"""``DecisionRecord.via`` of a request that came as a JSON-RPC ``approval/request``."""

REFUSED_RULE = "refused"
"""``DecisionRecord.rule`` of a request refused before any policy was asked (a relay
connection from a process that is not the runtime, a frame that does not parse)."""

_CLOSED_ERROR = "the connection closed before the decision was sent"


def coerce_decision(value: Any) -> tuple[Decision | None, str | None]:
    """A policy's return value as (decision, error); None means "no rule matched: rejected"."""
    if isinstance(value, Decision):
        return value, None
    if value is None:
        return Decision(outcome=REJECTED, rule="default", note="no rule matched"), None
    return None, f"policy returned {type(value).__name__} {value!r}, not a Decision"


async def decide(policy: Policy, request: ApprovalRequest, deadline: float) -> tuple[Decision | None, str | None]:
    """Ask ``policy`` about ``request`` within ``deadline`` seconds: (decision, error).

    ``decision`` is None when the policy failed (raised, ``SystemExit`` and ``KeyboardInterrupt``
    included; returned something invalid; took too long); ``error`` then says why and the
    caller rejects. An async policy is cancelled at the deadline; a sync one runs in a worker
    thread that is abandoned at the deadline (``call_policy``).
    """
    started = trio.current_time()
    try:
        with trio.move_on_after(deadline) as scope:
            value = await call_policy(policy, request)
    except USER_ERRORS as exc:  # fail closed; the error is recorded
        if isinstance(exc, TimeoutError) and trio.current_time() - started >= deadline:
            # a bounded regex gives up just after the deadline it was bounded by; when the
            # thread's timeout reaches us before the cancellation does, it is still the deadline
            return None, f"policy took longer than its deadline of {deadline:g} s"
        log.warning("approval policy raised for %s/%s: %r", request.session_id, request.tool_name, exc)
        return None, f"policy raised {type(exc).__name__}: {exc}" if str(exc) else f"policy raised {type(exc).__name__}"
    if scope.cancelled_caught or trio.current_time() - started > deadline:
        return None, f"policy took longer than its deadline of {deadline:g} s"
    return coerce_decision(value)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ApprovalService:
    """Decides one runtime's approval requests with ``policy``.

    ``deadline`` bounds each decision (default: the policy's own ``deadline`` attribute, as a
    rules file sets it, else ``DEFAULT_DEADLINE``). Records are kept per session until taken
    (``take``) and appended to ``audit`` at once.
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
        if not self.deadline > 0:
            raise ParamValueError(Param("deadline", given, spelled="deadline"), f" must be a positive number of seconds, not {given!r}")
        self._redactor = Redactor(secrets)
        self.secrets = self._redactor.secrets
        if audit is not None:
            audit.add_secrets(self.secrets)
        self._by_session: dict[str, list[DecisionRecord]] = defaultdict(list)
        self._scopes: set[trio.CancelScope] = set()
        self.closed = False
        self.pending = 0
        self.decided = 0

    async def handle(self, params: ApprovalRequestParams, *, via: str = VIA_RPC) -> ApprovalRequestResult:
        """Decide one request (the ``approval/request`` handler; the relay calls it too).

        Cancellation (the connection closed, or the asker hung up): recorded as rejected, and
        the Cancelled propagates, so nothing is sent. After ``close()`` the answer is
        ``rejected`` without asking the policy.
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
        error: str | None = _CLOSED_ERROR
        self.pending += 1
        try:
            if self.closed:
                error = "the runtime was closing; rejected without asking the policy"
            else:
                with trio.CancelScope() as scope:
                    self._scopes.add(scope)
                    try:
                        decision, error = await decide(self.policy, request, self.deadline)
                    finally:
                        self._scopes.discard(scope)
                if scope.cancel_called:  # close(): whatever the policy said, reject
                    decision, error = None, "the runtime was closing while the policy decided"
        finally:
            self.pending -= 1
            final = decision or Decision(outcome=REJECTED, rule="fail-closed", note="failed closed")
            self._record(request, final, trio.current_time() - started, error, started, via)
        return ApprovalRequestResult(outcome=final.outcome)

    def close(self) -> None:
        """Reject every pending decision now and every later request (the runtime is closing).

        Idempotent. Pending handlers answer ``rejected`` (when their connection still listens).
        """
        self.closed = True
        for scope in list(self._scopes):
            scope.cancel(reason="approval service closed")

    def record_refused(self, error: str, *, via: str, session_id: str = "", tool_name: str = "") -> None:
        """Audit a request refused before the policy was asked (rule ``refused``, ``rejected``).

        Such records are written to the audit log only: no ``TurnResult`` collects them and
        ``replay`` skips them (no policy decided them).
        """
        request = ApprovalRequest(session_id=session_id, tool_name=tool_name, call_id=None, reason=None, runtime=self.runtime)
        decision = Decision(outcome=REJECTED, rule=REFUSED_RULE, note="refused before asking the policy")
        self._record(request, decision, 0.0, error, trio.current_time(), via, keep=False)

    def _record(
        self, request: ApprovalRequest, decision: Decision, latency: float, error: str | None, started: float, via: str,
        *, keep: bool = True,
    ) -> None:
        plain, prose = self._redactor.optional, partial(self._redactor.optional, patterns=True)
        record = DecisionRecord(
            time=_now(),
            runtime=plain(self.runtime) or "",
            session_id=plain(request.session_id) or "",
            tool_name=plain(request.tool_name) or "",
            call_id=plain(request.call_id),
            reason=prose(request.reason),
            outcome=decision.outcome,
            rule=plain(decision.rule) or "",
            note=prose(decision.note) or "",
            latency_s=latency,
            error=prose(error),
            via=via,
            time_monotonic=started,
        )
        self.decided += keep
        if keep:
            self._by_session[request.session_id].append(record)
        if self.audit is not None:
            try:
                self.audit.write(record)
            except (OSError, ValueError) as exc:  # ValueError: written after the log was closed
                log.error("cannot write the approval audit log: %s", exc)
        log.info(
            "approval %s for %s on session %s by rule %r%s",
            record.outcome, record.tool_name, record.session_id, record.rule,
            f" ({record.error})" if record.error else "",
        )

    def take(self, session_ids: Iterable[str], since: float | None = None) -> tuple[DecisionRecord, ...]:
        """Remove and return the records of these sessions, oldest first.

        With ``since`` (a ``trio.current_time()`` value) only requests that arrived at or after
        it are returned; older records of these sessions are dropped (they belong to no
        ``run`` that is still collecting).
        """
        return take_by_session(self._by_session, session_ids, since)

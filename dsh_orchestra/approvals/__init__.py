"""Approval policies for unattended runs: built-ins, combinators, rules files, audit, replay.

Imports only the protocol layer. Fails closed: anything but a valid decision is ``rejected``.
"""

from .._public import publish as _publish
from ._audit import AuditLog as AuditLog, read_audit as read_audit, redact_text as redact_text
from ._replay import ReplayChange as ReplayChange, ReplayReport as ReplayReport, replay as replay
from ._model import (
    ALLOWED_ONCE as ALLOWED_ONCE,
    CANCELLED as CANCELLED,
    OUTCOMES as OUTCOMES,
    REJECTED as REJECTED,
    ApprovalRequest as ApprovalRequest,
    Decision as Decision,
    DecisionRecord as DecisionRecord,
    Outcome as Outcome,
    Policy as Policy,
    allow as allow,
    reject as reject,
)
from ._policies import (
    Rule as Rule,
    all_of as all_of,
    allow_tools as allow_tools,
    any_of as any_of,
    ask_terminal as ask_terminal,
    budget as budget,
    by_session as by_session,
    callback as callback,
    deny_tools as deny_tools,
    first_match as first_match,
    reason_matches as reason_matches,
)
from ._rules import (
    LoadedPolicy as LoadedPolicy,
    PolicyFileError as PolicyFileError,
    load_policy as load_policy,
    load_rules_file as load_rules_file,
    parse_rules as parse_rules,
)
from ._service import (
    DEFAULT_DEADLINE as DEFAULT_DEADLINE,
    ApprovalService as ApprovalService,
    coerce_decision as coerce_decision,
    decide as decide,
)

__all__ = _publish(globals())

"""Routing keys of notifications: which session a notification belongs to, read from plain params.

Pure: no trio, no I/O. The connection delivers params as plain dicts (decoding every
notification into attrs classes costs more than everything else on the reader's path, see
docs/benchmarks.md), so the session layer reads the few members it routes on through these
helpers, whose wire names come from the params classes through the converter's naming rule.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._converter import camel
from ._wire import SUBAGENT_FINISHED, SUBAGENT_STARTED, SessionEventParams, SubagentStartedParams

JsonObject = dict[str, Any]

SESSION_ID = camel(attrs.fields(SessionEventParams).session_id.name)
"""``sessionId``: the session of ``session.event``, ``session.status``, ``session.query.completed``."""
PARENT_SESSION_ID = camel(attrs.fields(SubagentStartedParams).parent_session_id.name)
CHILD_SESSION_ID = camel(attrs.fields(SubagentStartedParams).child_session_id.name)

EDGE_METHODS = frozenset((SUBAGENT_STARTED, SUBAGENT_FINISHED))
"""Notifications that name a parent/child edge instead of one session."""


def _text(params: JsonObject, key: str) -> str | None:
    value = params.get(key)
    return value if type(value) is str or isinstance(value, str) else None


def session_of(params: JsonObject) -> str | None:
    """The ``sessionId`` of a session notification's params, None when it is not a string."""
    return _text(params, SESSION_ID)


def parent_of(params: JsonObject) -> str | None:
    """The ``parentSessionId`` of a ``subagent.*`` notification's params."""
    return _text(params, PARENT_SESSION_ID)


def child_of(params: JsonObject) -> str | None:
    """The ``childSessionId`` of a ``subagent.*`` notification's params."""
    return _text(params, CHILD_SESSION_ID)


def routing_key(method: str, params: JsonObject) -> tuple[str | None, str | None]:
    """(session, child): where a notification is routed. ``subagent.*`` goes to its parent and
    names its child; every other notification goes to its ``sessionId`` (child None)."""
    if method in EDGE_METHODS:
        return _text(params, PARENT_SESSION_ID), _text(params, CHILD_SESSION_ID)
    return _text(params, SESSION_ID), None

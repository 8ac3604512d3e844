"""Routing keys of notifications: which session a notification belongs to, read from plain params.

Pure: no trio, no I/O. The connection delivers params as plain dicts (decoding every
notification into attrs classes costs more than everything else on the reader's path, see
docs/benchmarks.md), so the session layer reads the few members it routes on through these
helpers, whose wire names come from the params classes through the converter's naming rule.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from ._converter import camel
from ._wire import SESSION_EVENT, SUBAGENT_FINISHED, SUBAGENT_STARTED, SessionEventParams, SubagentStartedParams

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


EVENT = camel(attrs.fields(SessionEventParams).event.name)
"""``event``: the event object of a ``session.event`` notification's params."""
_EVENT_PREFIX = b'{"jsonrpc":"2.0","method":"' + SESSION_EVENT.encode() + b'","params":{"' + SESSION_ID.encode() + b'":'
_EVENT_KEY = b',"' + EVENT.encode() + b'":'


def event_json(raw: bytes | None, params: JsonObject) -> bytes | None:
    """The ``event`` member of a ``session.event`` frame as the wire's own JSON text, sliced
    from ``raw`` (the frame's line, ``Notification.raw``) without decoding or encoding it.

    None when the frame is not laid out as the runtime writes it: compact, members in the
    order ``jsonrpc``, ``method``, ``params`` and, in params, ``sessionId``, ``event`` and
    nothing else (``params`` is the decoded params, which this checks too); the caller then
    encodes ``params["event"]`` itself. The text is the peer's: compact JSON when the peer
    writes compact JSON (the runtime does), with its escapes and number forms. A frame with
    members after ``params`` (which JSON-RPC does not have) cannot be told apart cheaply;
    its slice is never valid JSON (the event's text followed by ``}``), so decoding it fails
    rather than giving something else.
    """
    if raw is None or len(params) != 2:
        return None
    session = params.get(SESSION_ID)
    event = params.get(EVENT)
    if type(session) is not str or type(event) is not dict:
        return None
    start = len(_EVENT_PREFIX)
    if not raw.startswith(_EVENT_PREFIX) or raw[-3:] != b"}}}":
        return None
    quoted = orjson.dumps(session)
    if not raw.startswith(quoted, start):
        return None
    start += len(quoted)
    if not raw.startswith(_EVENT_KEY, start):
        return None
    start += len(_EVENT_KEY)
    if raw[start:start + 1] != b"{":
        return None
    return raw[start:-2]

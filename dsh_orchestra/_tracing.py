"""Optional OpenTelemetry spans: batch items, workflow steps, turns and approval decisions.

Everything here is a no-op unless the ``opentelemetry`` API is importable (extra ``otel``)
AND tracing is enabled, by :func:`enable_tracing` or the environment variable
``DSH_ORCHESTRA_OTEL=1``. The API is imported lazily, on first use while enabled; the core
never imports it otherwise. Spans go to whatever tracer provider the application installed.

Nesting: an item's span contains its turns' spans through the task's contextvars. Approval
decisions run in handler tasks of the connection's nursery, where the turn's context does not
flow, so a turn registers its span under its session id while it runs and the approval span
takes the span registered for its root session as its parent explicitly.

Imports nothing from dsh_orchestra but ``_logging``.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Coroutine, Iterator, Mapping, ParamSpec, TypeVar

from ._logging import FIELDS, log_context, session_context

ENV = "DSH_ORCHESTRA_OTEL"
PREFIX = "dsh_orchestra."
TRACER_NAME = "dsh_orchestra"

ITEM_SPAN = "dsh_orchestra.batch.item"
STEP_SPAN = "dsh_orchestra.workflow.step"
TURN_SPAN = "dsh_orchestra.session.turn"
APPROVAL_SPAN = "dsh_orchestra.approval"

P = ParamSpec("P")
R = TypeVar("R")

_enabled: bool | None = None  # None: follow the environment variable
_provider: Any = None  # a TracerProvider given to enable_tracing; None: the global one
_api: Any = None  # the opentelemetry.trace module once imported; False when it is missing
_SESSION_SPANS: dict[str, list[Any]] = {}  # session id -> OTel contexts of its open turns


class NoSpan:
    """What ``span`` yields when tracing is off: accepts the span calls and does nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        """Ignored."""

    def is_recording(self) -> bool:
        """Always False."""
        return False


NO_SPAN = NoSpan()


def enable_tracing(enabled: bool = True, *, tracer_provider: Any = None) -> bool:
    """Turn spans on (or off); returns whether spans will be recorded (the API is importable).

    ``tracer_provider``: record with this provider instead of the global one
    (``opentelemetry.trace.set_tracer_provider``); ``enable_tracing(False)`` forgets it.
    """
    global _enabled, _provider
    _enabled = enabled
    _provider = tracer_provider if enabled else None
    return tracing_enabled()


def tracing_enabled() -> bool:
    """True when spans are recorded: enabled (call or environment) and the API importable."""
    wanted = _enabled if _enabled is not None else os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return wanted and _trace_api() is not None


def _trace_api() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _api = False
        else:
            _api = trace
    return _api or None


def _attribute(value: Any) -> Any:
    return value if isinstance(value, (str, bool, int, float)) else str(value)


@contextmanager
def span(
    name: str,
    *,
    parent_session: str | None = None,
    bind_session: str | None = None,
    **attributes: Any,
) -> Iterator[Any]:
    """A span around the block (the current span inside it); a no-op unless tracing is on.

    ``attributes`` become ``dsh_orchestra.<key>`` span attributes (None values dropped).
    ``parent_session``: the parent is the span of that session's running turn (registered by
    ``bind_session``), when there is one, instead of the current span. ``bind_session``:
    register this span for that session while the block runs. Exceptions leaving the block
    are recorded on the span and set its status to error.
    """
    trace = _trace_api() if tracing_enabled() else None
    if trace is None:
        yield NO_SPAN
        return
    parent = None
    if parent_session is not None:
        entries = _SESSION_SPANS.get(parent_session)
        parent = entries[-1] if entries else None
    tracer = _provider.get_tracer(TRACER_NAME) if _provider is not None else trace.get_tracer(TRACER_NAME)
    values = {PREFIX + key: _attribute(value) for key, value in attributes.items() if value is not None}
    with tracer.start_as_current_span(name, context=parent, attributes=values) as current:
        if bind_session is None:
            yield current
            return
        context = trace.set_span_in_context(current)
        _SESSION_SPANS.setdefault(bind_session, []).append(context)
        try:
            yield current
        finally:
            entries = _SESSION_SPANS.get(bind_session, [])
            for index in range(len(entries) - 1, -1, -1):
                if entries[index] is context:
                    del entries[index]
                    break
            if not entries:
                _SESSION_SPANS.pop(bind_session, None)


def observed(
    name: str,
    fields: Callable[..., Mapping[str, Any]],
    *,
    bind_session: bool = False,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate an async function: run it in a log context and a span.

    ``fields(*args, **kwargs)`` gives the attributes; its ``runtime``/``session``/``item``
    also go to the log context. ``bind_session``: the span is registered for its ``session``
    (a turn, so that approval spans nest under it).
    """

    def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(function)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            values = dict(fields(*args, **kwargs))
            bound = values.get("session") if bind_session else None
            with log_context(**{k: values[k] for k in FIELDS if k in values}), span(name, bind_session=bound, **values):
                return await function(*args, **kwargs)

        return wrapper

    return decorate


def observed_approvals(
    handle: Callable[[Any], Awaitable[R]],
    *,
    runtime: str,
    root_of: Callable[[str], str] = lambda session: session,
) -> Callable[[Any], Coroutine[Any, Any, R]]:
    """Wrap an ``approval/request`` handler: log context and a span per decision.

    The request's ``session_id`` may be a subagent's: ``root_of`` maps it to the root
    session whose turn is running, whose log fields (the batch item) and span it inherits.
    The span gets the ``outcome`` of the result when there is one.
    """

    @functools.wraps(handle)
    async def traced(params: Any) -> R:
        session = str(params.session_id)
        root = root_of(session)
        fields = {**session_context(root), "runtime": runtime, "session": session}
        with log_context(**fields), span(
            APPROVAL_SPAN,
            parent_session=root,
            runtime=runtime,
            session=session,
            root_session=root if root != session else None,
            item=fields.get("item"),
            tool=getattr(params, "tool_name", None),
            call_id=getattr(params, "call_id", None),
        ) as current:
            result = await handle(params)
            outcome = getattr(result, "outcome", None)
            if outcome is not None:
                current.set_attribute(PREFIX + "outcome", str(outcome))
            return result

    return traced


def _turn_fields(session: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"runtime": session.runtime.name, "session": session.id}


observed_turn = observed(TURN_SPAN, _turn_fields, bind_session=True)
"""Decorates ``Session.run`` and ``Session.run_query``: the turn's log context and span."""

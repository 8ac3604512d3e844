"""Optional OpenTelemetry spans: batch items, workflow steps, turns and approval decisions.

Everything here is a no-op unless the ``opentelemetry`` API is importable (extra ``otel``)
AND tracing is enabled, by :func:`enable_tracing` or the environment variable
``DSH_ORCHESTRA_OTEL=1``. The API is imported lazily, on first use while enabled; the core
never imports it otherwise. Spans go to whatever tracer provider the application installed.

Nesting: an item's span contains its turns' spans through the task's contextvars. Approval
decisions run in handler tasks of the connection's nursery, where the turn's context does not
flow, so a turn binds its span (and log fields) in its runtime's ``SessionContexts`` while it
runs, and the approval span takes the one bound for its root session on the same runtime as
its parent explicitly. Nothing is keyed by bare session ids process-wide.

Imports nothing from dsh_orchestra but ``_logging``.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Coroutine, Iterator, Mapping, ParamSpec, TypeVar

from ._logging import SessionContexts, enter_log_context, exit_log_context, log_context

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


_ENVIRON = os.environ
_ENVIRON_DATA: Any = getattr(os.environ, "_data", None)  # CPython's dict behind os.environ
_ENV_KEY: Any = os.environ.encodekey(ENV) if _ENVIRON_DATA is not None and hasattr(os.environ, "encodekey") else None


def _env_value() -> str:
    """``os.environ.get(ENV, "")``, read on every call (it is checked for every item and turn):
    a missing key costs ``os.environ.get`` two exceptions, the dict behind it one lookup."""
    if _ENV_KEY is None or os.environ is not _ENVIRON:
        return os.environ.get(ENV, "")
    raw = _ENVIRON_DATA.get(_ENV_KEY)
    return "" if raw is None else str(os.environ.decodevalue(raw))


def tracing_enabled() -> bool:
    """True when spans are recorded: enabled (call or environment) and the API importable."""
    wanted = _enabled if _enabled is not None else _env_value().strip().lower() in ("1", "true", "yes", "on")
    return wanted and _trace_api() is not None


def missing_api_warning() -> str | None:
    """What to say when the environment asks for spans (``DSH_ORCHESTRA_OTEL=1``) but the
    OpenTelemetry API is not installed (the ``otel`` extra); None otherwise."""
    if _env_value().strip().lower() in ("1", "true", "yes", "on") and _trace_api() is None:
        return (f"{ENV}={_env_value().strip()} but OpenTelemetry is not installed: pip install 'dsh-orchestra[otel]'; "
                "no spans are recorded")
    return None


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
def span(name: str, *, parent: Any = None, **attributes: Any) -> Iterator[Any]:
    """A span around the block (the current span inside it); a no-op unless tracing is on.

    ``attributes`` become ``dsh_orchestra.<key>`` span attributes (None values dropped).
    ``parent``: an OpenTelemetry context to parent the span on (see ``trace_context``)
    instead of the current span. Exceptions leaving the block are recorded on the span and
    set its status to error.
    """
    trace = _trace_api() if tracing_enabled() else None
    if trace is None:
        yield NO_SPAN
        return
    tracer = _provider.get_tracer(TRACER_NAME) if _provider is not None else trace.get_tracer(TRACER_NAME)
    values = {PREFIX + key: _attribute(value) for key, value in attributes.items() if value is not None}
    with tracer.start_as_current_span(name, context=parent, attributes=values) as current:
        yield current


def trace_context(current: Any) -> Any:
    """The OpenTelemetry context holding span ``current`` (None for NO_SPAN)."""
    if current is NO_SPAN:
        return None
    trace = _trace_api()
    return trace.set_span_in_context(current) if trace is not None else None


def observed(
    name: str,
    fields: Callable[..., Mapping[str, Any]],
    *,
    contexts: Callable[..., SessionContexts | None] | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate an async function: run it in a log context and a span.

    ``fields(*args, **kwargs)`` gives the attributes; its ``runtime``/``session``/``item``
    also go to the log context. ``contexts(*args, **kwargs)``: the SessionContexts of the
    runtime that owns ``session``, where the log fields and the span are bound while the
    function runs (a turn, so that approval records and spans find it).
    """

    def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        # Written out without context managers: it wraps every turn, and each generator-based
        # one costs a frame and an object for as long as the turn runs (docs/benchmarks.md).
        @functools.wraps(function)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            values = fields(*args, **kwargs)
            registry = contexts(*args, **kwargs) if contexts is not None else None
            session = values.get("session") if registry is not None else None
            token, merged = enter_log_context(values)
            try:
                scope = span(name, **values) if tracing_enabled() else None
                current = scope.__enter__() if scope is not None else NO_SPAN
                try:
                    entry = None
                    if registry is not None and session is not None:
                        entry = registry.push(str(session), merged, trace_context(current))
                    try:
                        return await function(*args, **kwargs)
                    finally:
                        if entry is not None:
                            assert registry is not None
                            registry.pop(str(session), entry)
                except BaseException as exc:
                    closing, scope = scope, None
                    if closing is not None:
                        closing.__exit__(type(exc), exc, exc.__traceback__)  # records it; never suppresses
                    raise
                finally:
                    if scope is not None:
                        scope.__exit__(None, None, None)
            finally:
                exit_log_context(token)

        return wrapper

    return decorate


def observed_approvals(
    handle: Callable[[Any], Awaitable[R]],
    *,
    runtime: str,
    root_of: Callable[[str], str] = lambda session: session,
    contexts: SessionContexts | None = None,
) -> Callable[[Any], Coroutine[Any, Any, R]]:
    """Wrap an ``approval/request`` handler: log context and a span per decision.

    The request's ``session_id`` may be a subagent's: ``root_of`` maps it to the root
    session whose turn is running on this runtime; the turn bound in ``contexts`` (that
    runtime's) gives the log fields (the batch item) and the parent span. The span gets the
    ``outcome`` of the result when there is one.
    """

    @functools.wraps(handle)
    async def traced(params: Any) -> R:
        session = str(params.session_id)
        root = root_of(session)
        bound = contexts.fields(root) if contexts is not None else {}
        fields = {**bound, "runtime": runtime, "session": session}
        with log_context(**fields), span(
            APPROVAL_SPAN,
            parent=contexts.trace_context(root) if contexts is not None else None,
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


def _turn_contexts(session: Any, *args: Any, **kwargs: Any) -> SessionContexts | None:
    # Only approval handlers look turns up: a runtime without an approval service binds none.
    runtime = session.runtime
    if getattr(runtime, "approvals", None) is None:
        return None
    contexts: SessionContexts | None = getattr(runtime, "contexts", None)
    return contexts


observed_turn = observed(TURN_SPAN, _turn_fields, contexts=_turn_contexts)
"""Decorates ``Session.run`` and ``Session.run_query``: the turn's log context and span."""

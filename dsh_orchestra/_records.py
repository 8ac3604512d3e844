"""Records kept per session until a run takes them, shared by the approval service and the
question answerer. Imports nothing from dsh_orchestra (every layer may use it)."""

from __future__ import annotations

from typing import Any, Iterable, Protocol, TypeVar


class Timed(Protocol):
    """A record with the ``trio.current_time()`` of its request."""

    @property
    def time_monotonic(self) -> float:
        """When the request arrived (``trio.current_time()``)."""


R = TypeVar("R", bound=Timed)


def take_by_session(by_session: dict[Any, list[R]], session_ids: Iterable[Any], since: float | None = None) -> tuple[R, ...]:
    """Remove these sessions' records from ``by_session`` and return them oldest first; with
    ``since``, only those at or after it (the older ones are dropped)."""
    out: list[R] = []
    for session_id in session_ids:
        out.extend(by_session.pop(session_id, ()))
    if since is not None:
        out = [r for r in out if r.time_monotonic >= since]
    out.sort(key=lambda r: r.time_monotonic)
    return tuple(out)

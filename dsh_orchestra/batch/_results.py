"""The results file: one whole JSON line per finished item, written and flushed at once.

Crash safety: each line goes out in one ``write`` on an unbuffered file, so a SIGKILL leaves
only complete lines, except at worst a torn last line, which resume repairs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from ..session import TurnResult


def result_line(
    item_id: str,
    *,
    status: str,
    session_id: str | None,
    turn: TurnResult | None,
    attempts: int,
    duration_s: float,
    error: dict[str, str] | None,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """One results object, exactly the documented contract."""
    return {
        "id": item_id,
        "status": status,
        "session_id": session_id,
        "final_response": turn.final_response if turn is not None else None,
        "finish_reason": turn.finish_reason if turn is not None else None,
        "subagents": [
            {"child_session_id": s.child_session_id, "status": s.status, "stop_reason": s.stop_reason, "text": s.text}
            for s in (turn.subagents if turn is not None else ())
        ],
        "approvals": [
            {"tool_name": d.tool_name, "call_id": d.call_id, "outcome": d.outcome, "rule": d.rule}
            for d in (turn.approvals if turn is not None else ())
        ],
        "attempts": attempts,
        "duration_s": round(duration_s, 6),
        "error": error,
        "metadata": metadata,
    }


def read_results(path: str | os.PathLike[str], *, repair: bool = True) -> tuple[dict[str, dict[str, Any]], int]:
    """The complete result lines of ``path`` by id, and how many torn bytes were cut off.

    A last line without its newline, or one that is not valid JSON, is torn (a crash while
    writing): with ``repair`` the file is truncated to the last complete line.

    Raises:
        ValueError: a complete line in the middle of the file is not a result object.
    """
    path = Path(path)
    if not path.exists():
        return {}, 0
    data = path.read_bytes()
    complete, _, tail = data.rpartition(b"\n")
    keep = len(complete) + 1 if complete or data.startswith(b"\n") else 0
    done: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(complete.split(b"\n") if keep else [], start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {number} is not valid JSON ({exc}); fix or remove that line") from exc
        if not isinstance(value, dict) or not isinstance(value.get("id"), str):
            raise ValueError(f"{path}: line {number} is not a result object with a string 'id'")
        done.setdefault(value["id"], value)
    torn = len(tail)
    if torn and repair:
        with open(path, "r+b") as handle:
            handle.truncate(keep)
    return done, torn


class ResultsWriter:
    """Appends result lines; each is one write of the whole line, flushed immediately."""

    def __init__(self, path: str | os.PathLike[str], *, fsync_every: int = 0) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync_every = fsync_every
        self.written = 0

    def write(self, line: dict[str, Any]) -> None:
        """Write one result object as one line."""
        data = orjson.dumps(line) + b"\n"
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.written += 1
        if self._fsync_every and self.written % self._fsync_every == 0:
            os.fsync(self._fd)

    def close(self) -> None:
        """Flush to disk and close. Idempotent."""
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

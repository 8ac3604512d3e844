"""The results file: one whole JSON line per finished item, written and flushed at once.

Crash safety: each line goes out in one ``write`` on an unbuffered file, so a SIGKILL leaves
only complete lines, except at worst a torn last line, which resume repairs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

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


def _complete_length(path: Path) -> int:
    """Bytes up to and including the file's last newline (0 when there is none)."""
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        position = end
        while position > 0:
            step = min(65536, position)
            position -= step
            handle.seek(position)
            chunk = handle.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                return position + newline + 1
    return 0


def scan_results(
    path: str | os.PathLike[str], on_line: Callable[[dict[str, Any]], None], *, repair: bool = True
) -> tuple[int, int]:
    """Call ``on_line`` with every complete result line of ``path``, in file order, reading line by
    line; return (lines, torn bytes). With ``repair`` a torn tail is cut afterwards.

    A last line without its newline, or one that is not valid JSON, is torn (a crash while
    writing). The file is only truncated once every complete line was read and accepted.

    Raises:
        ValueError: a complete line in the middle of the file is not a result object.
    """
    path = Path(path)
    if not path.exists():
        return 0, 0
    keep = _complete_length(path)
    size = path.stat().st_size
    count = 0
    with open(path, "rb") as handle:
        position = 0
        for number, line in enumerate(handle, start=1):
            if position >= keep:
                break
            position += len(line)
            if not line.strip():
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {number} is not valid JSON ({exc}); fix or remove that line") from exc
            if not isinstance(value, dict) or not isinstance(value.get("id"), str):
                raise ValueError(f"{path}: line {number} is not a result object with a string 'id'")
            count += 1
            on_line(value)
    torn = size - keep
    if torn and repair:
        with open(path, "r+b") as handle:
            handle.truncate(keep)
    return count, torn


def read_results(path: str | os.PathLike[str], *, repair: bool = True) -> tuple[dict[str, dict[str, Any]], int]:
    """The complete result lines of ``path`` by id (the first line of an id wins), and how many
    torn bytes were cut off (see ``scan_results``).

    Raises:
        ValueError: a complete line in the middle of the file is not a result object.
    """
    done: dict[str, dict[str, Any]] = {}

    def keep_first(line: dict[str, Any]) -> None:
        done.setdefault(line["id"], line)

    _, torn = scan_results(path, keep_first, repair=repair)
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

"""The results file: one whole JSON line per finished item, written and flushed at once.

Crash safety: each line goes out in one ``write`` on an unbuffered file, so a SIGKILL leaves
only complete lines, except at worst a torn last line, which resume repairs. Reading accepts
only result objects of the documented schema (``result_problem``), and changes nothing in a
file it refuses.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import math
import os
import socket
from pathlib import Path
from typing import Any, Callable

import orjson

from ..session import TurnResult
from ._options import BatchUsageError

log = logging.getLogger("dsh_orchestra.batch")


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
    subagents: tuple[Any, ...] = ()
    approvals: tuple[Any, ...] = ()
    questions: tuple[Any, ...] = ()
    if turn is not None:  # (a comprehension only over a non-empty tuple: each costs a function call)
        subagents, approvals, questions = turn.subagents, turn.approvals, turn.questions
    return {
        "id": item_id,
        "status": status,
        "session_id": session_id,
        "final_response": turn.final_response if turn is not None else None,
        "finish_reason": turn.finish_reason if turn is not None else None,
        "subagents": [
            {"child_session_id": s.child_session_id, "status": s.status, "stop_reason": s.stop_reason, "text": s.text}
            for s in subagents
        ] if subagents else [],
        "approvals": [
            {"tool_name": d.tool_name, "call_id": d.call_id, "outcome": d.outcome, "rule": d.rule}
            for d in approvals
        ] if approvals else [],
        "questions": [
            {"id": q.question_id, "question": q.question, "outcome": q.outcome, "selected": list(q.selected),
             "custom": q.custom, "answered_by": q.answered_by}
            for q in questions
        ] if questions else [],
        "attempts": attempts,
        "duration_s": round(duration_s, 6),
        "error": error,
        "metadata": metadata,
    }


_OPTIONAL_TEXT = ("session_id", "final_response", "finish_reason")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _list_problem(value: Any, key: str, fields: tuple[str, ...]) -> str | None:
    if not isinstance(value, list):
        return f"'{key}' must be a list, not {type(value).__name__}"
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            return f"'{key}[{index}]' must be an object, not {type(entry).__name__}"
        for name in fields:
            if entry.get(name) is not None and not isinstance(entry[name], str):
                return f"'{key}[{index}].{name}' must be a string or null, not {type(entry[name]).__name__}"
    return None


def result_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a result object of the documented schema (None: it is one).

    Required: ``id`` (a non-empty string) and ``status`` (``"ok"`` or ``"error"``). The other
    documented keys may be missing (lines of earlier versions) but have their types when present;
    keys this version does not know (lines of later versions) are kept as they are.
    """
    if not isinstance(value, dict):
        return f"a result is a JSON object, not {type(value).__name__}"
    for key in ("id", "status"):
        if key not in value:
            return f"missing required field {key!r} (is this a results file?)"
    if not isinstance(value["id"], str) or not value["id"]:
        return f"'id' must be a non-empty string, not {value['id']!r}"
    if value["status"] not in ("ok", "error"):
        return f"'status' must be \"ok\" or \"error\", not {value['status']!r}"
    for key in _OPTIONAL_TEXT:
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"{key!r} must be a string or null, not {type(value[key]).__name__}"
    if "attempts" in value and (isinstance(value["attempts"], bool) or not isinstance(value["attempts"], int) or value["attempts"] < 1):
        return f"'attempts' must be an integer >= 1, not {value['attempts']!r}"
    if "duration_s" in value and not (_is_number(value["duration_s"]) and value["duration_s"] >= 0):
        return f"'duration_s' must be a number >= 0, not {value['duration_s']!r}"
    error = value.get("error")
    if error is not None:
        if not isinstance(error, dict):
            return f"'error' must be an object or null, not {type(error).__name__}"
        for key in ("type", "message"):
            if error.get(key) is not None and not isinstance(error[key], str):
                return f"'error.{key}' must be a string, not {type(error[key]).__name__}"
    if "metadata" in value and value["metadata"] is not None and not isinstance(value["metadata"], dict):
        return f"'metadata' must be an object, not {type(value['metadata']).__name__}"
    if "subagents" in value:
        problem = _list_problem(value["subagents"], "subagents", ("child_session_id", "status", "stop_reason", "text"))
        if problem:
            return problem
    if "approvals" in value:
        problem = _list_problem(value["approvals"], "approvals", ("tool_name", "call_id", "outcome", "rule"))
        if problem:
            return problem
    if "questions" in value:  # added after 0.1.0: older result lines lack it
        problem = _list_problem(value["questions"], "questions", ("id", "question", "outcome", "custom", "answered_by"))
        if problem:
            return problem
    return None


class ResultsFileError(ValueError):
    """A results file holds something that is not a result; ``path`` and ``line`` say where."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}: line {line} is not a result line: {problem}; the file was left unchanged "
                         "(fix or remove that line, or give another results file)")
        self.path = path
        self.line = line
        self.problem = problem


def scan_results(
    path: str | os.PathLike[str], on_line: Callable[[dict[str, Any]], None], *, repair: bool = True
) -> tuple[int, int]:
    """Call ``on_line`` with every result line of ``path``, in file order, reading line by
    line; return (lines, torn bytes).

    A last line without its newline that is not valid JSON is torn (a crash while writing):
    it is skipped, and with ``repair`` cut off. A last line without its newline that is a
    valid result is kept, and with ``repair`` its newline is restored, so after a repair the
    file ends with a newline. The file is only changed once every line was read and accepted.

    Raises:
        ResultsFileError (a ValueError): a line that is not a result object of the schema
            (``result_problem``); the file is left unchanged.
    """
    path = Path(path)
    if not path.exists():
        return 0, 0
    count = torn = 0
    newline = False
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            last = not line.endswith(b"\n")
            if not line.strip():
                torn = len(line) if last else 0
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                if last:  # cut short by a crash
                    torn = len(line)
                    break
                raise ResultsFileError(str(path), number, f"not valid JSON ({exc})") from exc
            problem = result_problem(value)
            if problem is not None:
                raise ResultsFileError(str(path), number, problem)
            newline = last
            count += 1
            on_line(value)
    if repair and torn:
        with open(path, "r+b") as handle:
            handle.truncate(path.stat().st_size - torn)
    elif repair and newline:
        with open(path, "ab") as handle:
            handle.write(b"\n")
    return count, torn


def read_results(path: str | os.PathLike[str], *, repair: bool = True) -> tuple[dict[str, dict[str, Any]], int]:
    """The complete result lines of ``path`` by id (the first line of an id wins), and how many
    torn bytes were cut off (see ``scan_results``).

    Raises:
        ResultsFileError (a ValueError): a line is not a result object of the schema.
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
        self.write_json(orjson.dumps(line))

    def write_json(self, encoded: bytes) -> None:
        """Write one result object already encoded as compact JSON (no newline) as one line."""
        data = encoded + b"\n"
        written = os.write(self._fd, data)
        if written < len(data):  # a short write (a full disk, a signal): the rest, in order
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(self._fd, view):]
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


class ResultsLockedError(BatchUsageError):
    """Another batch holds the results file's lock; ``holder`` says who (pid, host, since)."""

    def __init__(self, path: str, holder: dict[str, Any]) -> None:
        who = ", ".join(f"{key} {holder[key]}" for key in ("pid", "host", "since") if key in holder) or "unknown"
        super().__init__(f"results file {path!r} is in use by another batch ({who}); "
                         "wait for it to finish, or give another results file")
        self.path = path
        self.holder = holder


class ResultsLock:
    """An advisory lock on a results file, held by one batch for its whole run.

    ``flock`` on the results file itself (created when missing), so every path that names it
    (a symlink, a hard link) meets the same lock; the holder's pid, host and start time go to
    ``<results>.lock`` beside it, for the message of the batch that is refused. The kernel
    drops the lock when its holder dies (even by SIGKILL), so nothing stale blocks the next
    run; the holder removes its note when it releases. Taken before the results file is read
    or repaired.
    """

    def __init__(self, results: str | os.PathLike[str]) -> None:
        self.results = Path(results)
        self.note = Path(os.path.realpath(self.results) + ".lock")
        self._fd = -1

    def acquire(self) -> ResultsLock:
        """Take the lock now (never waits).

        Raises:
            ResultsLockedError: another process holds it.
            OSError: the results file cannot be opened or created.
        """
        fd = os.open(self.results, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ResultsLockedError(str(self.results), _read_holder(self.note)) from None
        self._fd = fd
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")}
        try:
            temporary = self.note.with_name(f".{self.note.name}.{os.getpid()}.tmp")
            temporary.write_bytes(orjson.dumps(holder) + b"\n")
            os.replace(temporary, self.note)
        except OSError as exc:  # the note is only for messages
            log.warning("cannot write the lock note %s: %s", self.note, exc)
        return self

    def adopt(self, fd: int) -> None:
        """Hold the lock through ``fd`` (a locked descriptor of the file now at the results
        path, renamed over the old one) instead of the old file's."""
        old, self._fd = self._fd, fd
        if old >= 0:
            os.close(old)

    def release(self) -> None:
        """Remove the note and drop the lock. Idempotent."""
        if self._fd < 0:
            return
        try:
            self.note.unlink()
        except OSError:
            pass
        finally:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ResultsLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _read_holder(note: Path) -> dict[str, Any]:
    try:
        value = orjson.loads(note.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}

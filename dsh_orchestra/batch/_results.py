"""The results file: one whole JSON line per finished item, written and flushed at once.

Crash safety: each line goes out in one ``write`` on an unbuffered file, so a SIGKILL leaves
only complete lines, except at worst a torn last line, which resume repairs. Reading is
``dsh_orchestra.results.read_results`` (the one reader): it accepts only result objects of the
documented schema (``result_problem``), and changes nothing in a file it refuses.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import socket
from pathlib import Path
from typing import Any, Callable

import orjson

from ..results import ResultsFileError as ResultsFileError, read_results as read_lines
from ._options import BatchUsageError

log = logging.getLogger("dsh_orchestra.batch")


def scan_results(
    path: str | os.PathLike[str], on_line: Callable[[dict[str, Any]], None], *, repair: bool = True
) -> tuple[int, int]:
    """Call ``on_line`` with every result line of ``path`` (its JSON object), in file order,
    reading line by line; return (lines, torn bytes). ``results.read_results`` with ``repair``
    on by default: a torn last line is skipped (and cut off), a valid last line without its
    newline gets it back; the file is only changed once every line was read and accepted.

    Raises:
        ResultsFileError (a ValueError): a line that is not a result object of the schema
            (``result_problem``); the file is left unchanged.
    """
    stream = read_lines(path, repair=repair)
    for line in stream.objects():
        on_line(line)
    return stream.count, stream.torn


def read_results(path: str | os.PathLike[str], *, repair: bool = True) -> tuple[dict[str, dict[str, Any]], int]:
    """The complete result lines of ``path`` by id (the first line of an id wins), and how many
    torn bytes were cut off (see ``scan_results``).

    Raises:
        ResultsFileError (a ValueError): a line is not a result object of the schema.
    """
    done: dict[str, dict[str, Any]] = {}
    stream = read_lines(path, repair=repair)
    for line in stream.objects():
        done.setdefault(line["id"], line)
    return done, stream.torn


class ResultsWriter:
    """Appends result lines; each is one write of the whole line, flushed immediately."""

    def __init__(self, path: str | os.PathLike[str], *, fsync_every: int = 0) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync_every = fsync_every
        self.written = 0

    def write(self, line: Any) -> None:
        """Write one result object (a ``ResultLine`` or its JSON object) as one line."""
        self.write_json(orjson.dumps(line.to_json() if hasattr(line, "to_json") else line))

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

"""``resume`` with ``retry_errors``: the results file without its error lines, written as a new file
and renamed into place (the lock moves with it), so that a resume runs those items again and
the file never holds two lines of one (id, epoch)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import orjson

from ._results import ResultsLock


def drop_error_lines(out: Path, lock: ResultsLock) -> int:
    """Rewrite ``out`` without the lines whose ``status`` is ``"error"``; return how many were
    dropped (nothing is written when there is none). ``lock`` must hold ``out``: it is moved to
    the new file before the rename, so no other batch can take the file in between.

    A torn last line (a crash while writing) is dropped too; a complete line that is not JSON
    is kept as it is (the resume's scan refuses it, naming its line).
    """
    if not out.exists():
        return 0
    kept: list[bytes] = []
    dropped = 0
    with open(out, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                dropped += bool(raw.strip())
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                kept.append(raw)
                continue
            if isinstance(value, dict) and value.get("status") == "error":
                dropped += 1
            else:
                kept.append(raw)
    if not dropped:
        return 0
    temporary = out.with_name(f".{out.name}.{os.getpid()}.retry.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new to everyone: never blocks
        os.write(fd, b"".join(kept))
        os.fsync(fd)
        os.replace(temporary, out)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    lock.adopt(fd)
    return dropped

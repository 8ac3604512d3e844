"""Read a transcript (gzip JSON Lines) with bounds: a line longer than ``max_line`` bytes is
left out (read past, never held) and replaced by a note, and reading stops after ``max_bytes``
decompressed bytes with a note, so a huge line or a gzip bomb cannot exhaust memory."""

from __future__ import annotations

import gzip
import os
from typing import Any

import orjson

MAX_LINE_BYTES = 8 << 20
"""The longest transcript line a report or the viewer reads (longer: cut with a note)."""
MAX_TRANSCRIPT_BYTES = 256 << 20
"""Decompressed bytes read of one transcript at most (then a note)."""
_STEP = 1 << 20


def read_transcript_bounded(
    path: str | os.PathLike[str], *, max_line: int | None = None, max_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """The records of a transcript; a line over ``max_line`` bytes (default ``MAX_LINE_BYTES``)
    becomes ``{"cut_line": {"line", "bytes", "limit"}}``, and past ``max_bytes`` (default
    ``MAX_TRANSCRIPT_BYTES``) the records end with ``{"cut_transcript": {"bytes", "limit"}}``.

    Raises:
        OSError, EOFError: the file cannot be read (gzip.BadGzipFile is an OSError).
        ValueError: a line is not JSON.
    """
    max_line = MAX_LINE_BYTES if max_line is None else max_line
    max_bytes = MAX_TRANSCRIPT_BYTES if max_bytes is None else max_bytes
    records: list[dict[str, Any]] = []
    total = 0
    number = 0
    with gzip.open(path, "rb") as handle:
        while True:
            raw = handle.readline(max_line + 1)
            if not raw:
                break
            number += 1
            size = len(raw)
            if size > max_line and not raw.endswith(b"\n"):
                del raw
                while True:  # read past the rest of the long line, a step at a time
                    rest = handle.readline(_STEP)
                    size += len(rest)
                    if not rest or rest.endswith(b"\n") or total + size > max_bytes:
                        break
                records.append({"cut_line": {"line": number, "bytes": size, "limit": max_line}})
            elif raw.strip():
                value = orjson.loads(raw)
                if isinstance(value, dict):
                    records.append(value)
            total += size
            if total > max_bytes:
                records.append({"cut_transcript": {"bytes": total, "limit": max_bytes}})
                break
    return records

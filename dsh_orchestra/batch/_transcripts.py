"""Per-item transcripts: each item's session notifications as gzip-compressed JSON Lines.

``run_batch(..., transcripts=DIR)`` writes ``DIR/<name>.jsonl.gz`` (``transcript_name``)
for every item that got a turn, before its result line (so a result line implies its
transcript). The file holds, one JSON object a line:

* ``{"transcript": {"item", "session_id", "message_id", "version": 1}}`` first;
* the root session's events as ``{"method": "session.event", "params": {"sessionId", "event"}}``
  (wire order), then the descendants' notifications ``{"method", "params"}`` (wire order);
* ``{"truncated": {"omitted_lines", "omitted_bytes", "limit_bytes"}}`` last, when the item's
  notifications exceeded ``max_bytes`` (uncompressed): the lines that fit are kept.

Files are written to a temporary name and renamed, so a reader never sees half a file; a
retried or resumed item's transcript is replaced. A transcript that cannot be written is
logged and skipped: it never fails the item. Compression runs in a worker thread.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterator

import orjson
import trio

from .._params import integer
from .._logging import redact_bytes
from ..protocol import SESSION_EVENT
from ..session import TurnResult

log = logging.getLogger("dsh_orchestra.batch")

SUFFIX = ".jsonl.gz"
DEFAULT_MAX_BYTES = 1 << 20  # per item, before compression
_KEPT = re.compile(r"[a-z0-9_-][a-z0-9._-]{0,79}")
_HASHED = re.compile(r".*-[0-9a-f]{16}")
_UNSAFE = re.compile(r"[^a-z0-9._-]")
_PREFIX = 40


def transcript_name(item_id: str) -> str:
    """The file name of ``item_id``'s transcript (injective, also where case is folded).

    An id of at most 80 characters from ``a-z 0-9 . _ -`` that does not start with ``.`` and
    does not end like a hashed name is kept as it is: ``<id>.jsonl.gz``. Any other id becomes
    ``<prefix>-<hash>.jsonl.gz``: the prefix is the id lower-cased, with other characters as
    ``_``, cut to 40 characters; the hash is the first 16 hex digits of the SHA-256 of the id's
    UTF-8 bytes. Kept names never end in ``-`` and 16 hex digits, hashed names always do, so
    two distinct ids never share a name, and ids that differ only in case never do either.
    """
    if _KEPT.fullmatch(item_id) and not _HASHED.fullmatch(item_id):
        return item_id + SUFFIX
    prefix = _UNSAFE.sub("_", item_id.lower())[:_PREFIX].lstrip(".") or "item"
    return f"{prefix}-{hashlib.sha256(item_id.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}{SUFFIX}"


def may_write_transcript(name: str) -> bool:
    """True for the file names a transcripts directory may hold: transcripts and their
    temporary files (for the path checks)."""
    return name.endswith(SUFFIX) or (name.startswith(".") and name.endswith(".tmp"))


may_write = may_write_transcript  # (its earlier name)


def transcript_lines(item_id: str, turn: TurnResult) -> Iterator[dict[str, Any]]:
    """The objects of ``turn``'s transcript, header first (no truncation)."""
    yield {"transcript": {"item": item_id, "session_id": turn.session_id, "message_id": turn.message_id, "version": 1}}
    for event in turn.events:
        yield {"method": SESSION_EVENT, "params": {"sessionId": turn.session_id, "event": event}}
    for notification in turn.notifications:
        yield {"method": notification.method, "params": notification.params}


def encode_transcript(item_id: str, turn: TurnResult, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[bytes, bool]:
    """The uncompressed JSON Lines of ``turn`` and whether they were cut: the lines that fit in
    ``max_bytes`` (the header always does), then a truncation note."""
    out = bytearray()
    omitted_lines = omitted_bytes = 0
    for value in transcript_lines(item_id, turn):
        line = redact_bytes(orjson.dumps(value, default=str)) + b"\n"  # secrets never reach disk
        if omitted_lines or (out and len(out) + len(line) > max_bytes):
            omitted_lines += 1
            omitted_bytes += len(line)
            continue
        out += line
    if omitted_lines:
        note = {"omitted_lines": omitted_lines, "omitted_bytes": omitted_bytes, "limit_bytes": max_bytes}
        out += orjson.dumps({"truncated": note}) + b"\n"
    return bytes(out), omitted_lines > 0


def read_transcript(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a transcript back (header, notifications, truncation note)."""
    with gzip.open(path, "rb") as handle:
        return [orjson.loads(line) for line in handle.read().splitlines() if line.strip()]


class TranscriptWriter:
    """Writes one transcript file per item into ``directory`` (created if missing).

    ``max_bytes`` caps each transcript before compression (the header always fits).
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES, compresslevel: int = 6) -> None:
        integer(1).check("max_bytes", max_bytes)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.compresslevel = compresslevel
        self.written = 0
        self.truncated = 0
        self.failed = 0

    def path_for(self, item_id: str) -> Path:
        """Where ``item_id``'s transcript goes."""
        return self.directory / transcript_name(item_id)

    def write_nowait(self, item_id: str, turn: TurnResult) -> Path | None:
        """Write the transcript now (blocking); returns its path, or None if it failed."""
        path = self.path_for(item_id)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            data, truncated = encode_transcript(item_id, turn, self.max_bytes)
            with open(temporary, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=self.compresslevel, mtime=0) as handle:
                handle.write(data)
            os.replace(temporary, path)
        except (OSError, TypeError, orjson.JSONEncodeError) as exc:
            self.failed += 1
            log.error("cannot write the transcript of item %r to %s: %s", item_id, path, exc)
            try:
                temporary.unlink()
            except OSError:
                pass
            return None
        self.written += 1
        self.truncated += truncated
        return path

    async def write(self, item_id: str, turn: TurnResult) -> Path | None:
        """Write the transcript in a worker thread (compression does not stall the run)."""
        return await trio.to_thread.run_sync(self.write_nowait, item_id, turn)

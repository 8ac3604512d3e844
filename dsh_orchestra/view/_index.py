"""An index of a results file that grows while a batch writes it: the byte offset of every
complete line, then a few compact columns per line (status, epoch, duration, error type, finish
reason, tokens, cost, each scorer's value, a key of the id), never the lines themselves.

``refresh`` finds the lines appended since the last call (offsets only: a scan for newlines;
a line without its newline yet waits for it), at most about ``max_bytes`` per call when asked
(``unread``: the bytes left), so that a server can answer in between; a file that was replaced,
cut or rewritten underneath is noticed (its identity, size or the bytes before the indexed end
changed) and indexed again from the start (``generation`` counts how often). ``parse`` fills the columns
of the next lines (``parsed`` of ``len()`` so far), a step at a time, so that a server can
answer in between. ``lines`` reads lines from the file on demand.
"""

from __future__ import annotations

import math
import os
from array import array
from pathlib import Path
from typing import Any, Callable, Iterator

import attrs
import numpy as np
import numpy.typing as npt
import orjson

CHUNK = 4 << 20  # bytes read per step while indexing
PROBE = 64  # bytes before the indexed end compared at each refresh (a rewrite changes them)
PAUSE_EVERY = 500  # lines parsed between two calls of a job's ``pause``


BAD = "(not a result line)"
"""The status of a line that is not a result (its columns hold nothing else)."""


class ResultsRewrittenError(Exception):
    """The file changed under a read: it is indexed again at the next refresh."""


def id_key(item_id: str) -> int:
    """The 64-bit key of an id in the index (equal ids, equal keys; a few collisions are
    resolved by reading the lines)."""
    return int.from_bytes(item_id.encode("utf-8")[:8].ljust(8, b"\0"), "little", signed=True) ^ hash(item_id)


class Codes:
    """Small strings (statuses, error types, finish reasons) as numbers: 0 is "none"."""

    def __init__(self) -> None:
        self.names: list[str | None] = [None]
        self._codes: dict[str, int] = {}

    def code(self, value: Any) -> int:
        if not isinstance(value, str):
            return 0
        found = self._codes.get(value)
        if found is None:
            found = self._codes[value] = len(self.names)
            self.names.append(value)
        return found

    def find(self, value: str) -> int | None:
        return self._codes.get(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


@attrs.frozen
class Scan:
    """The lines ``scan`` found after ``start``: their offsets, where the indexed part ends,
    the bytes of a torn last line (``pending``), the bytes before ``end`` (a rewrite probe)."""

    start: int
    identity: tuple[int, int]
    offsets: array[int]
    end: int
    pending: int
    probe: bytes


def scan(path: Path, start: int, max_bytes: int | None = None, pause: Callable[[], None] | None = None) -> Scan:
    """The offsets of the complete lines of ``path`` after ``start`` (about ``max_bytes`` of
    them, whole lines, at least one line when there is one); ``pause`` is called between chunks
    (a server's worker thread waits there while requests run). Touches no index: safe in a thread.

    Raises:
        FileNotFoundError: the file is gone.
    """
    offsets = array("q")
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        handle.seek(start)
        position, rest, taken, eof = start, b"", 0, False
        while max_bytes is None or taken < max_bytes or position == start:  # a line longer than the bound: read on to its end
            chunk = handle.read(CHUNK if max_bytes is None or taken >= max_bytes else min(CHUNK, max_bytes - taken))
            if not chunk:
                eof = True
                break
            if pause is not None:
                pause()
            taken += len(chunk)
            data = rest + chunk if rest else chunk
            at = 0
            find = data.find
            while True:
                newline = find(b"\n", at)
                if newline < 0:
                    break
                if newline > at:
                    offsets.append(position + at)
                at = newline + 1
            position += at
            rest = data[at:]
        probe_from = max(0, position - PROBE)
        handle.seek(probe_from)
        probe = handle.read(position - probe_from)
    # stopped early: the rest is unread, not a torn line
    return Scan(start, (info.st_dev, info.st_ino), offsets, position, len(rest) if eof else 0, probe)


@attrs.frozen
class ParseJob:
    """The lines ``first``.. of an index (their offsets, up to ``end``) whose columns to read."""

    path: Path
    generation: int
    first: int
    offsets: array[int]
    end: int

    def run(self, pause: Callable[[], None] | None = None) -> ResultsIndex:
        """Read the lines' columns into a detached index (its own codes); ``pause`` is called
        every ``PAUSE_EVERY`` lines. Touches no other index: safe in a thread."""
        chunk = ResultsIndex(self.path)
        offsets, start = self.offsets, self.offsets[0]
        with open(self.path, "rb") as handle:
            handle.seek(start)
            data = handle.read(self.end - start)
        last = len(offsets)
        for number in range(last):
            if pause is not None and not number % PAUSE_EVERY:
                pause()
            at = offsets[number] - start
            stop = (offsets[number + 1] if number + 1 < last else self.end) - start
            chunk._add(data[at:stop], self.first + number)
        return chunk


class ResultsIndex:
    """The index of one results file (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.generation = 0
        self.problem: str | None = None  # the last line that could not be read as a result, if any
        self._reset()

    def _reset(self) -> None:
        self.offsets = array("q")
        self.keys = array("q")
        self.status = array("H")
        self.errors = array("H")
        self.finish = array("H")
        self.epochs = array("H")
        self.durations = array("f")  # float32: 7 digits are plenty for seconds and token counts
        self.tokens = array("f")
        self.costs = array("d")
        self.scores: dict[str, array[float]] = {}
        self.status_codes, self.error_codes, self.finish_codes = Codes(), Codes(), Codes()
        self.metadata_keys: set[str] = set()
        self._end = 0
        self._identity: tuple[int, int] | None = None
        self._probe = b""
        self.pending = 0  # bytes of a last line still without its newline
        self.unread = 0  # bytes after the indexed end a bounded refresh left for the next call
        self.bad_lines = 0

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def end(self) -> int:
        """The byte after the last indexed line."""
        return self._end

    # ---- growing --------------------------------------------------------------------------

    def refresh(self, max_bytes: int | None = None) -> bool:
        """Index what was appended (at most about ``max_bytes`` of it: whole lines, the rest
        at the next call); True when something changed (lines added, or the file was rewritten
        and indexed again). ``check``, ``scan`` and ``add_scan`` are its steps, for a caller
        that scans in another thread.

        Raises:
            FileNotFoundError: the file is gone.
        """
        rewritten, size = self.check()
        if size == self._end:
            return rewritten
        return self.add_scan(scan(self.path, self._end, max_bytes), size) or rewritten

    def check(self) -> tuple[bool, int]:
        """Notice a rewritten file (then the index starts again, ``generation`` + 1); whether
        it was, and the file's size now.

        Raises:
            FileNotFoundError: the file is gone.
        """
        info = os.stat(self.path)
        identity = (info.st_dev, info.st_ino)
        rewritten = self._identity is not None and (identity != self._identity or info.st_size < self._end)
        if not rewritten and self._end and self._probe:
            with open(self.path, "rb") as handle:
                handle.seek(self._end - len(self._probe))
                rewritten = handle.read(len(self._probe)) != self._probe
        if rewritten:
            self._reset()
            self.generation += 1
        self._identity = identity
        if info.st_size == self._end:
            self.pending = self.unread = 0
        return rewritten, info.st_size

    def add_scan(self, found: Scan, size: int) -> bool:
        """Add what ``scan`` found from the indexed end; False (nothing added) when the index
        moved meanwhile (another refresh, a rewrite)."""
        if found.start != self._end or found.identity != self._identity:
            return False
        self.offsets.extend(found.offsets)
        self._end, self.pending, self._probe = found.end, found.pending, found.probe
        self.unread = max(0, size - self._end - self.pending)
        return len(found.offsets) > 0

    def _span(self, index: int) -> tuple[int, int]:
        """Where line ``index`` is: from its offset up to the next line's (or the indexed end)."""
        end = self.offsets[index + 1] if index + 1 < len(self.offsets) else self._end
        return self.offsets[index], end

    @property
    def parsed(self) -> int:
        """Lines whose columns are filled."""
        return len(self.keys)

    def parse(self, limit: int = 5000) -> int:
        """Fill the columns of up to ``limit`` more lines; how many were filled. ``parse_job``,
        ``ParseJob.run`` and ``add_parsed`` are its steps, for a caller that parses in another
        thread."""
        job = self.parse_job(limit)
        return self.add_parsed(job, job.run()) if job is not None else 0

    def parse_job(self, limit: int) -> ParseJob | None:
        """What the next ``limit`` lines' columns need (None: every line is parsed)."""
        first = self.parsed
        last = min(len(self.offsets), first + limit)
        if last <= first:
            return None
        return ParseJob(self.path, self.generation, first, self.offsets[first:last], self._span(last - 1)[1])

    def add_parsed(self, job: ParseJob, chunk: ResultsIndex) -> int:
        """Add the columns ``job.run()`` read (its codes mapped to this index's); how many
        lines; 0 when the index moved meanwhile (the job is then stale)."""
        if job.generation != self.generation or job.first != self.parsed:
            return 0
        count = chunk.parsed
        for name, codes in (("status", "status_codes"), ("errors", "error_codes"), ("finish", "finish_codes")):
            mine, theirs = getattr(self, codes), getattr(chunk, codes)
            remap = np.array([mine.code(value) for value in theirs.names], dtype=np.uint16)
            getattr(self, name).frombytes(remap[np.frombuffer(getattr(chunk, name), dtype=np.uint16)].tobytes())
        for name in ("epochs", "durations", "tokens", "costs"):
            getattr(self, name).extend(getattr(chunk, name))
        before = self.parsed
        for name in {**self.scores, **chunk.scores}:
            column = self.scores.get(name)
            if column is None:
                column = self.scores[name] = array("d", [math.nan]) * before
            column.extend(chunk.scores.get(name) or array("d", [math.nan]) * count)
        self.keys.extend(chunk.keys)
        if len(self.metadata_keys) < 200:
            self.metadata_keys.update(chunk.metadata_keys)
        self.bad_lines += chunk.bad_lines
        self.problem = chunk.problem or self.problem
        return count

    def _add(self, raw: bytes, index: int) -> None:
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            line = None
        if not isinstance(line, dict) or not isinstance(line.get("id"), str):
            self.bad_lines += 1
            self.problem = f"line {index + 1}: not a result line (a JSON object with a string 'id')"
            line = {"id": "", "status": BAD}
        self.keys.append(id_key(line["id"]))
        self.status.append(self.status_codes.code(line.get("status")))
        error = line.get("error")
        self.errors.append(self.error_codes.code(error.get("type")) if isinstance(error, dict) else 0)
        self.finish.append(self.finish_codes.code(line.get("finish_reason")))
        epoch = line.get("epoch")
        self.epochs.append(epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and 0 < epoch < 1 << 16 else 0)
        self.durations.append(_number(line.get("duration_s")))
        usage = line.get("usage")
        self.tokens.append(_number(usage.get("total_tokens")) if isinstance(usage, dict) else math.nan)
        self.costs.append(_number(line.get("cost_usd")))
        metadata = line.get("metadata")
        if isinstance(metadata, dict) and len(self.metadata_keys) < 200:
            self.metadata_keys.update(k for k in metadata if isinstance(k, str))
        scores = line.get("scores")
        count = len(self.keys)
        if isinstance(scores, dict):
            for name, record in scores.items():
                column = self.scores.get(name)
                if column is None:
                    column = self.scores[name] = array("d", [math.nan]) * (count - 1)
                column.append(_number(record.get("value")) if isinstance(record, dict) else math.nan)
        for column in self.scores.values():
            if len(column) < count:
                column.append(math.nan)

    # ---- reading --------------------------------------------------------------------------

    def raw(self, index: int) -> bytes:
        """The bytes of line ``index`` (without its newline)."""
        with open(self.path, "rb") as handle:
            return self._raw(handle, index)

    def _raw(self, handle: Any, index: int) -> bytes:
        start, end = self._span(index)
        handle.seek(start)
        data: bytes = handle.read(end - start)
        return data

    def line(self, index: int) -> dict[str, Any]:
        """Line ``index`` as read from the file now.

        Raises:
            ResultsRewrittenError: the bytes there are no longer that line.
        """
        return self.lines([index])[0]

    def lines(self, indexes: list[int]) -> list[dict[str, Any]]:
        """These lines, read from the file (one open)."""
        out = []
        with open(self.path, "rb") as handle:
            for index in indexes:
                try:
                    value = orjson.loads(self._raw(handle, index))
                except orjson.JSONDecodeError:
                    value = None
                if not isinstance(value, dict) or (index < self.parsed and id_key(str(value.get("id"))) != self.keys[index]):
                    raise ResultsRewrittenError(f"{self.path} changed while it was read; it is read again")
                out.append(value)
        return out

    def iter_raw(self, indexes: npt.NDArray[np.int64] | None = None) -> Iterator[tuple[int, bytes]]:
        """(index, bytes) of these lines (all by default), read in file order in large steps."""
        chosen = np.arange(len(self)) if indexes is None else np.sort(indexes)
        with open(self.path, "rb") as handle:
            buffer, buffer_start = b"", 0
            for index in chosen.tolist():
                start, end = self._span(index)
                if start < buffer_start or end > buffer_start + len(buffer):
                    handle.seek(start)
                    buffer_start = start
                    buffer = handle.read(max(CHUNK, end - start))
                yield index, buffer[start - buffer_start:end - buffer_start]

    # ---- columns --------------------------------------------------------------------------

    def column(self, name: str) -> npt.NDArray[Any]:
        """A column of the parsed lines as a numpy array: a view of the index, no copy. Use it
        and drop it before the next ``parse`` (which cannot grow a column while a view exists:
        BufferError); the viewer's queries are synchronous, in the thread that parses."""
        value: array[Any] = getattr(self, name)
        dtype = {"q": np.int64, "H": np.uint16, "i": np.int32, "d": np.float64, "f": np.float32}[value.typecode]
        return np.frombuffer(value, dtype=dtype) if len(value) else np.zeros(0, dtype=dtype)

    def score(self, name: str) -> npt.NDArray[np.float64]:
        """A scorer's values of the parsed lines (NaN: none); a view, as ``column``."""
        column = self.scores.get(name)
        return np.frombuffer(column, dtype=np.float64) if column else np.full(self.parsed, np.nan)

"""Sans-I/O line framing: bytes in, complete JSON frames out.

Pure: no trio, no I/O. The framer buffers bytes, splits on ``\\n`` before decoding (so a
multi-byte character split across chunks is fine), skips blank lines, tolerates ``\\r\\n``,
and ignores (and counts) lines that are not UTF-8 JSON objects, as the runtime does.

Hot path: the reader hands over whole pipe reads (tens of kilobytes, a hundred frames or
more). ``frames()`` splits them with one ``bytes.split`` and decodes each line with
``orjson``; nothing is copied twice and no per-line bookkeeping runs unless a line could be
over the size limit. A partial line is only joined once its newline has arrived, so one
huge frame arriving in many small chunks costs linear, not quadratic, time.
"""

from __future__ import annotations

import enum
from typing import Any, Iterator

import orjson

from .._params import Param, ParamValueError
from ._errors import FrameTooLargeError, SdkProtocolError

DEFAULT_MAX_FRAME_SIZE = 64 * 1024 * 1024
"""64 MiB: image prompts travel inline as base64, so frames can be large."""


class Need(enum.Enum):
    """What ``LineFramer.next_line`` returns when it has no complete line."""

    NEED_DATA = "need-data"
    CLOSED = "closed"


NEED_DATA = Need.NEED_DATA
CLOSED = Need.CLOSED


class LineFramer:
    """Split a byte stream into newline-terminated frames and decode them.

    ``receive_data(b"")`` marks end of file. ``frames()`` returns every complete frame
    decoded so far; lines that are blank are skipped silently, lines that are not valid
    UTF-8 JSON objects are skipped and counted in ``ignored``. A line (or an unfinished
    line) longer than ``max_frame_size`` bytes raises FrameTooLargeError.
    """

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size <= 0:
            raise ParamValueError(Param("max_frame_size", max_frame_size, spelled="max_frame_size"), f" must be > 0, not {max_frame_size!r}")
        self.max_frame_size = max_frame_size
        self.ignored = 0
        self._parts: list[bytes] = []  # received, not yet split; the start of one line
        self._size = 0  # total bytes in _parts
        self._newline = False  # some part in _parts holds a newline
        self._lines: list[bytes] = []  # complete lines split off but not yet consumed
        self._next = 0  # index of the next unconsumed line in _lines
        self._eof = False

    @property
    def eof(self) -> bool:
        """True once ``receive_data(b"")`` was called."""
        return self._eof

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer ``data``; an empty bytes object marks end of file. Does no I/O."""
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("receive_data() after end of file")
        if type(data) is not bytes:
            data = bytes(data)
        self._parts.append(data)
        self._size += len(data)
        if not self._newline and b"\n" in data:
            self._newline = True

    def _split(self) -> list[bytes]:
        """Split every complete line off the buffered bytes."""
        limit = self.max_frame_size
        if not self._newline:
            if self._size > limit:
                raise FrameTooLargeError(self._size, limit)
            return []
        parts = self._parts
        blob = parts[0] if len(parts) == 1 else b"".join(parts)
        lines = blob.split(b"\n")
        tail = lines.pop()
        self._parts = [tail] if tail else []
        self._size = len(tail)
        self._newline = False
        if len(blob) - len(tail) > limit:  # only then can one of the lines be too long
            for line in lines:
                if len(line) > limit:
                    raise FrameTooLargeError(len(line), limit)
        if self._size > limit:
            raise FrameTooLargeError(self._size, limit)
        return lines

    def next_line(self) -> bytes | Need:
        """Pop one complete line (without its ``\\n``), or return NEED_DATA / CLOSED."""
        if self._next >= len(self._lines):
            self._lines = self._split()
            self._next = 0
        if self._next < len(self._lines):
            line = self._lines[self._next]
            self._next += 1
            return line
        if self._eof:
            self.check_closed()
            return CLOSED
        return NEED_DATA

    def frames(self) -> list[dict[str, Any]]:
        """Decode every complete line buffered so far into JSON objects. Does no I/O."""
        return self._decode(self._take_lines())

    def _take_lines(self) -> list[bytes]:
        lines = self._split()
        if self._next < len(self._lines):  # lines split off by next_line() come first
            lines = self._lines[self._next :] + lines
        self._lines = []
        self._next = 0
        return lines

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """``receive_data(data)`` then ``frames()``, faster when ``data`` ends a frame."""
        return self._decode(self.split(data))

    def feed_iter(self, data: bytes) -> Iterator[dict[str, Any]]:
        """``feed(data)`` one frame at a time: each line is decoded only when asked for.

        The reader's hot path: it dispatches each frame before the next is decoded, so the
        decoded objects a consumer drops die young, before the garbage collector runs (a
        chunk decoded whole keeps a hundred frames of dicts alive, which the collector then
        traverses and promotes). Raises FrameTooLargeError on the first ``next()``.
        """
        lines = self.split(data)
        loads = orjson.loads
        for line in lines:
            try:
                value = loads(line)
            except orjson.JSONDecodeError:  # invalid UTF-8 or JSON; blank lines are not counted
                if line.strip():
                    self.ignored += 1
                continue
            if type(value) is dict:
                yield value
            else:
                self.ignored += 1

    def split(self, data: bytes) -> list[bytes]:
        """``receive_data(data)``, then every complete line (without its ``\\n``), undecoded.

        For readers that decode and dispatch one line at a time themselves (the connection
        keeps each frame's bytes); the same rules as ``frames()`` then apply to each line.
        Raises FrameTooLargeError as ``frames()`` does.
        """
        # A chunk that starts and ends on a frame boundary (a small response, usually) is
        # split without touching the buffer.
        if (
            self._parts
            or self._lines
            or self._eof
            or type(data) is not bytes
            or not data
            or data[-1] != 10  # b"\n"
            or len(data) > self.max_frame_size
        ):
            self.receive_data(data)
            return self._take_lines()
        lines = data.split(b"\n")
        lines.pop()  # the empty piece after the final newline
        return lines

    def _decode(self, lines: list[bytes]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        append = out.append
        loads = orjson.loads
        ignored = 0
        for line in lines:
            try:
                value = loads(line)
            except orjson.JSONDecodeError:  # invalid UTF-8 or JSON; blank lines are not counted
                if line.strip():
                    ignored += 1
                continue
            if type(value) is dict:
                append(value)
            else:
                ignored += 1
        self.ignored += ignored
        return out

    def check_closed(self) -> None:
        """After end of file: raise if a partial line is left over."""
        if self._eof and any(part.strip() for part in self._parts):
            raise SdkProtocolError("peer closed its stream in the middle of a line")


def encode_frame(frame: dict[str, Any]) -> bytes:
    """Encode one frame as compact JSON followed by ``\\n``."""
    return orjson.dumps(frame, option=orjson.OPT_APPEND_NEWLINE)

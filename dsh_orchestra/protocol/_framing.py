"""Sans-I/O line framing: bytes in, complete JSON frames out.

Pure: no trio, no I/O. The framer buffers bytes, splits on ``\\n`` before decoding (so a
multi-byte character split across chunks is fine), skips blank lines, tolerates ``\\r\\n``,
and ignores (and counts) lines that are not UTF-8 JSON objects, as the runtime does.
"""

from __future__ import annotations

import enum
from typing import Any

import orjson

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
    UTF-8 JSON objects are skipped and counted in ``ignored``.
    """

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size <= 0:
            raise ValueError(f"max_frame_size must be > 0, not {max_frame_size!r}")
        self.max_frame_size = max_frame_size
        self.ignored = 0
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already known to hold no newline
        self._eof = False

    @property
    def eof(self) -> bool:
        """True once ``receive_data(b"")`` was called."""
        return self._eof

    def receive_data(self, data: bytes) -> None:
        """Buffer ``data``; an empty bytes object marks end of file. Does no I/O."""
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("receive_data() after end of file")
        self._buffer += data

    def next_line(self) -> bytes | Need:
        """Pop one complete line (without its terminator), or return NEED_DATA / CLOSED."""
        end = self._buffer.find(b"\n", self._scanned)
        if end >= 0:
            if end > self.max_frame_size:
                raise FrameTooLargeError(end, self.max_frame_size)
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            self._scanned = 0
            return line
        self._scanned = len(self._buffer)
        if self._scanned > self.max_frame_size:
            raise FrameTooLargeError(self._scanned, self.max_frame_size)
        if self._eof:
            if self._buffer.strip():
                raise SdkProtocolError("peer closed its stream in the middle of a line")
            return CLOSED
        return NEED_DATA

    def frames(self) -> list[dict[str, Any]]:
        """Decode every complete line buffered so far into JSON objects. Does no I/O."""
        out: list[dict[str, Any]] = []
        buffer = self._buffer
        start = 0
        loads = orjson.loads
        while True:
            end = buffer.find(b"\n", max(start, self._scanned))
            if end < 0:
                break
            if end - start > self.max_frame_size:
                del buffer[:start]
                self._scanned = 0
                raise FrameTooLargeError(end - start, self.max_frame_size)
            self._scanned = 0
            line = buffer[start:end]
            start = end + 1
            try:
                value = loads(line)
            except orjson.JSONDecodeError:
                if line.strip():
                    self.ignored += 1
                continue
            if isinstance(value, dict):
                out.append(value)
            else:
                self.ignored += 1
        if start:
            del buffer[:start]
        rest = len(buffer)
        if rest > self.max_frame_size:
            raise FrameTooLargeError(rest, self.max_frame_size)
        self._scanned = rest
        return out

    def check_closed(self) -> None:
        """After end of file: raise if a partial line is left over."""
        if self._eof and self._buffer.strip():
            raise SdkProtocolError("peer closed its stream in the middle of a line")


def encode_frame(frame: dict[str, Any]) -> bytes:
    """Encode one frame as compact JSON followed by ``\\n``."""
    return orjson.dumps(frame) + b"\n"

"""Reading an Anthropic Messages SSE stream as it passes through: events and usage.

Owns the incremental split of bytes into events and the usage counted from ``message_start``
and ``message_delta``. No I/O.
"""

from __future__ import annotations

import json
from typing import Any

import attrs


@attrs.frozen
class Event:
    """One SSE event: its ``name`` (``event:`` line), its parsed ``data`` (None if not JSON) and
    its ``raw`` bytes as received (the blank line included)."""

    name: str
    data: Any
    raw: bytes


COUNTED = frozenset({"message_start", "message_delta", "error"})
"""The events whose data the gateway reads while streaming (usage, in-band errors)."""


class SseReader:
    """Splits bytes into events; ``feed`` returns the events completed by a chunk. ``parse``:
    the event names whose data is decoded (None: all; the others keep ``data`` None)."""

    def __init__(self, parse: frozenset[str] | None = None) -> None:
        self._buffer = b""
        self._parse = parse

    def feed(self, chunk: bytes) -> list[Event]:
        buffer = self._buffer + chunk if self._buffer else chunk
        events: list[Event] = []
        start = 0
        lf = buffer.find(b"\n\n")  # the next of each separator at or after ``start`` (-1: none)
        crlf = buffer.find(b"\r\n\r\n") if b"\r" in buffer else -1
        while lf >= 0 or crlf >= 0:
            ends = [i + size for i, size in ((lf, 2), (crlf, 4)) if i >= 0]
            end = min(ends)
            events.append(_parse(buffer[start:end], self._parse))
            start = end
            if 0 <= lf < start:
                lf = buffer.find(b"\n\n", start)
            if 0 <= crlf < start:
                crlf = buffer.find(b"\r\n\r\n", start)
        self._buffer = buffer[start:]
        return events

    @property
    def pending(self) -> bytes:
        """Bytes received that do not end an event yet."""
        return self._buffer


def _parse(raw: bytes, names: frozenset[str] | None) -> Event:
    name = "message"
    data_lines: list[bytes] = []
    for line in raw.splitlines():  # CR, LF or CRLF (the SSE line ends); bytes, so nothing is decoded in vain
        if line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", errors="replace")
        elif line.startswith(b"data:"):
            data_lines.append(line[5:].lstrip(b" "))
    if names is not None and name not in names:
        return Event(name=name, data=None, raw=raw)
    try:
        data = json.loads(b"\n".join(data_lines).decode("utf-8", errors="replace")) if data_lines else None
    except ValueError:
        data = None
    return Event(name=name, data=data, raw=raw)


@attrs.define
class Usage:
    """Tokens of one call, as the stream reports them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def update(self, event: Event) -> None:
        """Take the usage of a ``message_start`` (message.usage) or ``message_delta`` (usage;
        cumulative output tokens, so the latest value wins)."""
        data = event.data if isinstance(event.data, dict) else {}
        if event.name == "message_start":
            message = data.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
        elif event.name == "message_delta":
            usage = data.get("usage")
        else:
            return
        if not isinstance(usage, dict):
            return
        for field in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            value = usage.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(self, field, value)

    def to_json(self) -> dict[str, int]:
        return attrs.asdict(self)


def overloaded_event(event: Event) -> bool:
    """An in-band ``error`` event saying the provider is overloaded or rate-limited."""
    if event.name != "error" or not isinstance(event.data, dict):
        return False
    error = event.data.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    return kind in ("overloaded_error", "rate_limit_error")

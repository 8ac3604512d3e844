"""Sorted id lists kept as positions into an array of ids, and a JSON writer that streams them.

A comparison of two million-item runs with a continuous scorer names nearly every item as a
regression or an improvement; as Python strs those lists are most of compare's memory. The CLI
asks ``compare_runs`` for them as ``SortedIds`` (4 bytes an id) and writes the document with
``json_chunks``: the same bytes as ``orjson.dumps`` of the document with plain lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Iterator, overload

import numpy as np
import orjson

from ._columns import _text

CHUNK = 1 << 16  # ids decoded and encoded at a time


class SortedIds(Sequence[str]):
    """A list of ids, read on demand: ``ids[positions]`` in the order of ``positions`` (the
    ids as text, as ``compare_runs``' lists hold them). Equal to a list of the same strs."""

    __slots__ = ("ids", "positions")

    def __init__(self, ids: Any, positions: Any) -> None:
        self.ids = ids
        self.positions = positions

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [_text(i) for i in self.ids[self.positions[index]].tolist()]
        return _text(self.ids[self.positions[index]])

    def chunks(self, size: int | None = None) -> Iterator[list[str]]:
        """The ids, ``size`` (default ``CHUNK``) at a time."""
        size = CHUNK if size is None else size
        for start in range(0, len(self.positions), size):
            yield self[start:start + size]

    def __iter__(self) -> Iterator[str]:
        for chunk in self.chunks():
            yield from chunk

    def same(self, other: SortedIds) -> bool:
        """The same ids in the same order, known from the positions (one array of ids)."""
        return other.ids is self.ids and bool(np.array_equal(other.positions, self.positions))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SortedIds) and self.same(other):
            return True
        if not isinstance(other, (SortedIds, list, tuple)) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # (as a list's)

    def __repr__(self) -> str:
        return f"SortedIds({len(self)} ids)"


def json_chunks(value: Any) -> Iterator[bytes]:
    """``orjson.dumps(value)`` in pieces, a ``SortedIds`` written as the JSON list of its ids a
    chunk at a time (the pieces joined are the bytes of the document with plain lists)."""
    if isinstance(value, SortedIds):
        yield b"["
        first = True
        for chunk in value.chunks():
            if not first:
                yield b","
            yield orjson.dumps(chunk)[1:-1]
            first = False
        yield b"]"
    elif isinstance(value, dict) and any(_holds_ids(v) for v in value.values()):
        yield b"{"
        for number, (key, item) in enumerate(value.items()):
            yield (b',' if number else b'') + orjson.dumps(key) + b":"
            yield from json_chunks(item)
        yield b"}"
    elif isinstance(value, (list, tuple)) and any(_holds_ids(v) for v in value):
        yield b"["
        for number, item in enumerate(value):
            if number:
                yield b","
            yield from json_chunks(item)
        yield b"]"
    else:
        yield orjson.dumps(value)


def _holds_ids(value: Any) -> bool:
    if isinstance(value, SortedIds):
        return True
    if isinstance(value, dict):
        return any(_holds_ids(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_ids(v) for v in value)
    return False

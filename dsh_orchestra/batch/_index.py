"""A dataset validated once and then read item by item: ``index_dataset``.

``load_dataset`` keeps every item (about 300 bytes each: 300 MiB for a million items);
``score`` needs one item at a time, by id. ``DatasetIndex`` keeps per item a 64-bit hash of
its id, the byte offset of its line and its line number (24 bytes), in hash order, and reads
the line again when the item is asked for; a hash shared by two ids is told apart by the ids
read back. Validation is ``load_dataset``'s: the same ``DatasetError``, problems by line.
"""

from __future__ import annotations

import io
import os
from array import array
from collections import Counter
from pathlib import Path
from typing import IO, Any, Iterator, Mapping

import numpy as np
import orjson

from ._dataset import BatchItem, DatasetError, _check_item, _plain

_CACHE = 256  # items kept after a read (score asks for an item three times, and its epochs follow each other)


def id_hash(item_id: str) -> int:
    """A 64-bit hash of an id, stable within the process (the index never leaves it)."""
    return hash(item_id)


class DatasetIndex(Mapping[str, BatchItem]):
    """A validated dataset as a read-only mapping id -> ``BatchItem`` that reads each item's
    line when asked (see the module); ``position(id)`` is a number of the item's own, below ``len``.
    Also what ``load_dataset``'s callers count: ``targets`` (items with a target),
    ``metadata_keys`` (items per metadata key) and ``unknown`` (unknown keys seen).
    Close it (or use it as a context manager) when done: it holds the file open."""

    def __init__(self, path: Path, data: bytes | None, hashes: Any, offsets: Any, lines: Any, *,
                 targets: int, metadata_keys: Mapping[str, int], unknown: list[str]) -> None:
        self.path = path
        self._data = data
        order = np.argsort(hashes, kind="stable")  # an item's position is its place in this order
        self._sorted = hashes[order]
        self._offsets = offsets[order]  # per item: where its line starts
        self._lines = lines[order]  # per item: its line number
        self.targets = targets
        self.metadata_keys = dict(metadata_keys)
        self.unknown = unknown
        self._handle: IO[bytes] | None = None
        self._cache: dict[str, tuple[int, BatchItem]] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[str]:
        for position in np.argsort(self._lines).tolist():  # the file's order
            yield self._read(position).id

    def __contains__(self, item_id: object) -> bool:
        return isinstance(item_id, str) and self._find(item_id) is not None

    def __getitem__(self, item_id: str) -> BatchItem:
        found = self._find(item_id) if isinstance(item_id, str) else None
        if found is None:
            raise KeyError(item_id)
        return found[1]

    def position(self, item_id: str) -> int | None:
        """A number >= 0 and below ``len`` that is this item's alone (None: no such id)."""
        found = self._find(item_id)
        return None if found is None else found[0]

    def _find(self, item_id: str) -> tuple[int, BatchItem] | None:
        cache = self._cache
        found = cache.get(item_id)
        if found is not None:
            return found
        key = id_hash(item_id)
        start = int(np.searchsorted(self._sorted, key, side="left"))
        sorted_hashes = self._sorted
        while start < len(sorted_hashes) and sorted_hashes[start] == key:  # (more than one: ids sharing a hash)
            position = start
            item = self._read(position)
            if item.id == item_id:
                if len(cache) >= _CACHE:
                    del cache[next(iter(cache))]
                cache[item_id] = found = (position, item)
                return found
            start += 1
        return None

    def _read(self, position: int) -> BatchItem:
        handle = self._handle
        if handle is None:
            handle = self._handle = open(self.path, "rb") if self._data is None else io.BytesIO(self._data)
        handle.seek(int(self._offsets[position]))
        number = int(self._lines[position])
        try:
            raw = orjson.loads(handle.readline())
        except orjson.JSONDecodeError:
            raw = None
        item, _, _ = _check_item(raw, number)
        if item is None:
            raise DatasetError(str(self.path), [(number, "changed after it was checked; run again")])
        return item

    def close(self) -> None:
        """Close the dataset file (reading an item again reopens it)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._cache.clear()

    def __enter__(self) -> DatasetIndex:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            handle.close()


def index_dataset(path: str | os.PathLike[str]) -> DatasetIndex:
    """Read and validate a dataset like ``load_dataset``, keeping 24 bytes per item (see the module).

    Raises:
        DatasetError: malformed lines, missing fields or duplicate ids (all of them, by line),
            or no item.
        OSError: the file cannot be read.
    """
    path = Path(path)
    data = None if path.is_file() else path.read_bytes()  # a pipe: keep what was read
    problems: list[tuple[int, str]] = []
    hashes, offsets, numbers = array("q"), array("q"), array("q")
    targets = 0
    keys: Counter[str] = Counter()
    unknown: set[str] = set()
    offset = 0
    with open(path, "rb") if data is None else io.BytesIO(data) as handle:
        for number, line in enumerate(handle, start=1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                problems.append((number, f"not valid JSON ({exc})"))
                continue
            if type(raw) is dict and _plain(raw):
                item_id, target, metadata = raw["id"], raw.get("target"), raw.get("metadata")
            else:
                item, problem, extra = _check_item(raw, number)
                if item is None:
                    problems.append((number, problem or "invalid item"))
                    continue
                unknown.update(extra)
                item_id, target, metadata = item.id, item.target, item.metadata
            hashes.append(id_hash(item_id))
            offsets.append(start)
            numbers.append(number)
            targets += target is not None
            if metadata:
                keys.update(metadata.keys())
    index = DatasetIndex(path, data, np.frombuffer(hashes, dtype=np.int64) if hashes else np.zeros(0, np.int64),
                         np.frombuffer(offsets, dtype=np.int64) if offsets else np.zeros(0, np.int64),
                         np.frombuffer(numbers, dtype=np.int64) if numbers else np.zeros(0, np.int64),
                         targets=targets, metadata_keys=keys, unknown=sorted(unknown))
    try:
        repeated = _repeats(index)
        if repeated:  # load_dataset's order: each problem at its line
            problems = sorted(problems + repeated, key=lambda problem: problem[0])
        if problems:
            raise DatasetError(str(path), problems)
        if not len(index):
            raise DatasetError(str(path), [(1, "the dataset holds no items")])
    except BaseException:
        index.close()
        raise
    return index


def _repeats(index: DatasetIndex) -> list[tuple[int, str]]:
    """``duplicate id`` problems of the lines whose id an earlier line has (their items are
    then left out of nothing: the dataset is refused). Only ids sharing a hash are read back."""
    hashes = index._sorted
    if len(hashes) < 2:
        return []
    same = hashes[1:] == hashes[:-1]
    if not same.any():
        return []
    out: list[tuple[int, str]] = []
    shared = np.flatnonzero(same)
    runs = np.split(shared, np.flatnonzero(np.diff(shared) != 1) + 1)
    for run in runs:
        positions = sorted((*run.tolist(), int(run[-1]) + 1), key=lambda k: int(index._lines[k]))
        first: dict[str, int] = {}
        for position in positions:  # file order: the first line of an id is its item
            item = index._read(position)
            line = int(index._lines[position])
            if item.id in first:
                out.append((line, f"duplicate id {item.id!r} (first on line {first[item.id]})"))
            else:
                first[item.id] = line
    return out

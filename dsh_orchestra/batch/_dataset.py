"""The batch dataset: JSON Lines in, validated items out, and stable sharding.

Every problem is reported with its line number before any work starts.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from collections import Counter
from typing import Any, Container, Iterator, Mapping

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, override

from .._params import Param
from ..session import content_blocks
from ._options import BatchUsageError

KNOWN_KEYS = frozenset({"id", "prompt", "session_id", "metadata", "target", "choices"})
MAX_REPORTED = 20


class DatasetError(ValueError):
    """The dataset has problems; ``problems`` lists them as (line number, message)."""

    def __init__(self, path: str, problems: list[tuple[int, str]]) -> None:
        shown = "\n".join(f"  line {n}: {m}" for n, m in problems[:MAX_REPORTED])
        more = f"\n  ... and {len(problems) - MAX_REPORTED} more" if len(problems) > MAX_REPORTED else ""
        super().__init__(f"{path}: {len(problems)} problem(s), nothing was run; fix them and run again:\n{shown}{more}")
        self.path = path
        self.problems = problems


@attrs.frozen(kw_only=True)
class BatchItem:
    """One dataset line: its id, its prompt (a string or content blocks), options, metadata,
    and for scoring its ``target`` (a string, or a list of accepted strings) and ``choices``."""

    id: str
    prompt: str | list[dict[str, Any]]
    session_id: str | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    target: str | list[str] | None = None
    choices: list[str] | None = None
    line: int = 0


def _item_id(value: Any, _: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, not {value!r}")
    return value


def _prompt(value: Any, _: Any) -> str | list[dict[str, Any]]:
    try:
        content_blocks(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must be a string or a non-empty list of content blocks ({exc})") from None
    return value  # type: ignore[no-any-return]


def _session_id(value: Any, _: Any) -> str | None:
    return None if value is None else _item_id(value, _)


def _metadata(value: Any, _: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"must be an object, not {type(value).__name__}")
    return value


def _target(value: Any, _: Any) -> str | list[str] | None:
    if value is None or isinstance(value, str) or (
        isinstance(value, list) and value and all(isinstance(t, str) for t in value)
    ):
        return value
    raise ValueError(f"must be a string or a non-empty list of strings, not {value!r}")


def _choices(value: Any, _: Any) -> list[str] | None:
    if value is None or (isinstance(value, list) and all(isinstance(c, str) for c in value)):
        return value
    raise ValueError(f"must be a list of strings, not {value!r}")


_CONVERTER = cattrs.Converter(detailed_validation=True)
_CONVERTER.register_structure_hook(BatchItem, make_dict_structure_fn(
    BatchItem, _CONVERTER,
    id=override(struct_hook=_item_id), prompt=override(struct_hook=_prompt),
    session_id=override(struct_hook=_session_id), metadata=override(struct_hook=_metadata),
    target=override(struct_hook=_target), choices=override(struct_hook=_choices), line=override(omit=True),
))
"""Dataset lines -> ``BatchItem``: every field's problem at once, in the dataset's words."""


def _problems(exc: cattrs.ClassValidationError) -> list[str]:
    """``'field' must be ...`` per failed field (``missing required field 'field'``)."""
    out = []
    for error, note in exc.group_exceptions()[0]:
        name = note.name
        if isinstance(error, KeyError):
            out.append(f"missing required field {name!r}")
        else:
            out.append(f"{name!r} {error}"[:300])
    return out


def _plain(raw: dict[str, Any]) -> bool:
    """The common well-formed line (a string id and prompt, known keys of plain types): valid
    without the converter."""
    item_id, session_id, metadata = raw.get("id"), raw.get("session_id"), raw.get("metadata")
    target, choices = raw.get("target"), raw.get("choices")
    return (type(item_id) is str and item_id != "" and type(raw.get("prompt")) is str and raw.keys() <= KNOWN_KEYS
            and (session_id is None or (type(session_id) is str and session_id != ""))
            and (metadata is None or type(metadata) is dict)
            and (target is None or type(target) is str)
            and (choices is None or (type(choices) is list and all(type(c) is str for c in choices))))


def _edits(a: str, b: str) -> int:
    """The optimal string alignment distance: insertions, deletions, substitutions and swaps
    of two neighbours (``traget`` is one edit from ``target``)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i] + [0] * len(b)
        for j, y in enumerate(b, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def near_key(key: str) -> str | None:
    """The dataset key ``key`` is a likely typo of: one or two edits from a known key (one for
    keys of up to four letters, ``id``), or None."""
    best: tuple[int, str] | None = None
    for known in sorted(KNOWN_KEYS):
        limit = 1 if len(known) <= 4 else 2
        if abs(len(key) - len(known)) > limit or len(key) < 2:
            continue
        distance = _edits(key.lower(), known)
        if distance <= limit and (best is None or distance < best[0]):
            best = (distance, known)
    return best[1] if best is not None else None


def _typos(keys: Any) -> str | None:
    """The problem of a line whose unknown keys look like typos of known ones, or None."""
    found = [(key, near) for key in keys if key not in KNOWN_KEYS and (near := near_key(key)) is not None]
    if not found:
        return None
    return "; ".join(f"unknown key {key!r}: did you mean `{near}`? (rename it, or move it into metadata)" for key, near in found)


def _check_item(raw: Any, line: int = 0) -> tuple[BatchItem | None, str | None, list[str]]:
    if type(raw) is dict:
        if _plain(raw):
            return BatchItem(id=raw["id"], prompt=raw["prompt"], session_id=raw.get("session_id"),
                             metadata=raw.get("metadata") or {}, target=raw.get("target"), choices=raw.get("choices"),
                             line=line), None, []
    elif not isinstance(raw, dict):
        return None, f"expected a JSON object, not {type(raw).__name__}", []
    typo = _typos(raw)
    if typo is not None:
        return None, (f"item {raw['id']!r}: " if isinstance(raw.get("id"), str) and raw["id"] else "") + typo, []
    try:
        item = _CONVERTER.structure(raw, BatchItem)
    except cattrs.ClassValidationError as exc:
        problems = _problems(exc)
        item_id = raw.get("id")
        if "id" not in raw or not isinstance(item_id, str) or not item_id:  # no name to give the item
            return None, next(p for p in problems if p.startswith(("'id'", "missing required field 'id'"))), []
        return None, f"item {item_id!r}: " + "; ".join(problems), []
    item = attrs.evolve(item, line=line)
    return item, None, sorted(set(raw) - KNOWN_KEYS)




def _lines(path: Path, data: bytes | None) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, decoded JSON, None) or (line number, None, problem) per non-blank line."""
    with open(path, "rb") if data is None else io.BytesIO(data) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, orjson.loads(line), None
            except orjson.JSONDecodeError as exc:
                yield number, None, f"not valid JSON ({exc})"


def _accepted(path: Path, data: bytes | None = None, *, build: bool = True, fields: bool = False) -> Iterator[Any]:
    """(id, session_id, item, unknown keys) of each valid item of the dataset, in file order
    (with ``fields``, also whether it has a target and its metadata); at the end a
    ``DatasetError`` naming every bad line and repeated id, or the file holding no item.
    Without ``build`` a plain line is validated without making its item (None)."""
    problems: list[tuple[int, str]] = []
    first_line: dict[str, int] = {}
    for number, raw, problem in _lines(path, data):
        item: BatchItem | None = None
        extra: list[str] = []
        if problem is None and not build and type(raw) is dict and _plain(raw):
            item_id, session_id = raw["id"], raw.get("session_id")
            target, metadata = raw.get("target") is not None, raw.get("metadata")
        else:
            if problem is None:
                item, problem, extra = _check_item(raw, number)
            if item is None:
                problems.append((number, problem or "invalid item"))
                continue
            item_id, session_id = item.id, item.session_id
            target, metadata = item.target is not None, item.metadata
        if item_id in first_line:
            problems.append((number, f"duplicate id {item_id!r} (first on line {first_line[item_id]})"))
            continue
        first_line[item_id] = number
        yield (item_id, session_id, item, extra, target, metadata) if fields else (item_id, session_id, item, extra)
    if problems:
        raise DatasetError(str(path), problems)
    if not first_line:
        raise DatasetError(str(path), [(1, "the dataset holds no items")])


def load_dataset(path: str | os.PathLike[str]) -> tuple[list[BatchItem], list[str]]:
    """Read and validate a dataset; return its items and the unknown keys seen (ignored).

    Raises:
        DatasetError: malformed lines, missing fields or duplicate ids (all of them, by line).
        OSError: the file cannot be read.
    """
    items: list[BatchItem] = []
    unknown: set[str] = set()
    for _, _, item, extra in _accepted(Path(path)):
        assert item is not None
        unknown.update(extra)
        items.append(item)
    return items, sorted(unknown)


@attrs.frozen(kw_only=True)
class DatasetCheck:
    """What ``check_dataset`` learnt: the ids (of the shard), unknown keys, the file's identity."""

    path: Path
    ids: frozenset[str]
    items: int  # in the whole file
    unknown: tuple[str, ...]
    fingerprint: tuple[int, int, int]  # (inode, size, mtime in ns) when checked
    data: bytes | None = attrs.field(default=None, repr=False)  # a pipe's content: it cannot be read twice
    session_ids: int = 0  # items (of the whole file) with their own session_id
    targets: int = 0  # items (of the whole file) with a target
    metadata_keys: Mapping[str, int] = attrs.field(factory=dict)  # items (of the whole file) per metadata key


def _fingerprint(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_ino, info.st_size, info.st_mtime_ns


def check_dataset(path: str | os.PathLike[str], shard: tuple[int, int] | None = None) -> DatasetCheck:
    """Validate a whole dataset like ``load_dataset`` but keep only the ids (of ``shard``).

    For large datasets: a batch validates first and then streams the items
    (``iter_dataset``), holding about one id per item instead of every prompt.

    Raises:
        DatasetError: as ``load_dataset``.
        OSError: the file cannot be read.
    """
    path = Path(path)
    fingerprint = _fingerprint(path)
    data = None if path.is_file() else path.read_bytes()  # a pipe or a device: keep what was read
    ids: set[str] = set()
    unknown: set[str] = set()
    count = own = targets = 0
    keys: Counter[str] = Counter()
    for item_id, session_id, _, extra, target, metadata in _accepted(path, data, build=False, fields=True):
        count += 1
        if extra:
            unknown.update(extra)
        own += session_id is not None
        targets += target
        if metadata:
            keys.update(metadata.keys())
        if shard is None or in_shard(item_id, shard):
            ids.add(item_id)
    return DatasetCheck(path=path, ids=frozenset(ids), items=count, unknown=tuple(sorted(unknown)),
                        fingerprint=fingerprint, data=data, session_ids=own, targets=targets, metadata_keys=dict(keys))


def iter_dataset(check: DatasetCheck, *, skip: Container[str] = frozenset()) -> Iterator[BatchItem]:
    """The items ``check`` accepted (its shard), in file order, minus the ids in ``skip``.

    Raises:
        DatasetError: the file changed since it was checked (at once; or while iterating, for a
            change that happens later). Nothing is guessed.
    """
    if check.data is None and _fingerprint(check.path) != check.fingerprint:
        raise DatasetError(str(check.path), [(1, "the file changed after it was checked; run again")])
    return _iter_checked(check, skip)


def _iter_checked(check: DatasetCheck, skip: Container[str]) -> Iterator[BatchItem]:
    ids = check.ids
    for number, raw, problem in _lines(check.path, check.data):
        item = None
        if problem is None:
            item, problem, _ = _check_item(raw, number)
        if item is None:
            raise DatasetError(str(check.path), [(number, f"changed after it was checked: {problem}")])
        if item.id in ids and item.id not in skip:
            yield item


def stable_hash(item_id: str) -> int:
    """A hash of ``item_id`` that is the same in every process and on every machine."""
    return int.from_bytes(hashlib.sha256(item_id.encode("utf-8")).digest()[:8], "big")


def parse_shard(value: str) -> tuple[int, int]:
    """``"I/N"`` -> (I, N) with 0 <= I < N.

    Raises:
        BatchUsageError: not of that form (a ValueError; ``.param`` is ``"shard"``).
    """
    index, sep, count = value.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = -1
    if not sep or n < 1 or not 0 <= i < n:
        raise BatchUsageError(Param("shard", value, spelled="shard"), f" must be I/N with 0 <= I < N (for example 0/4), not {value!r}")
    return i, n


def in_shard(item_id: str, shard: tuple[int, int] | None) -> bool:
    """True when ``item_id`` belongs to shard ``(I, N)`` (always, without a shard)."""
    if shard is None:
        return True
    index, count = shard
    return stable_hash(item_id) % count == index

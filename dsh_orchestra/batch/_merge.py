"""``merge_results``: shard results files (runs with ``shard=(I, N)``) into one, each (id, epoch) once.

Two passes and an index: the first reads every shard with the one reader (``read_results``)
and keeps, per (id, epoch), where its line is and a digest of its bytes (about 100 bytes per
line, never the lines); the second copies each line's bytes, unchanged, in the dataset's order
(or by id and epoch) into a temporary file that then takes the output's name. Nothing is
written unless every check passed. docs/batch.md ("Merging shards") has the contract.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from .._params import Param, ParamError
from ..eval import EvalPlan, ScorerSpec
from ..results import ResultLine, read_results, replaced_atomically
from ._dataset import check_dataset, iter_dataset
from ._summary import BatchSummary, Tally

SIDECAR_SUFFIX = ".run.json"
"""``RESULTS.run.json``: the configuration of the run that wrote RESULTS (written by ``batch``)."""


class MergeError(ParamError, ValueError):
    """The shards cannot be merged as asked; the message names the file, the line and what to fix."""


@attrs.frozen(kw_only=True)
class MergeReport:
    """What ``merge_results`` did: ``lines`` written, from ``shards`` files; ``duplicates``:
    identical lines met more than once (written once); ``torn``: shards whose torn last line
    was left out; ``missing``: dataset (id, epoch) pairs with no line (``allow_missing``);
    ``summary``: the merged results' summary."""

    lines: int
    shards: int
    duplicates: int
    torn: tuple[str, ...]
    missing: tuple[tuple[str, int], ...]
    epochs: int
    summary: BatchSummary


@attrs.frozen
class _Where:
    shard: int
    offset: int
    length: int
    line: int
    digest: bytes


def _sidecar(path: Path) -> dict[str, Any] | None:
    side = path.with_name(path.name + SIDECAR_SUFFIX)
    if not side.is_file():
        return None
    try:
        value = json.loads(side.read_bytes())
    except ValueError as exc:
        raise MergeError(f"{side}: not JSON ({exc}): the configuration record of {path} is damaged; "
                         "remove it to merge without checking that shard's configuration") from None
    if not isinstance(value, dict):
        raise MergeError(f"{side}: not a configuration record (a JSON object); remove it or give the right file")
    return value


def _check_configurations(shards: Sequence[Path]) -> dict[str, Any] | None:
    """The shards' common configuration record (None when no shard has one).

    Raises:
        MergeError: two shards' records differ (naming the parts).
    """
    first: tuple[Path, dict[str, Any]] | None = None
    for path in shards:
        record = _sidecar(path)
        if record is None:
            continue
        if first is None:
            first = (path, record)
            continue
        differ = sorted(k for k in set(first[1]) | set(record) if first[1].get(k) != record.get(k))
        if differ:
            raise MergeError(f"{path} and {first[0]} come from runs with different configurations "
                             f"({', '.join(differ)} differ, per their {SIDECAR_SUFFIX} records): "
                             "merge only shards of one run (same dataset, scorers, scenario, model)")
    return first[1] if first is not None else None


@attrs.define
class _Seen:
    """What pass one learnt besides the index."""

    duplicates: int = 0
    torn: list[str] = attrs.field(factory=list)
    top: list[int] = attrs.field(factory=list)  # each shard's highest epoch
    scorers: list[str] = attrs.field(factory=list)  # in the order of the first line with scores
    judged: bool = False  # a line has judge_usage


def _index(shards: Sequence[Path]) -> tuple[dict[tuple[str, int], _Where], _Seen]:
    """Pass one: where each (id, epoch) is, and what else the lines say."""
    index: dict[tuple[str, int], _Where] = {}
    seen_all = _Seen()
    for number, path in enumerate(shards):
        if not path.is_file():
            raise MergeError(f"shard {str(path)!r} does not exist or is not a file")
        stream = read_results(path)
        highest = 0
        for line in stream:
            if line.scores and not seen_all.scorers:
                seen_all.scorers = list(line.scores)
            seen_all.judged = seen_all.judged or line.judge_usage is not None
            key = (line.id, line.epoch_number)
            highest = max(highest, key[1])
            raw = stream.raw if stream.raw.endswith(b"\n") else stream.raw + b"\n"
            digest = hashlib.blake2b(raw, digest_size=16).digest()
            seen = index.get(key)
            if seen is None:
                index[key] = _Where(number, stream.offset, len(stream.raw), stream.number, digest)
            elif seen.digest == digest:
                seen_all.duplicates += 1
            else:
                raise MergeError(
                    f"{path}: line {stream.number}: id {line.id!r} epoch {key[1]} is also at {shards[seen.shard]}: "
                    f"line {seen.line} with different content: the same item ran twice (overlapping shards, or "
                    "two runs); keep one of the two lines and merge again")
        if stream.count == 0:
            raise MergeError(f"{path}: holds no result line (an empty shard): give the shard's results file, "
                             "or leave it out when its run wrote nothing")
        if stream.torn:
            seen_all.torn.append(str(path))
        seen_all.top.append(highest)
    return index, seen_all


def _check_epochs(shards: Sequence[Path], top: Sequence[int]) -> int:
    epochs = max(top)
    for path, highest in zip(shards, top, strict=True):
        if highest != epochs:
            raise MergeError(f"{path}: its highest epoch is {highest}, another shard's {epochs}: shards of runs "
                             "with different ", Param("epochs", spelled="epochs"), " cannot be merged (finish the shard with ",
                             Param("resume", spelled="resume=True"), f" and {epochs} ", Param("epochs", spelled="epochs"),
                             ", or merge shards of one configuration)")
    return epochs


def _order(index: dict[tuple[str, int], _Where], dataset: Path | None, epochs: int,
           ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The keys in output order, and the dataset's (id, epoch) pairs that have no line."""
    if dataset is None:
        return sorted(index), []
    check = check_dataset(dataset)
    outside = sorted({key[0] for key in index if key[0] not in check.ids})
    if outside:
        shown = ", ".join(repr(i) for i in outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
        raise MergeError(f"id(s) {shown} are not in the dataset {str(dataset)!r}: merge shards with the dataset they came from")
    order: list[tuple[str, int]] = []
    missing: list[tuple[str, int]] = []
    for item in iter_dataset(check):
        for epoch in range(1, epochs + 1):
            key = (item.id, epoch)
            (order if key in index else missing).append(key)
    return order, missing


def _copy(shards: Sequence[Path], index: dict[tuple[str, int], _Where], order: Sequence[tuple[str, int]],
          out: Path, tally: Tally) -> None:
    """Pass two: every line's bytes in ``order`` into a temporary file, then renamed to ``out``."""
    handles = [open(path, "rb") for path in shards]
    try:
        with replaced_atomically(out) as temporary:
            for key in order:
                where = index[key]
                handle = handles[where.shard]
                handle.seek(where.offset)
                raw = handle.read(where.length)
                if not raw.endswith(b"\n"):
                    raw += b"\n"
                temporary.write(raw)
                tally.add(ResultLine.from_json(json.loads(raw)))
    finally:
        for handle in handles:
            handle.close()


def merge_results(
    shards: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *, dataset: str | os.PathLike[str] | None = None,
    allow_missing: bool = False, plan: EvalPlan | None = None,
) -> MergeReport:
    """Merge the results files ``shards`` into ``out``: each (id, epoch) once, its line's bytes as
    written, in the order of ``dataset`` (its items, each with its epochs) or by id and epoch.

    Identical lines met twice are written once; a torn last line of a shard is left out, as
    a resume leaves it (that item has no line). ``plan`` (reducer, group_by, seed, prices)
    makes the summary's metrics; its epochs are those of the lines, its scorers (when it has
    none) those the shards' configuration records name, else those of the first scored line. ``out`` also gets
    the shards' common configuration record (``OUT.run.json``) when they have one.

    Raises:
        MergeError: a shard that is missing, empty or not a results file (file and line); an
            (id, epoch) in two shards with different content (both places); shards of runs
            with different configurations or epochs; with ``dataset``, ids not in it, or
            (without ``allow_missing``) dataset items with no line; ``out`` is a shard or exists.
            Nothing is written then.
        DatasetError: ``dataset`` is not a valid dataset.
    """
    paths = [Path(shard) for shard in shards]
    out = Path(out)
    if not paths:
        raise MergeError("give at least one shard results file")
    if out.exists():
        raise MergeError(Param("out", str(out)), " already exists: merge into a new file (nothing is overwritten)")
    if not out.parent.is_dir():
        raise MergeError(Param("out", str(out)), f": directory {str(out.parent)!r} does not exist; create it first")
    record = _check_configurations(paths)
    index, seen = _index(paths)
    epochs = _check_epochs(paths, seen.top)
    order, missing = _order(index, Path(dataset) if dataset is not None else None, epochs)
    if missing and not allow_missing:
        shown = ", ".join(f"{i!r}" + (f" (epoch {e})" if epochs > 1 else "") for i, e in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise MergeError(f"{len(missing)} item(s) of the dataset have no line in any shard: {shown}{more}; "
                         "give the missing shards, finish them with ", Param("resume", spelled="resume=True"),
                         ", or accept a partial merge with ",
                         Param("allow_missing", spelled="allow_missing=True"))
    base = plan if plan is not None else EvalPlan()
    if not base.scorers:
        recorded = record.get("scorers") if record is not None else None
        names: list[Any] = recorded if isinstance(recorded, list) else seen.scorers
        base = attrs.evolve(base, scorers=tuple(
            ScorerSpec(str(name), "judge" if seen.judged and index == 0 else "recorded") for index, name in enumerate(names)))
    if base.reducer.k is not None and base.reducer.k > epochs:
        raise MergeError(Param("epoch_reducer", base.reducer.name), f" needs k <= the epochs in the shards ({epochs})")
    tally = Tally(attrs.evolve(base, epochs=epochs))
    _copy(paths, index, order, out, tally)
    if record is not None:
        side = out.with_name(out.name + SIDECAR_SUFFIX)
        side.write_text(json.dumps(record, indent=2) + "\n")
    summary = tally.summary(total=len(order), resumed=len(order), processed=0, duration_s=0.0, retries=0)
    summary = attrs.evolve(summary, evaluation=tally.to_json(), results=str(out))
    return MergeReport(lines=len(order), shards=len(paths), duplicates=seen.duplicates, torn=tuple(seen.torn),
                       missing=tuple(missing), epochs=epochs, summary=summary)

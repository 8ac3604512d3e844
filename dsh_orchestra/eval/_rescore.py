"""Re-scoring finished results (``dsh-orchestra score``): RESULTS in, RESCORED and a summary out.

Nothing runs again: each result line is scored from what it holds (final response, status,
subagents, approvals, usage, a kept workspace); only ``judge`` scorers start a runtime. RESULTS
is only read; RESCORED is written to a temporary file and renamed into place.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import orjson
import trio

from .._params import Param, ParamError
from .._version import __version__
from ..gateway import DEFAULT_GATEWAY, GatewayOptions
from ..runtime import RuntimeSpec
from ._apply import AttemptScores, BoundScorer, bind_scorers, check_scorers, score_attempt
from ._judge import open_judges
from ._workers import DEFAULT_TIMEOUT, DEFAULT_WORKERS, needs_workers, open_scorer_workers
from ._score import EvalResult, ItemLike
from ..results import ResultLine, ResultsFileError, TallyLine, Usage, read_results, replaced_atomically
from ._tally import EvalPlan, EvalTally, evaluated, sha256_file

log = logging.getLogger("dsh_orchestra.eval")

CHUNK = 64  # result lines scored concurrently (their order is kept)


class RescoreError(ParamError, ValueError):
    """RESULTS, the dataset or RESCORED cannot be used as given; the message says what to fix."""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _line_problem(value: Any) -> str | None:
    """What ``score`` refuses in a line: not an object with a string ``id``, a bad ``epoch``."""
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        return "is not a result object with a string 'id'"
    epoch = value.get("epoch", 1)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        return f": 'epoch' must be an integer >= 1, not {epoch!r}"
    return None


def read_result_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every complete result line, read line by line
    (``results.read_results`` with this command's rule: a string ``id`` and a valid
    ``epoch``); a torn last line is skipped.

    Raises:
        RescoreError: a line before the last one is not a result object.
    """
    for number, line in numbered_lines(path):
        yield number, line.to_json()


def numbered_lines(path: Path) -> Iterator[tuple[int, ResultLine]]:
    """(line number, ``ResultLine``) of every complete line, by ``read_result_lines``'s rules."""
    stream = read_results(path, check=_line_problem)
    try:
        for line in stream:
            yield stream.number, line
    except ResultsFileError as exc:
        if exc.detail is not None:
            raise RescoreError(f"{path}: line {exc.line} is not valid JSON ({exc.detail})") from exc
        space = "" if exc.problem.startswith(":") else " "
        raise RescoreError(f"{path}: line {exc.line}{space}{exc.problem}") from exc
    if stream.torn:
        log.warning("%s: skipped a torn last line (%d bytes)", path, stream.torn)


def _result_of(line: ResultLine) -> EvalResult:
    raw = line.to_json()  # scorers see the subagents, approvals and error as the file has them
    workspace = line.workspace
    path = Path(workspace) if workspace is not None and Path(workspace).is_dir() else None
    error = raw.get("error")
    return EvalResult(
        final_response=line.final_response if line.final_response is not None else "",
        status=line.status,
        finish_reason=line.finish_reason,
        subagents=tuple(raw.get("subagents") or ()),
        approvals=tuple(raw.get("approvals") or ()),
        usage=line.usage if line.usage is not None else Usage(),
        workspace=path,
        epoch=line.epoch_number,
        error=error if isinstance(error, dict) else None,
    )


def _check_out(results: Path, out: Path, summary: Path | None) -> None:
    for name, path in (("out", out), ("summary", summary)):
        if path is None:
            continue
        named = Param(name, str(path))
        if path.is_dir():
            raise RescoreError(named, " is a directory; give a file path")
        if not path.parent.is_dir():
            raise RescoreError(named, f": directory {str(path.parent)!r} does not exist; create it first")
        if path.exists() and os.path.samefile(path, results):
            raise RescoreError(named, " is RESULTS itself; score never modifies RESULTS: choose another file")


async def rescore(
    results: str | os.PathLike[str],
    items: Mapping[str, ItemLike],
    out: str | os.PathLike[str],
    plan: EvalPlan,
    *,
    summary: str | os.PathLike[str] | None = None,
    judge_runtime: RuntimeSpec | None = None,
    dataset: Mapping[str, Any] | None = None,
    scoring_sha256: str | None = None,
    argv: list[str] | None = None,
    scorer_workers: int = DEFAULT_WORKERS,
    scorer_timeout: float | None = DEFAULT_TIMEOUT,
    gateway: GatewayOptions | None = DEFAULT_GATEWAY,
) -> dict[str, Any]:
    """Score every line of ``results`` with ``plan`` and write them, new ``scores`` in, to ``out``;
    return (and write to ``summary``) the summary. ``items`` are the dataset's items by id (a
    mapping that also has ``position(id)``, the item's index in the dataset or None, as
    ``batch.DatasetIndex``, is read item by item: nothing per item is kept but the tally's);
    judges run on ``judge_runtime`` (default: the simulator) unless they name their own; a judge's
    real ``dsh`` calls the model through a gateway of its own (``gateway``; None: directly).
    ``module:attr`` scorers run in ``scorer_workers`` worker processes (0: in this process),
    each call bounded by ``scorer_timeout`` seconds (``bind_scorers``).

    Raises:
        RescoreError: unreadable or malformed results, an id not in the dataset, a pass@k
            above the epochs found, or an output path that cannot be used (nothing written).
        ScoringError: a Python scorer cannot be loaded.
        PricesError: the route has no price.
    """
    started = _now()
    results, out = Path(results), Path(out)
    summary_path = Path(summary) if summary is not None else None
    if not results.is_file():
        raise RescoreError(f"results file {str(results)!r} does not exist or is not a file")
    _check_out(results, out, summary_path)
    check_scorers(plan.scorers)
    price = plan.price()
    tally = EvalTally(plan, durations=False)  # (the summary has no latency percentiles)
    ok = lines = 0
    epochs = 1
    position = _positions(items)
    seen: dict[int, bytearray] = {}  # epoch -> per dataset item, whether a line of it was kept
    present = bytearray(len(items))
    with replaced_atomically(out) as handle:
        async with open_judges(plan.scorers, fallback=judge_runtime, gateway=gateway) as judges, \
                open_scorer_workers(scorer_workers if needs_workers(plan.scorers) else 0) as workers:
            scorers = bind_scorers(plan.scorers, judges=judges, workers=workers, timeout=scorer_timeout)
            # One pass, line by line (memory: the tally's columns, not the lines): each line is
            # checked, scored and written in chunks; a refused line ends it with nothing written.
            for chunk in _chunks(_kept_lines(results, position, len(items), seen, present), CHUNK):
                scored = await _score_chunk(scorers, items, [line for line, _ in chunk])
                for (line, number), attempt in zip(chunk, scored, strict=True):
                    new = _rescored(line, evaluated(plan, line.usage or Usage(), attempt.scores, attempt.judge_usage,
                                                    line.epoch_number, price))
                    handle.write(orjson.dumps(new) + b"\n")
                    counted = TallyLine(new)
                    metadata = getattr(items[line.id], "metadata", None)  # the dataset's groups
                    counted.metadata = metadata if isinstance(metadata, dict) else {}
                    tally.add(counted, item=number)
                    ok += counted.status == "ok"
                    lines += 1
                    epochs = max(epochs, line.epoch_number)
            if plan.reducer.k is not None and plan.reducer.k > epochs:
                raise RescoreError(Param("epoch_reducer", plan.reducer.name), f" needs k <= the epochs in RESULTS ({epochs})")
    evaluation = tally.to_json()
    report: dict[str, Any] = {
        "results": lines,
        "items": present.count(1),
        "ok": ok,
        "error": lines - ok,
        **evaluation,
        "warnings": tally.warnings(evaluation),
        "scorers_without_value": tally.scorers_without_value(evaluation),
        "run": {
            "dsh_orchestra_version": __version__,
            "results": {"path": str(results), "sha256": sha256_file(results)},
            "dataset": dict(dataset) if dataset is not None else None,
            "scoring_sha256": scoring_sha256,
            "scorers": plan.names,
            "epochs": epochs,
            "reducer": plan.reducer.name,
            "seed": plan.seed,
            "group_by": plan.group_by,
            "cluster_by": plan.cluster_by,
            "argv": list(sys.argv if argv is None else argv),
            "start_time": started,
            "end_time": _now(),
        },
    }
    if summary_path is not None:
        summary_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    return report


def _positions(items: Mapping[str, ItemLike]) -> Callable[[str], int | None]:
    """Each id's index in ``items`` (None: not there): ``items.position`` when it has one, else a dict."""
    found = getattr(items, "position", None)
    if callable(found):
        return found  # type: ignore[no-any-return]
    return {item_id: number for number, item_id in enumerate(items)}.get  # (the dataset's own id strings)


def _kept_lines(results: Path, index: Callable[[str], int | None], count: int, seen: dict[int, bytearray],
                present: bytearray) -> Iterator[tuple[ResultLine, int]]:
    """The lines of ``results`` to score, with their item's index: the first of each (id, epoch)
    (a repeat is skipped with a warning); ``seen`` and ``present`` record, per dataset item
    (``count`` of them), what was kept.

    Raises:
        RescoreError: a line is not a result object, or its id is not in the dataset.
    """
    for number, line in numbered_lines(results):
        position = index(line.id)
        if position is None:
            raise RescoreError(f"{results}: line {number}: id {line.id!r} is not in the dataset; score a results file with the dataset it came from")
        epoch = line.epoch_number
        marks = seen.get(epoch)
        if marks is None:
            marks = seen[epoch] = bytearray(count)
        if marks[position]:
            log.warning("%s: line %d repeats (id %r, epoch %d): the first one is kept", results, number, line.id, epoch)
            continue
        marks[position] = 1
        present[position] = 1
        yield line, position


def _chunks(lines: Iterator[tuple[ResultLine, int]], size: int) -> Iterator[list[tuple[ResultLine, int]]]:
    chunk: list[tuple[ResultLine, int]] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _rescored(line: ResultLine, fields: dict[str, Any]) -> dict[str, Any]:
    """``line``'s object with new evaluation fields: as read, the old ``scores``, ``cost_usd``,
    ``judge_usage`` and ``judge_cost_usd`` out, the new ones (but ``epoch``, kept) at the end
    (``usage`` in its place), as ``ResultLine.evaluation_json`` writes them."""
    fields.pop("epoch", None)  # kept as it was
    raw = {k: v for k, v in line.to_json().items() if k not in _REPLACED}
    for key in _EVALUATION_KEYS:
        value = fields.pop(key, None)
        if value is not None:
            raw[key] = value.to_json() if isinstance(value, Usage) else value
    if fields:
        raise TypeError(f"unexpected evaluation fields {sorted(fields)}")
    return raw


_EVALUATION_KEYS = ("scores", "usage", "cost_usd", "judge_usage", "judge_cost_usd")  # evaluation_json's order
_REPLACED = frozenset({"scores", "cost_usd", "judge_usage", "judge_cost_usd"})


async def _score_chunk(scorers: tuple[BoundScorer, ...], items: Mapping[str, ItemLike], chunk: list[ResultLine]) -> list[AttemptScores]:
    if all(s.kind not in ("python", "judge") for s in scorers):  # built-ins only: no task overhead
        return [await score_attempt(scorers, items[line.id], _result_of(line)) for line in chunk]
    out: list[AttemptScores | None] = [None] * len(chunk)

    async def one(index: int, line: ResultLine) -> None:
        out[index] = await score_attempt(scorers, items[line.id], _result_of(line))

    async with trio.open_nursery() as nursery:
        for index, line in enumerate(chunk):
            nursery.start_soon(one, index, line)
    return [o for o in out if o is not None]


"""Report data: load a batch's files (results, summary, audit log, dataset, transcripts) or a
workflow result, and aggregate them into one JSON-ready payload.

Pure data: no HTML here (``_html`` renders the payload). Reading is tolerant where a crash
leaves marks (a torn last line is skipped) and strict elsewhere (a malformed line in the
middle of a file is a ReportInputError naming the file and line).
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
import orjson

from .._params import Param, integer
from .._version import __version__
from ..approvals import DecisionRecord
from ..results import read_results, result_problem
from ..eval import percentile
from ..workflow import WorkflowResult
from ..eval import CompareInputError, compare_runs, scorer_names
from ._common import DEFAULT_MAX_TEXT as DEFAULT_MAX_TEXT, clip as _clip, number as _number
from ._comparison import comparison_payload
from ._conversation import DEFAULT_MAX_CHARS
from ._evaluation import evaluation_payload
from ._items import item_table

DEFAULT_MAX_TRANSCRIPT = DEFAULT_MAX_CHARS  # characters of one item's conversation embedded
MAX_ERROR_ITEMS = 200  # item ids listed per error type (all are counted)
MAX_ERROR_MESSAGES = 5  # distinct messages shown per error type
HISTOGRAM_BINS = 24
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99))



class ReportInputError(ValueError):
    """An input file is missing or malformed; the message names it (and the line)."""


# ---- reading --------------------------------------------------------------------------


def _read_bytes(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ReportInputError(f"cannot read the {what} {str(path)!r}: {exc.strerror or exc}") from exc


def read_jsonl(
    path: str | os.PathLike[str], what: str, check: Callable[[dict[str, Any]], str | None] | None = None
) -> list[dict[str, Any]]:
    """The JSON objects of a JSON Lines file; a torn last line (no newline, bad JSON) is skipped.
    ``check`` says what is wrong with a line (None: nothing).

    Raises:
        ReportInputError: unreadable, or a complete line is not a JSON object (or fails ``check``).
    """
    data = _read_bytes(path, what)
    lines = data.split(b"\n")
    out: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if number == len(lines):  # the last line, without its newline: torn by a crash
                break
            raise ReportInputError(f"{path}: line {number} of the {what} is not valid JSON ({exc})") from exc
        if not isinstance(value, dict):
            raise ReportInputError(f"{path}: line {number} of the {what} is not a JSON object")
        problem = check(value) if check is not None else None
        if problem is not None:
            raise ReportInputError(f"{path}: line {number} is not a line of a {what}: {problem}")
        out.append(value)
    return out


def load_result_lines(path: str | os.PathLike[str], what: str = "results file", *, strict: bool = False,
                      check: Callable[[Any], str | None] | None = None) -> list[dict[str, Any]]:
    """Every complete result line of a results file, in file order (each epoch's line too).
    ``check`` (a decoded line -> what is wrong with it, or None) is asked after the schema's rules.

    Raises:
        ReportInputError: missing, unreadable, or a line that is not a result object (a string
            ``id``; with ``strict`` also a string ``status``), or that ``check`` refuses (naming
            the file and line).
    """
    if not Path(path).is_file():
        raise ReportInputError(f"{what} {str(path)!r} does not exist")
    lines: list[dict[str, Any]] = []
    try:
        if check is None:
            lines.extend(read_results(path).objects())  # its rules: a string "status" ("ok" or "error") included
        else:
            extra = check
            lines.extend(read_results(path, check=lambda value: result_problem(value) or extra(value)).objects())
    except OSError as exc:
        raise ReportInputError(f"cannot read the {what} {str(path)!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ReportInputError(str(exc)) from exc
    return lines


def load_json(path: str | os.PathLike[str], what: str) -> Any:
    """One JSON document.

    Raises:
        ReportInputError: unreadable or not JSON.
    """
    try:
        return orjson.loads(_read_bytes(path, what))
    except orjson.JSONDecodeError as exc:
        raise ReportInputError(f"the {what} {str(path)!r} is not valid JSON ({exc})") from exc


def prompt_text(prompt: Any) -> str:
    """A dataset prompt as text: a string as is, content blocks as their text ([image] etc.)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        parts = []
        for block in prompt:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
        return "\n".join(parts)
    return orjson.dumps(prompt).decode("utf-8")


def _dataset_problem(line: dict[str, Any]) -> str | None:
    if not isinstance(line.get("id"), str) or not line["id"]:
        return "missing a string 'id'"
    return None if "prompt" in line else "missing 'prompt' (is this a dataset?)"


def _audit_problem(line: dict[str, Any]) -> str | None:
    try:
        DecisionRecord.from_json(line)
    except (KeyError, TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc} (is this an audit log?)"
    return None


def load_audit(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of an approval audit log (as JSON objects).

    Raises:
        ReportInputError: unreadable, or a complete line is not an audit record.
    """
    return read_jsonl(path, "audit log", _audit_problem)


def load_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A batch's summary JSON.

    Raises:
        ReportInputError: unreadable, not JSON, or not a batch summary.
    """
    data = load_json(path, "summary")
    if not isinstance(data, dict):
        raise ReportInputError(f"the summary {os.fspath(path)!r} is not a JSON object")
    # a batch summary counts "total"; a score summary counts "items" (and "results" lines)
    for key in ("total" if "total" in data or "items" not in data else "items", "ok", "error"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ReportInputError(f"the summary {os.fspath(path)!r} is not a batch summary: {key!r} must be an integer, not {value!r}")
    return data


def load_prompts(path: str | os.PathLike[str]) -> dict[str, str]:
    """The dataset's prompts by item id (as text).

    Raises:
        ReportInputError: unreadable, or a complete line is not a dataset item.
    """
    return load_dataset(path)[0]


def load_dataset(path: str | os.PathLike[str]) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """The dataset's prompts by item id (as text), and the ``target`` and ``choices`` of the
    items that have them (by id).

    Raises:
        ReportInputError: unreadable, or a complete line is not a dataset item.
    """
    prompts: dict[str, str] = {}
    expected: dict[str, dict[str, Any]] = {}
    for line in read_jsonl(path, "dataset", _dataset_problem):
        item_id = line.get("id")
        if isinstance(item_id, str) and "prompt" in line and item_id not in prompts:
            prompts[item_id] = prompt_text(line["prompt"])
            fields = {k: line[k] for k in ("target", "choices") if line.get(k) is not None}
            if fields:
                expected[item_id] = fields
    return prompts, expected


def load_workflow(path: str | os.PathLike[str]) -> WorkflowResult:
    """A WorkflowResult written by ``WorkflowResult.to_json()``.

    Raises:
        ReportInputError: unreadable, not JSON or not a workflow result.
    """
    data = load_json(path, "workflow result")
    try:
        return WorkflowResult.from_json(data)
    except ValueError as exc:
        raise ReportInputError(f"{path}: {exc}") from exc


# ---- aggregation ----------------------------------------------------------------------


def _nice_step(span: float, bins: int) -> float:
    raw = span / max(bins, 1)
    if raw <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10.0 * magnitude


def latency_stats(durations: list[float], bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """Count, min, mean, max, percentiles and a histogram of ``durations`` (seconds).

    The histogram's bins are equal and "nice" from 0 (or the minimum) to the 99th percentile;
    slower items fall in the last bin, whose ``overflow`` says so.
    """
    if not durations:
        return {"count": 0, "min": None, "mean": None, "max": None, **{k: None for k, _ in PERCENTILES}, "histogram": None}
    ordered = sorted(durations)
    stats: dict[str, Any] = {
        "count": len(ordered),
        "min": ordered[0],
        "mean": sum(ordered) / len(ordered),
        "max": ordered[-1],
    }
    for key, q in PERCENTILES:
        stats[key] = percentile(ordered, q)
    top = stats["p99"] if stats["p99"] and stats["p99"] > ordered[0] else ordered[-1]
    low = 0.0 if ordered[0] < top / 2 else ordered[0]
    step = _nice_step(top - low, bins) if top > low else max(top, 1e-3) / bins
    low = math.floor(low / step) * step
    count = max(1, min(bins, math.ceil((top - low) / step + 1e-9)))
    counts = [0] * count
    for value in ordered:
        index = int((value - low) / step) if value >= low else 0
        counts[min(index, count - 1)] += 1
    edges = [round(low + step * i, 9) for i in range(count + 1)]
    stats["histogram"] = {"edges": edges, "counts": counts, "overflow": ordered[-1] > edges[-1]}
    return stats


def _error_groups(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    messages: dict[str, Counter[str]] = defaultdict(Counter)
    for line in results:
        error = line.get("error")
        if not isinstance(error, dict):
            continue
        kind = str(error.get("type") or "Error")
        group = groups.setdefault(kind, {"type": kind, "count": 0, "items": []})
        group["count"] += 1
        if len(group["items"]) < MAX_ERROR_ITEMS:
            group["items"].append(str(line.get("id")))
        message, _ = _clip(error.get("message"), 300)
        messages[kind][message or ""] += 1
    out = sorted(groups.values(), key=lambda g: (-g["count"], g["type"]))
    for group in out:
        common = messages[group["type"]].most_common(MAX_ERROR_MESSAGES)
        group["messages"] = [{"message": m, "count": n} for m, n in common]
        group["distinct_messages"] = len(messages[group["type"]])
    return out


def _nested_counts(pairs: Iterable[tuple[str, str]]) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for key, outcome in pairs:
        table[key][outcome] += 1
    return {key: dict(sorted(counts.items())) for key, counts in sorted(table.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))}


def _approvals(results: list[dict[str, Any]], audit: list[dict[str, Any]] | None) -> dict[str, Any]:
    if audit is not None:
        records = [(str(r.get("tool")), str(r.get("rule")), str(r.get("outcome"))) for r in audit]
        latencies = [v for v in (_number(r.get("latency_s")) for r in audit) if v is not None]
        failures = Counter(str(r.get("error")) for r in audit if r.get("error"))
        extra: dict[str, Any] = {
            "latency": {k: v for k, v in latency_stats(latencies).items() if k != "histogram"},
            "errors": [{"message": m, "count": n} for m, n in failures.most_common(20)],
            "sessions": len({r.get("session") for r in audit}),
        }
        source = "audit"
    else:
        records = [
            (str(a.get("tool_name")), str(a.get("rule")), str(a.get("outcome")))
            for line in results
            for a in (line.get("approvals") or [])
            if isinstance(a, dict)
        ]
        extra = {"latency": None, "errors": [], "sessions": None}
        source = "results"
    return {
        "source": source,
        "total": len(records),
        "by_outcome": dict(sorted(Counter(o for _, _, o in records).items())),
        "by_tool": _nested_counts((t, o) for t, _, o in records),
        "by_rule": _nested_counts((r, o) for _, r, o in records),
        **extra,
    }


def _subagents(results: list[dict[str, Any]]) -> dict[str, Any]:
    per_item: Counter[int] = Counter()
    by_status: Counter[str] = Counter()
    by_stop: Counter[str] = Counter()
    for line in results:
        subagents = [s for s in (line.get("subagents") or []) if isinstance(s, dict)]
        per_item[len(subagents)] += 1
        for s in subagents:
            by_status[str(s.get("status"))] += 1
            by_stop[str(s.get("stop_reason"))] += 1
    return {
        "total": sum(n * count for n, count in per_item.items()),
        "items_with": sum(count for n, count in per_item.items() if n),
        "by_status": dict(sorted(by_status.items())),
        "by_stop_reason": dict(sorted(by_stop.items())),
        "per_item": {str(n): per_item[n] for n in sorted(per_item)},
    }


def batch_payload(
    results: list[dict[str, Any]],
    *,
    summary: dict[str, Any] | None = None,
    audit: list[dict[str, Any]] | None = None,
    prompts: dict[str, str] | None = None,
    expected: Mapping[str, Mapping[str, Any]] | None = None,
    transcripts: Path | None = None,
    out_dir: Path = Path("."),
    max_text: int = DEFAULT_MAX_TEXT,
    max_transcript: int = DEFAULT_MAX_TRANSCRIPT,
    group_by: str | None = None,
) -> dict[str, Any]:
    """The batch part of the payload: summary, counts, latency, errors, approvals, subagents,
    evaluations, the table's columns and rows (one per result line) and each row's details."""
    durations = [d for d in (_number(line.get("duration_s")) for line in results) if d is not None]
    status = Counter(str(line.get("status")) for line in results)
    finish = Counter(str(line.get("finish_reason")) if line.get("finish_reason") is not None else "none" for line in results)
    latency = latency_stats(durations)
    computed = {
        "total": len(results),
        "ok": status.get("ok", 0),
        "error": len(results) - status.get("ok", 0),
        "p50_s": latency["p50"],
        "p95_s": latency["p95"],
    }
    names = scorer_names(results)
    columns, rows, details = item_table(
        results, names, prompts=prompts, transcripts=transcripts, out_dir=out_dir, max_text=max_text, max_transcript=max_transcript,
        expected=expected,
    )
    return {
        "summary": summary if isinstance(summary, dict) else computed,
        "summary_source": "file" if isinstance(summary, dict) else "results",
        "status": dict(sorted(status.items(), key=lambda kv: (-kv[1], kv[0]))),
        "finish_reasons": dict(sorted(finish.items(), key=lambda kv: (-kv[1], kv[0]))),
        "latency": latency,
        "errors": _error_groups(results),
        "approvals": _approvals(results, audit),
        "subagents": _subagents(results),
        "columns": columns,
        "rows": rows,
        "scorers": names,
        "evaluation": evaluation_payload(results, summary, group_by=group_by),
        "details": details,
        "details_embedded": sum(1 for d in details if d is not None),  # past MAX_DETAILS items, the worst's only
        "has_prompts": prompts is not None,
        "has_transcripts": transcripts is not None,
        "max_text": max_text,
    }


def _depths(names: list[str], edges: list[tuple[str, str, str]]) -> dict[str, int]:
    """Longest-path layer of each node (cycles, if any, are cut after len(names) rounds)."""
    depth = {name: 0 for name in names}
    for _ in range(len(names)):
        changed = False
        for source, target, _kind in edges:
            if source in depth and target in depth and depth[target] < depth[source] + 1:
                depth[target] = depth[source] + 1
                changed = True
        if not changed:
            break
    return depth


def workflow_payload(result: WorkflowResult, *, max_text: int = DEFAULT_MAX_TEXT) -> dict[str, Any]:
    """The workflow part of the payload: steps (status, timing, items), edges, layers, Mermaid."""
    edges = [(a, b, k) for a, b, k in result.edges]
    names = list(result.steps)
    depth = _depths(names, edges)
    steps = []
    for name, step in result.steps.items():
        items = []
        for item in step.items:
            response, _ = _clip(item.final_response, max_text)
            items.append({
                "index": item.index,
                "status": item.status,
                "attempts": item.attempts,
                "session_id": item.session_id,
                "finish_reason": item.finish_reason,
                "started_s": item.started_s,
                "duration_s": item.duration_s,
                "final_response": response,
                "subagents": len(item.subagents),
                "approvals": [{"tool_name": a.tool_name, "outcome": a.outcome, "rule": a.rule} for a in item.approvals],
                "error": {"type": item.error.type, "message": _clip(item.error.message, max_text)[0]} if item.error else None,
            })
        steps.append({
            "name": name,
            "status": step.status,
            "depth": depth[name],
            "started_s": step.started_s,
            "duration_s": step.duration_s,
            "attempts": step.attempts,
            "items": items,
            "fanned": any(i.index is not None for i in step.items),
            "ok_items": sum(1 for i in step.items if i.status == "ok"),
            "reprompts": sum(i.reprompts for i in step.items),
            "subagents": len(step.subagents),
            "approvals": len(step.approvals),
            "errors": [{"type": e.type, "message": _clip(e.message, max_text)[0]} for e in step.errors],
            "reason": step.reason,
        })
    return {
        "name": result.name,
        "status": result.status,
        "duration_s": result.duration_s,
        "failure_policy": result.failure_policy,
        "steps": steps,
        "edges": [{"from": a, "to": b, "kind": k} for a, b, k in edges],
        "mermaid": result.mermaid(),
    }


def build_payload(
    *,
    results: str | os.PathLike[str] | None = None,
    summary: str | os.PathLike[str] | None = None,
    audit: str | os.PathLike[str] | None = None,
    dataset: str | os.PathLike[str] | None = None,
    workflow: str | os.PathLike[str] | None = None,
    transcripts: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] = "report.html",
    title: str | None = None,
    max_text: int = DEFAULT_MAX_TEXT,
    max_transcript: int = DEFAULT_MAX_TRANSCRIPT,
    group_by: str | None = None,
    compare: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Everything the report shows, from the files given (results and/or a workflow result).

    ``compare`` (a baseline's results file) adds the comparison of ``results`` against it.

    Without ``dataset`` the prompts come from the dataset the summary's ``run`` names, when
    that file is there (relative paths from the summary's directory, then the current one).

    Raises:
        ReportInputError: no input, or an input file is missing or malformed.
        ValueError: ``max_text`` or ``max_transcript`` < 1 (CompareInputError, a ValueError:
            ``compare`` has no item in common with ``results``).
    """
    if compare is not None and results is None:
        raise ReportInputError("a comparison with a base run needs the candidate's results file as RESULTS")
    if results is None and workflow is None:
        raise ReportInputError("give a results file (JSON Lines from `dsh-orchestra batch`) or a workflow result (JSON)")
    integer(1).check("max_text", max_text)
    integer(1).check("max_transcript", max_transcript)
    sources = {k: os.fspath(v) for k, v in (("results", results), ("summary", summary), ("audit", audit),
                                            ("dataset", dataset), ("workflow", workflow), ("transcripts", transcripts),
                                            ("compare", compare)) if v is not None}
    payload = page_payload(title or _default_title(results, workflow), sources)
    if results is not None:
        summary_data = load_summary(summary) if summary is not None else None
        if transcripts is not None and not Path(transcripts).is_dir():
            problem = "is not a directory" if Path(transcripts).exists() else "does not exist"
            raise ReportInputError(f"transcripts directory {os.fspath(transcripts)!r} {problem}")
        if dataset is None:
            dataset = summary_dataset(summary_data, summary)
            if dataset is not None:
                sources["dataset"] = f"{os.fspath(dataset)} (named by the summary)"
        lines = unique_lines(load_result_lines(results))
        prompts, expected = load_dataset(dataset) if dataset is not None else (None, None)
        payload["batch"] = batch_payload(
            lines,
            summary=summary_data,
            audit=load_audit(audit) if audit is not None else None,
            prompts=prompts,
            expected=expected,
            transcripts=Path(transcripts) if transcripts is not None else None,
            out_dir=Path(out).parent,
            max_text=max_text,
            max_transcript=max_transcript,
            group_by=group_by,
        )
        if compare is not None:
            try:
                payload["comparison"] = build_comparison(compare, results, candidate_lines=lines, prompts=prompts, seed=seed,
                                                         max_text=max_text)
            except CompareInputError as exc:  # said with this function's parameters: compare (the base), results
                names = {"base": "compare", "candidate": "results"}
                raise CompareInputError(*(attrs.evolve(p, name=names.get(p.name, p.name), spelled=names.get(p.name, p.name))
                                          if isinstance(p, Param) and p.name in names else p for p in exc.parts)) from exc
    if workflow is not None:
        payload["workflow"] = workflow_payload(load_workflow(workflow), max_text=max_text)
    return payload


def build_comparison(
    base: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    doc: Mapping[str, Any] | None = None,
    base_lines: Sequence[Mapping[str, Any]] | None = None,
    candidate_lines: Sequence[Mapping[str, Any]] | None = None,
    prompts: Mapping[str, str] | None = None,
    scorers: Sequence[str] | None = None,
    seed: int = 0,
    reducer: str = "mean",
    max_text: int = DEFAULT_MAX_TEXT,
) -> dict[str, Any]:
    """Load (unless given) and compare the two results files; the comparison payload.

    Raises:
        ReportInputError: a file is missing or malformed.
        CompareInputError: nothing to pair, or a named scorer in neither run.
    """
    base_lines = base_lines if base_lines is not None else load_result_lines(base, "base results file", strict=True)
    candidate_lines = candidate_lines if candidate_lines is not None else load_result_lines(candidate, "candidate results file", strict=True)
    if doc is None:
        doc = compare_runs(base_lines, candidate_lines, scorers=scorers, reducer=reducer, seed=seed)
    return comparison_payload(doc, base_lines, candidate_lines, base_name=os.fspath(base), candidate_name=os.fspath(candidate),
                              prompts=prompts, max_text=max_text)


def page_payload(title: str, sources: dict[str, str]) -> dict[str, Any]:
    """The frame of a page's payload: title, time, version, sources; no part yet."""
    return {
        "title": title,
        "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "version": __version__,
        "sources": sources,
        "batch": None,
        "workflow": None,
        "comparison": None,
    }


def unique_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first line of each (id, epoch), in file order (a resumed run never repeats one)."""
    seen: set[tuple[str, Any]] = set()
    out = []
    for line in lines:
        key = (line["id"], line.get("epoch"))
        if key not in seen:
            seen.add(key)
            out.append(line)
    return out


def summary_dataset(summary: Any, summary_path: str | os.PathLike[str] | None) -> Path | None:
    """The dataset the summary's ``run`` names, if that file exists (absolute, relative to the
    summary's directory, or to the current directory)."""
    run = summary.get("run") if isinstance(summary, dict) else None
    dataset = run.get("dataset") if isinstance(run, dict) else None
    name = dataset.get("path") if isinstance(dataset, dict) else None
    if not isinstance(name, str) or not name:
        return None
    candidates = [Path(name)] if Path(name).is_absolute() else [Path(summary_path or ".").parent / name, Path(name)]
    return next((c for c in candidates if c.is_file()), None)


def _default_title(results: Any, workflow: Any) -> str:
    if results is not None:
        return f"Batch report: {Path(results).name}"
    return f"Workflow report: {Path(workflow).name}"

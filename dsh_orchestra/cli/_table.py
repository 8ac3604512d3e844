"""The terminal summary of ``batch`` and ``score``: a table read at a glance (``--json`` prints
the summary's JSON instead).

Pure: the summary's JSON object in, text out. Built from the JSON document (not the
types underneath), so what the table shows is exactly what ``--json`` prints.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Mapping, Sequence

from .._logging import redact
from ._common import escape_controls

SCORE_COLUMNS = ("scorer", "mean", "95% CI", "n", "errors", "n/a")
STRICT_COLUMNS = ("scorer", "mean", "95% CI", "n")
MAX_GROUPS = 50


def _number(value: Any, digits: int = 3) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—"
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}f}" if abs(value) < 1e6 else f"{value:.4g}"


def _interval(ci: Any) -> str:
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2) or None in ci:
        return "—"
    return f"[{_number(ci[0])}, {_number(ci[1])}]"


def grid(header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> list[str]:
    """Rows under a header, columns aligned: the first ``left`` to the left, the others to the
    right. Each cell's control characters are escaped first, so the columns stay aligned."""
    table = [[escape_controls(cell) for cell in row] for row in (header, *rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    out = []
    for row in table:
        cells = [cell.ljust(width) if i < left else cell.rjust(width)
                 for i, (cell, width) in enumerate(zip(row, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
    return out


def _cost(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "—"
    if value == 0 or abs(value) >= 0.01:
        return f"{value:.4f}"
    return f"{value:.6f}" if abs(value) >= 1e-6 else f"{value:.2e}"


def _score_rows(scores: Mapping[str, Any], *, clustered: bool) -> list[list[str]]:
    rows = []
    for name, entry in scores.items():
        if not isinstance(entry, Mapping):
            continue
        row = [str(name), _number(entry.get("mean")), _interval(entry.get("ci95")), _number(entry.get("n")),
               _number(entry.get("n_error", 0)), _number(entry.get("n_na", 0))]
        if clustered:
            row += [_number(entry.get("n_clusters")), _number(entry.get("design_effect"), 2)]
        rows.append(row)
    return rows


def _clustered(scores: Mapping[str, Any]) -> bool:
    return any(isinstance(e, Mapping) and "n_clusters" in e for e in scores.values())


def scores_table(scores: Mapping[str, Any]) -> list[str]:
    """Per scorer: mean, 95 % interval, n, errors, n/a; then, when any item ended in error, a
    one-line warning and the strict block (an error scores 0)."""
    clustered = _clustered(scores)
    header = list(SCORE_COLUMNS) + (["clusters", "design effect"] if clustered else [])
    out = grid(header, _score_rows(scores, clustered=clustered))
    failing = {name: e for name, e in scores.items() if isinstance(e, Mapping) and (e.get("n_error") or 0) > 0}
    if failing:
        most = max(int(e["n_error"]) for e in failing.values())
        items = "1 item ended in error (or its scorer failed) and is" if most == 1 else \
            f"{most} items ended in error (or their scorer failed) and are"
        out += ["", f"warning: {items} excluded from the means above; strict means, in which an error scores 0:"]
        rows = []
        for name, entry in failing.items():
            found = entry.get("strict")
            strict: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            rows.append([str(name), _number(strict.get("mean")), _interval(strict.get("ci95")), _number(strict.get("n"))])
        out += grid(STRICT_COLUMNS, rows)
    return out


def groups_table(groups: Mapping[str, Any], field: Any) -> list[str]:
    """Per group and scorer (the first ``MAX_GROUPS`` groups; the rest counted)."""
    rows = []
    for group, by_scorer in list(groups.items())[:MAX_GROUPS]:
        if isinstance(by_scorer, Mapping):
            rows += [[str(group), *row] for row in _score_rows(by_scorer, clustered=False)]
    title = f"by {field}:" if field else "by group:"
    out = ["", title] + grid(["group", *SCORE_COLUMNS], rows, left=2)
    if len(groups) > MAX_GROUPS:
        out.append(f"… {len(groups) - MAX_GROUPS} more groups (--json prints them all)")
    return out


def _usage(label: str, usage: Any, cost: Any) -> str | None:
    if not isinstance(usage, Mapping):
        return None
    line = (f"{label}: {_number(usage.get('total_tokens'))} tokens ({_number(usage.get('input_tokens'))} input, "
            f"{_number(usage.get('output_tokens'))} output)")
    if cost is not None:
        line += f"   cost: {_cost(cost)} USD"
    return line


def _counts(mapping: Any) -> str:
    if not isinstance(mapping, Mapping):
        return ""
    return ", ".join(f"{key} {value}" for key, value in mapping.items())


def _elapsed(run: Any) -> float | None:
    if not isinstance(run, Mapping):
        return None
    try:
        start = datetime.fromisoformat(str(run["start_time"]).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(run["end_time"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    return (end - start).total_seconds()


def _evaluation(doc: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    scores = doc.get("scores")
    if isinstance(scores, Mapping) and scores:
        out += [""] + scores_table(scores)
    groups = doc.get("groups")
    if isinstance(groups, Mapping) and groups:
        run = doc.get("run")
        out += groups_table(groups, run.get("group_by") if isinstance(run, Mapping) else None)
    out.append("")
    usage = _usage("usage", doc.get("usage"), doc.get("cost_usd"))
    if usage:
        out.append(usage)
    judge = _usage("judge usage", doc.get("judge_usage"), doc.get("judge_cost_usd"))
    if judge:
        out.append(judge)
    return out


def _seconds(value: Any) -> str:
    return "—" if not isinstance(value, (int, float)) else f"{value:.3g} s"


def batch_table(doc: Mapping[str, Any]) -> str:
    """``batch``'s summary (``BatchSummary.to_json()``) as text for a terminal."""
    run = doc.get("run")
    epochs = run.get("epochs") if isinstance(run, Mapping) else None
    what = "items" if epochs in (None, 1) else f"results ({epochs} epochs per item)"
    head = f"{doc.get('total')} {what}: {doc.get('ok')} ok, {doc.get('error')} error"
    extra = [f"{doc.get('resumed')} resumed" if doc.get("resumed") else "",
             f"{doc.get('retries')} retries" if doc.get("retries") else ""]
    if any(extra):
        head += " (" + ", ".join(e for e in extra if e) + ")"
    out = [head] + _evaluation(doc)
    rate = doc.get("items_per_s")
    out.append(f"time: {_seconds(doc.get('duration_s'))}" + ("" if rate is None else f", {rate:.3g} items/s")
               + f", p50 {_seconds(doc.get('p50_s'))}, p95 {_seconds(doc.get('p95_s'))}")
    if doc.get("finish_reasons"):
        out.append(f"finish reasons: {_counts(doc.get('finish_reasons'))}")
    if doc.get("approval_outcomes"):
        out.append(f"approvals: {_counts(doc.get('approval_outcomes'))}")
    if isinstance(doc.get("model"), Mapping):
        out.append(f"model gateway: {_counts({k: v for k, v in doc['model'].items() if not isinstance(v, (dict, list))})}")
    if doc.get("stopped") == "budget":
        out.append("stopped: a budget (--max-total-tokens/--max-total-cost) was reached; --resume continues")
    elif doc.get("stopped"):
        out.append(f"stopped: {doc.get('stopped')}")
    if doc.get("results"):
        out.append(f"results: {doc.get('results')}")
    return _safe(out)


def score_table(doc: Mapping[str, Any]) -> str:
    """``score``'s summary (``rescore``'s) as text for a terminal."""
    out = [f"{doc.get('results')} result lines of {doc.get('items')} items: {doc.get('ok')} ok, {doc.get('error')} error"]
    out += _evaluation(doc)
    elapsed = _elapsed(doc.get("run"))
    if elapsed is not None:
        out.append(f"time: {_seconds(elapsed)}")
    agreement = doc.get("agreement")
    if isinstance(agreement, Mapping) and agreement:
        out += ["", "agreement with the labels (--json for the confusion matrices):"]
        rows = [[str(name), _number(a.get("accuracy")), _number(a.get("kappa")), _number(a.get("n"))]
                for name, a in agreement.items() if isinstance(a, Mapping)]
        out += grid(["scorer", "accuracy", "kappa", "n"], rows)
    return _safe(out)


def _safe(lines: list[str]) -> str:
    """The lines as one text: known secrets redacted, control characters escaped."""
    return escape_controls(redact("\n".join(lines)))

"""Compact tables for reprs: escaped HTML for notebooks (``_repr_html_``), text for terminals.

Shared by the result types of every layer (a private helper: it imports no layer).
"""

from __future__ import annotations

import html
from typing import Any, Sequence

MAX_ROWS = 20
MAX_CELL = 60


def _cell(value: Any, limit: int = MAX_CELL) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def html_table(names: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "", max_rows: int = MAX_ROWS) -> str:
    """A compact HTML table (every cell escaped; at most ``max_rows`` rows, then a count)."""
    head = "".join(f"<th>{html.escape(str(n))}</th>" for n in names)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>" for row in rows[:max_rows]
    )
    more = f"<tr><td colspan=\"{len(names)}\">… {len(rows) - max_rows} more rows</td></tr>" if len(rows) > max_rows else ""
    caption = f"<caption style=\"text-align:left\">{html.escape(title)}</caption>" if title else ""
    return f"<table class=\"dsh-orchestra\">{caption}<thead><tr>{head}</tr></thead><tbody>{body}{more}</tbody></table>"


def text_table(names: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "", max_rows: int = MAX_ROWS,
               width: int = 100) -> str:
    """A plain-text table that fits ``width`` columns (cells cut with …, extra rows counted)."""
    shown = [[_cell(v, 30) for v in row] for row in rows[:max_rows]]
    header = [_cell(n, 30) for n in names]
    widths = [max([len(header[i])] + [len(r[i]) for r in shown]) for i in range(len(header))]
    lines = [title] if title else []
    for cells in [header, *shown]:
        line = "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    if len(rows) > max_rows:
        lines.append(f"… {len(rows) - max_rows} more rows")
    return "\n".join(lines)


def key_values(title: str, pairs: Sequence[tuple[str, Any]], *, limit: int = 200) -> str:
    """A two-column HTML table of (field, value) pairs, escaped, long values cut."""
    body = "".join(f"<tr><th style=\"text-align:left\">{html.escape(k)}</th><td style=\"text-align:left\">"
                   f"{html.escape(_cell(v, limit))}</td></tr>" for k, v in pairs)
    return f"<table class=\"dsh-orchestra\"><caption style=\"text-align:left\">{html.escape(title)}</caption><tbody>{body}</tbody></table>"


# ---- the result types (duck-typed: this module imports no layer) -----------------------------


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _turn_pairs(turn: Any) -> list[tuple[str, Any]]:
    error = turn.error
    return [
        ("session", turn.session_id), ("finish_reason", turn.finish_reason),
        ("error", None if error is None else f"{getattr(error, 'code', None)}: {getattr(error, 'message', error)}"),
        ("duration_s", round(float(turn.duration), 3)), ("turns", ", ".join(map(str, turn.turns)) or None),
        ("events", len(turn.events)), ("subagents", len(turn.subagents)), ("approvals", len(turn.approvals)),
        ("questions", len(turn.questions)), ("final_response", turn.final_response),
    ]


def turn_text(turn: Any) -> str:
    """A TurnResult in a few short lines (at most 100 characters each)."""
    lines = [
        f"TurnResult(session {_cell(turn.session_id, 50)!r}, {turn.finish_reason}, {float(turn.duration):.3f} s)",
        f"  {_plural(len(turn.events), 'event')}, {_plural(len(turn.subagents), 'subagent')}, "
        f"{_plural(len(turn.approvals), 'approval')}, {_plural(len(turn.questions), 'question')}",
    ]
    error = turn.error
    if error is not None:
        described = f"{getattr(error, 'code', None)}: {getattr(error, 'message', error)}"
        lines.append(f"  error: {_cell(described, 90)}")
    lines.append(f"  final_response: {_cell(repr(turn.final_response), 80)}")
    return "\n".join(lines)


def turn_html(turn: Any) -> str:
    """A TurnResult as a compact HTML table."""
    return key_values("TurnResult", _turn_pairs(turn))


def _metric_rows(evaluation: Any) -> tuple[list[str], list[list[Any]]]:
    names = ["group", "scorer", "mean", "stderr", "ci95", "n"]
    rows: list[list[Any]] = []
    scores = evaluation.get("scores") or {} if isinstance(evaluation, dict) else {}
    groups = evaluation.get("groups") or {} if isinstance(evaluation, dict) else {}
    for group, by_scorer in [(None, scores), *groups.items()]:
        for scorer, m in by_scorer.items():
            ci = m.get("ci95")
            interval = f"[{ci[0]:.3g}, {ci[1]:.3g}]" if isinstance(ci, list) and len(ci) == 2 and None not in ci else None
            rows.append([group, scorer, m.get("mean"), m.get("stderr"), interval, m.get("n")])
    return names, rows


def summary_text(summary: Any) -> str:
    """A BatchSummary: counts and timings on one line, then its scores (a short table)."""
    rate = "" if summary.items_per_s is None else f" ({summary.items_per_s:.3g} items/s)"
    p50 = "—" if summary.p50_s is None else f"{summary.p50_s:.3g} s"
    p95 = "—" if summary.p95_s is None else f"{summary.p95_s:.3g} s"
    head = (f"BatchSummary: {summary.total} results, {summary.ok} ok, {summary.error} error, "
            f"{summary.duration_s:.3g} s{rate}, p50 {p50}, p95 {p95}")
    names, rows = _metric_rows(summary.evaluation)
    return head if not rows else head + "\n" + text_table(names, rows)


def summary_html(summary: Any) -> str:
    """A BatchSummary as compact HTML tables (counts, then scores)."""
    pairs = [("total", summary.total), ("ok", summary.ok), ("error", summary.error), ("resumed", summary.resumed),
             ("duration_s", summary.duration_s), ("items_per_s", summary.items_per_s), ("p50_s", summary.p50_s),
             ("p95_s", summary.p95_s), ("finish_reasons", summary.finish_reasons), ("stopped", summary.stopped)]
    usage = summary.evaluation.get("usage") if isinstance(summary.evaluation, dict) else None
    if usage:
        pairs.append(("usage", usage))
    if isinstance(summary.evaluation, dict) and summary.evaluation.get("cost_usd") is not None:
        pairs.append(("cost_usd", summary.evaluation["cost_usd"]))
    out = key_values("BatchSummary", pairs)
    names, rows = _metric_rows(summary.evaluation)
    return out + (html_table(names, rows, title="scores") if rows else "")


def _step_rows(result: Any) -> list[list[Any]]:
    return [[name, step.status, step.attempts, round(float(step.duration_s), 3), len(step.items), step.reason]
            for name, step in result.steps.items()]


STEP_COLUMNS = ["step", "status", "attempts", "duration_s", "items", "reason"]


def workflow_text(result: Any) -> str:
    """A WorkflowResult: its status, then one row per step."""
    head = f"WorkflowResult({result.name!r}, {result.status}, {float(result.duration_s):.3f} s, {_plural(len(result.steps), 'step')})"
    return head + "\n" + text_table(STEP_COLUMNS, _step_rows(result))


def workflow_html(result: Any) -> str:
    """A WorkflowResult as a compact HTML table of its steps."""
    title = f"WorkflowResult {result.name!r}: {result.status}, {float(result.duration_s):.3f} s"
    return html_table(STEP_COLUMNS, _step_rows(result), title=title)


COMPARISON_COLUMNS = ["scorer", "n", "mean_base", "mean_candidate", "diff", "ci95", "p_value", "regressions", "improvements"]


def _comparison_rows(doc: Any) -> list[list[Any]]:
    rows = []
    for name, s in (doc.get("scorers") or {}).items():
        ci = s.get("ci95")
        interval = f"[{ci[0]:+.3g}, {ci[1]:+.3g}]" if isinstance(ci, list) and len(ci) == 2 and None not in ci else None
        rows.append([name, s.get("n"), s.get("mean_base"), s.get("mean_candidate"), s.get("diff"), interval,
                     s.get("p_value"), len(s.get("regressions") or ()), len(s.get("improvements") or ())])
    return rows


def comparison_title(doc: Any) -> str:
    """The first line of a comparison: pairs, ids in one run only, status changes."""
    return (f"Comparison: {doc.get('pairs')} pairs, {len(doc.get('only_in_base') or ())} only in base, "
            f"{len(doc.get('only_in_candidate') or ())} only in candidate, {len(doc.get('status_changes') or ())} status changes")


def comparison_text(doc: Any) -> str:
    """A comparison document: a title line and one row per scorer."""
    return comparison_title(doc) + "\n" + text_table(COMPARISON_COLUMNS, _comparison_rows(doc))


def comparison_html(doc: Any) -> str:
    """A comparison document as a compact HTML table, one row per scorer."""
    return html_table(COMPARISON_COLUMNS, _comparison_rows(doc), title=comparison_title(doc))

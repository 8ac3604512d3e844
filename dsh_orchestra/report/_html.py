"""Render the report payload as ONE self-contained HTML file.

No network is needed to open it: the style and the script are inlined, charts are inline SVG
drawn here, and the item data is embedded as JSON in ``<script type="application/json">``
(escaped by ``embed_json``). The item table and the details are built by the inlined script
with ``textContent``; a Content-Security-Policy with a per-file nonce lets only that script
run, so even markup that slipped into the page could not execute.
"""

from __future__ import annotations

import secrets
from importlib import resources
from typing import Any

from ._charts import STATUS_COLOURS, count_bars, histogram_svg, seconds, timeline_svg, workflow_graph_svg
from ._comparison import comparison_section, pair_panel
from ._eval_html import evaluation_section
from ._gateway_html import gateway_section
from ._markup import Markup, embed_json, escape, join, tag

COLUMN_TITLES = {
    "id": "id", "status": "status", "finish_reason": "finish", "duration_s": "duration", "attempts": "attempts",
    "subagents": "subagents", "approvals": "approvals", "error": "error", "epoch": "epoch", "prompt": "prompt",
    "response": "response", "tokens": "tokens", "cost_usd": "cost", "target": "target", "choices": "choices",
}
COLUMN_WIDTHS = {  # px of the item table's fixed columns: each header and value readable in full
    "status": 80, "epoch": 74, "duration_s": 100, "tokens": 84, "cost_usd": 96, "finish_reason": 106,
    "attempts": 100, "subagents": 110, "approvals": 110,
}
NUMERIC = frozenset({"epoch", "duration_s", "tokens", "cost_usd", "attempts", "subagents", "approvals"})
TEXT_MIN_WIDTH = {"id": 140}  # px at least of a text column (the others: TEXT_WIDTH); they share what is left
TEXT_WIDTH = 110


def score_width(name: str) -> int:
    """px of a scorer's column: its name whole up to 30 characters (then cut, its title says it)."""
    return 30 + 9 * min(max(len(name), 6), 30)
MAX_ERROR_BUTTONS = 60


def _asset(name: str) -> str:
    return resources.files("dsh_orchestra.report").joinpath("assets", name).read_text(encoding="utf-8")


def _number(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _card(label: str, value: Any, css: str = "") -> Markup:
    return tag("div", {"class": f"card {css}".strip()}, tag("div", {"class": "k"}, label), tag("div", {"class": "v"}, value))


def _section(id: str, title: str, *children: Any) -> Markup:
    return tag("section", {"id": id}, tag("h2", None, title), *children)


def _summary_section(batch: dict[str, Any]) -> Markup:
    summary = batch["summary"]
    total = summary.get("total") if isinstance(summary.get("total"), int) else len(batch["rows"])
    ok = summary.get("ok") if isinstance(summary.get("ok"), int) else batch["status"].get("ok", 0)
    error = summary.get("error") if isinstance(summary.get("error"), int) else total - ok
    rate = f"{ok / total:.1%}" if total else "—"
    cards = [
        _card("items", _number(total)),
        _card("ok", _number(ok), "ok"),
        _card("error", _number(error), "bad" if error else ""),
        _card("ok rate", rate),
        _card("p50", seconds(summary.get("p50_s"))),
        _card("p95", seconds(summary.get("p95_s"))),
    ]
    for key, label in (("duration_s", "run time"), ("items_per_s", "items / s"), ("retries", "retries"), ("resumed", "resumed")):
        if key in summary:
            cards.append(_card(label, seconds(summary[key]) if key == "duration_s" else _number(summary[key])))
    known = {"total", "ok", "error", "p50_s", "p95_s", "duration_s", "items_per_s", "retries", "resumed", "finish_reasons", "approval_outcomes"}
    extra = [(k, v) for k, v in summary.items() if k not in known and isinstance(v, (str, int, float, bool)) and v is not None]
    note = "from the summary file" if batch["summary_source"] == "file" else "computed from the results (no summary given)"
    return _section(
        "summary", "Run summary",
        tag("div", {"class": "cards"}, cards),
        tag("table", {"class": "kv", "style": "margin-top:10px"}, tag("tbody", None, [tag("tr", None, tag("th", None, k), tag("td", None, _number(v))) for k, v in extra])) if extra else None,
        tag("p", {"class": "muted"}, note),
    )


def _latency_section(batch: dict[str, Any]) -> Markup:
    latency = batch["latency"]
    keys = (("min", "min"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"), ("max", "max"), ("mean", "mean"))
    table = tag("table", {"class": "kv", "id": "percentiles"}, tag("tbody", None, [
        tag("tr", None, tag("th", None, label), tag("td", {"class": "num", "data-key": key}, seconds(latency.get(key)))) for key, label in keys
    ] + [tag("tr", None, tag("th", None, "items timed"), tag("td", {"class": "num"}, _number(latency.get("count"))))]))
    note = None
    if latency.get("histogram") and latency["histogram"].get("overflow"):
        note = tag("p", {"class": "muted"}, f"The last bar also holds the items slower than the 99th percentile (up to {seconds(latency['max'])}).")
    return _section("latency", "Latency", tag("div", {"class": "grid", "style": "grid-template-columns: 3fr 1fr"},
                                               tag("div", None, histogram_svg(latency), note), table))


def _outcomes_section(batch: dict[str, Any]) -> Markup:
    return _section(
        "outcomes", "Statuses and finish reasons",
        tag("div", {"class": "grid"},
            tag("div", {"id": "status-counts"}, tag("h3", None, "Status"), count_bars(batch["status"], link="status")),
            tag("div", {"id": "finish-counts"}, tag("h3", None, "Finish reason"), count_bars(batch["finish_reasons"], link="finish"))),
    )


def _errors_section(batch: dict[str, Any]) -> Markup:
    groups = batch["errors"]
    if not groups:
        return _section("errors", "Errors", tag("p", {"class": "muted"}, "No item ended in error."))
    blocks = []
    for group in groups:
        shown = group["items"][:MAX_ERROR_BUTTONS]
        more = group["count"] - len(shown)
        blocks.append(tag(
            "div", {"class": "error-group", "data-error-type": group["type"]},
            tag("h3", None, tag("button", {"type": "button", "class": "linkish", "data-filter": "error", "data-value": group["type"]}, group["type"]),
                f" — {group['count']} item{'s' if group['count'] != 1 else ''}"),
            tag("table", {"class": "plain"}, tag("tbody", None, [
                tag("tr", None, tag("td", {"class": "num"}, f"{m['count']}×"), tag("td", None, tag("code", None, m["message"])))
                for m in group["messages"]
            ])),
            tag("p", {"class": "muted"}, f"{group['distinct_messages']} distinct messages") if group["distinct_messages"] > len(group["messages"]) else None,
            tag("div", {"class": "ids"}, [tag("button", {"type": "button", "class": "linkish", "data-item": item}, item) for item in shown],
                tag("span", {"class": "muted"}, f"and {more} more (filter the table by this type)") if more > 0 else None),
        ))
    return _section("errors", "Errors by type", blocks)


def _matrix(table: dict[str, dict[str, int]], outcomes: list[str], first: str, id: str) -> Markup:
    if not table:
        return tag("p", {"class": "muted"}, "None.")
    head = tag("tr", None, tag("th", None, first), [tag("th", {"class": "num"}, tag("span", {"class": f"badge s-{o}"}, o)) for o in outcomes], tag("th", {"class": "num"}, "total"))
    rows = [
        tag("tr", None, tag("td", None, tag("code", None, key)), [tag("td", {"class": "num"}, _number(counts.get(o, 0))) for o in outcomes],
            tag("td", {"class": "num"}, _number(sum(counts.values()))))
        for key, counts in table.items()
    ]
    return tag("table", {"class": "matrix", "id": id}, tag("thead", None, head), tag("tbody", None, rows))


def _approvals_section(batch: dict[str, Any]) -> Markup:
    approvals = batch["approvals"]
    if not approvals["total"]:
        return _section("approvals", "Approvals", tag("p", {"class": "muted"}, "No approval was requested."))
    outcomes = list(approvals["by_outcome"])
    source = "the audit log" if approvals["source"] == "audit" else "the results (an audit log gives latency and errors)"
    latency = approvals.get("latency")
    parts: list[Any] = [
        tag("div", {"class": "cards"}, _card("decisions", _number(approvals["total"])),
            [_card(o, _number(n), "ok" if o == "allowed-once" else "bad" if o == "rejected" else "") for o, n in approvals["by_outcome"].items()],
            _card("p50 decision", seconds(latency.get("p50"))) if latency else None,
            _card("max decision", seconds(latency.get("max"))) if latency else None),
        tag("div", {"class": "grid"},
            tag("div", None, tag("h3", None, "By tool"), _matrix(approvals["by_tool"], outcomes, "tool", "approvals-by-tool")),
            tag("div", None, tag("h3", None, "By deciding rule"), _matrix(approvals["by_rule"], outcomes, "rule", "approvals-by-rule"))),
    ]
    if approvals.get("errors"):
        parts.append(tag("h3", None, "Failed closed"))
        parts.append(tag("table", {"class": "plain"}, tag("tbody", None, [
            tag("tr", None, tag("td", {"class": "num"}, f"{e['count']}×"), tag("td", None, tag("code", None, e["message"]))) for e in approvals["errors"]
        ])))
    parts.append(tag("p", {"class": "muted"}, f"From {source}."))
    return _section("approvals", "Approvals", parts)


def _subagents_section(batch: dict[str, Any]) -> Markup:
    sub = batch["subagents"]
    if not sub["total"]:
        return _section("subagents", "Subagents", tag("p", {"class": "muted"}, "No item started a subagent."))
    per_item = {f"{n} subagent{'s' if n != '1' else ''}": count for n, count in sub["per_item"].items()}
    return _section(
        "subagents", "Subagents",
        tag("div", {"class": "cards"}, _card("subagents", _number(sub["total"])), _card("items with subagents", _number(sub["items_with"]))),
        tag("div", {"class": "grid"},
            tag("div", None, tag("h3", None, "By status"), count_bars(sub["by_status"])),
            tag("div", None, tag("h3", None, "By stop reason"), count_bars(sub["by_stop_reason"])),
            tag("div", None, tag("h3", None, "Per item"), count_bars(per_item))),
    )


def _options(values: list[str], everything: str) -> list[Markup]:
    return [tag("option", {"value": ""}, everything)] + [tag("option", {"value": v}, v) for v in values]


def _items_section(batch: dict[str, Any]) -> Markup:
    columns = batch["columns"]
    def css(column: str) -> str:
        return "c-score" if column.startswith("score:") else f"c-{column}"

    def title(column: str) -> str:
        return column[len("score:"):] if column.startswith("score:") else COLUMN_TITLES.get(column, column)

    def width(column: str) -> int | None:
        return score_width(column[len("score:"):]) if column.startswith("score:") else COLUMN_WIDTHS.get(column)

    # fixed widths for the short columns, the text columns share the rest; below the sum of
    # the minimums the table scrolls sideways in its box instead of squeezing the headers
    least = sum(width(c) or TEXT_MIN_WIDTH.get(c, TEXT_WIDTH) for c in columns)
    colgroup = tag("colgroup", None, [tag("col", {"class": css(c), "style": f"width:{width(c)}px" if width(c) else None}) for c in columns])
    head = tag("thead", None, tag("tr", None, [
        tag("th", {"data-col": c, "scope": "col", "title": f"{title(c)}: sort", "class": css(c) + (" num" if c.startswith("score:") or c in NUMERIC else "")},
            title(c)) for c in columns]))
    scorers = batch.get("scorers") or []
    scored = tag("select", {"id": "filter-scored", "aria-label": "scores"},
                 tag("option", {"value": ""}, "any score"), tag("option", {"value": "*"}, "failed a scorer"),
                 [tag("option", {"value": name}, f"failed {name}") for name in scorers]) if scorers else None
    controls = tag(
        "div", {"class": "controls"},
        tag("input", {"type": "search", "id": "search", "placeholder": "Search ids, errors, responses…", "aria-label": "search items"}),
        tag("select", {"id": "filter-status", "aria-label": "status"}, _options(list(batch["status"]), "any status")),
        tag("select", {"id": "filter-finish", "aria-label": "finish reason"}, _options(list(batch["finish_reasons"]), "any finish reason")),
        tag("select", {"id": "filter-error", "aria-label": "error type"}, _options([g["type"] for g in batch["errors"]], "any error")),
        scored,
        tag("button", {"type": "button", "id": "reset"}, "Reset"),
    )
    pager = tag(
        "div", {"class": "pager"},
        tag("button", {"type": "button", "id": "page-prev"}, "‹ Prev"),
        tag("label", None, "Page ", tag("input", {"type": "number", "id": "page-number", "min": 1, "value": 1, "style": "width:5em"})),
        tag("span", {"id": "page-count", "class": "muted"}),
        tag("button", {"type": "button", "id": "page-next"}, "Next ›"),
        tag("label", None, " rows ", tag("select", {"id": "page-size"}, [tag("option", {"value": n, "selected": n == 100}, n) for n in (50, 100, 250, 500)])),
        tag("span", {"id": "items-info", "class": "muted"}),
    )
    return _section(
        "items", f"Items ({len(batch['rows']):,})",
        controls,
        tag("div", {"class": "table-box"},
            tag("table", {"class": "items", "id": "items-table", "style": f"min-width:{least}px"}, colgroup, head, tag("tbody", {"id": "items-body"}))),
        pager,
        tag("noscript", None, tag("p", {"class": "note"}, "The item table needs JavaScript; the results file has every item.")),
    )


def _detail_panel() -> Markup:
    return tag(
        "aside", {"id": "detail", "hidden": True, "aria-label": "item details"},
        tag("button", {"type": "button", "class": "close", "id": "detail-close", "aria-label": "close"}, "✕"),
        tag("h2", {"id": "detail-title"}),
        tag("div", {"id": "detail-body"}),
    )


def _legend() -> Markup:
    return tag("div", {"class": "legend"},
               [tag("span", None, tag("span", {"class": "sw", "style": f"background:{fill};border-color:{stroke}"}), status)
                for status, (fill, stroke) in STATUS_COLOURS.items() if status != "error"],
               tag("span", None, "→ dependency · ⇒ fan-out (thick) · ⇢ route (dashed)"))


def _workflow_section(workflow: dict[str, Any]) -> Markup:
    steps = workflow["steps"]
    rows = []
    for step in steps:
        problems = "; ".join(f"{e['type']}: {e['message']}" for e in step["errors"]) or (step["reason"] or "")
        rows.append(tag(
            "tr", {"data-step": step["name"]},
            tag("td", None, tag("code", None, step["name"])),
            tag("td", None, tag("span", {"class": f"badge s-{step['status']}"}, step["status"])),
            tag("td", {"class": "num"}, seconds(step["started_s"]) if step["started_s"] is not None else "—"),
            tag("td", {"class": "num"}, seconds(step["duration_s"])),
            tag("td", {"class": "num"}, _number(step["attempts"])),
            tag("td", {"class": "num"}, f"{step['ok_items']}/{len(step['items'])}" if step["fanned"] else "—"),
            tag("td", {"class": "num"}, _number(step["reprompts"])),
            tag("td", {"class": "num"}, _number(step["subagents"])),
            tag("td", {"class": "num"}, _number(step["approvals"])),
            tag("td", None, problems),
        ))
    steps_table = tag("table", {"class": "steps", "id": "workflow-steps"}, tag("thead", None, tag("tr", None, [
        tag("th", {"class": "num" if h not in ("step", "status", "errors / reason") else None}, h)
        for h in ("step", "status", "starts at", "duration", "attempts", "items ok", "re-prompts", "subagents", "approvals", "errors / reason")
    ])), tag("tbody", None, rows))
    item_blocks = []
    for step in steps:
        if not step["items"]:
            continue
        item_rows = [tag(
            "tr", None,
            tag("td", {"class": "num"}, "—" if item["index"] is None else str(item["index"])),
            tag("td", None, tag("span", {"class": f"badge s-{item['status']}"}, item["status"])),
            tag("td", {"class": "num"}, seconds(item["duration_s"])),
            tag("td", {"class": "num"}, _number(item["attempts"])),
            tag("td", None, tag("code", None, item["session_id"] or "—")),
            tag("td", None, f"{item['error']['type']}: {item['error']['message']}" if item["error"] else ""),
            tag("td", None, tag("pre", None, item["final_response"]) if item["final_response"] else ""),
        ) for item in step["items"]]
        item_blocks.append(tag("details", {"class": "step-items"}, tag("summary", None, f"{step['name']}: {len(step['items'])} run{'s' if len(step['items']) != 1 else ''}"),
                               tag("table", {"class": "plain"}, tag("thead", None, tag("tr", None, [tag("th", None, h) for h in ("item", "status", "duration", "attempts", "session", "error", "final response")])),
                                   tag("tbody", None, item_rows))))
    return _section(
        "workflow", f"Workflow {workflow['name']!r}",
        tag("div", {"class": "cards"}, _card("status", tag("span", {"class": f"badge s-{workflow['status']}"}, workflow["status"])),
            _card("duration", seconds(workflow["duration_s"])), _card("steps", _number(len(steps))), _card("failure policy", workflow["failure_policy"])),
        tag("h3", None, "Graph"), _legend(), workflow_graph_svg(workflow),
        tag("h3", None, "Timeline"), timeline_svg(workflow),
        tag("h3", None, "Steps"), steps_table,
        item_blocks,
        tag("h3", None, "Mermaid source"),
        tag("pre", {"id": "mermaid-source"}, workflow["mermaid"]),
        tag("p", {"class": "muted"}, "Paste it into any Mermaid renderer; the graph above is the same graph drawn without Mermaid."),
    )


def render_html(payload: dict[str, Any]) -> str:
    """The whole report page for ``payload`` (from ``build_payload``)."""
    nonce = secrets.token_urlsafe(18)
    batch = payload.get("batch")
    workflow = payload.get("workflow")
    comparison = payload.get("comparison")
    csp = f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    nav = [tag("a", {"href": f"#{id}"}, label) for id, label, present in (
        ("summary", "Summary", batch), ("evaluation", "Evaluation", batch and batch.get("evaluation")), ("gateway", "Model gateway", batch and isinstance(batch["summary"].get("model"), dict)),
        ("latency", "Latency", batch), ("outcomes", "Outcomes", batch), ("errors", "Errors", batch),
        ("approvals", "Approvals", batch), ("subagents", "Subagents", batch), ("items", "Items", batch), ("workflow", "Workflow", workflow),
        ("comparison", "Comparison", comparison),
    ) if present]
    sections: list[Any] = []
    if batch:
        sections.append(_summary_section(batch))
        if batch.get("evaluation"):
            sections.append(evaluation_section(batch["evaluation"]))
        sections.append(gateway_section(batch["summary"].get("model")))
        sections += [_latency_section(batch), _outcomes_section(batch), _errors_section(batch),
                     _approvals_section(batch), _subagents_section(batch), _items_section(batch)]
    if workflow:
        sections.append(_workflow_section(workflow))
    if comparison:
        sections.append(comparison_section(comparison))
    compare_data = {k: comparison[k] for k in ("names", "pairs", "has_prompts", "base_name", "candidate_name")} if comparison else None
    script_data = {"batch": {k: batch[k] for k in ("columns", "rows", "details", "has_prompts", "has_transcripts", "scorers")} if batch else None}
    sources = " · ".join(f"{k}: {v}" for k, v in payload["sources"].items())
    page = join([
        Markup("<!DOCTYPE html>\n"),
        Markup('<html lang="en">'),
        tag("head", None,
            Markup('<meta charset="utf-8">'),
            Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            Markup('<meta http-equiv="Content-Security-Policy" content="'), Markup(csp), Markup('">'),
            Markup('<meta name="generator" content="dsh-orchestra '), escape(payload["version"]), Markup('">'),
            tag("title", None, payload["title"]),
            tag("style", None, Markup(_asset("report.css")))),
        Markup("<body>"),
        tag("header", {"class": "top"}, tag("h1", None, payload["title"]),
            tag("div", {"class": "meta"}, f"generated {payload['generated']} by dsh-orchestra {payload['version']} · {sources}")),
        tag("nav", {"class": "sections"}, nav),
        tag("main", None, sections),
        _detail_panel() if batch else None,
        Markup('<script type="application/json" id="report-data">'), embed_json(script_data), Markup("</script>\n"),
        tag("script", {"nonce": nonce}, Markup(_asset("report.js"))),
        pair_panel() if comparison else None,
        join([Markup('<script type="application/json" id="compare-data">'), embed_json(compare_data), Markup("</script>\n"),
              tag("script", {"nonce": nonce}, Markup(_asset("compare.js")))]) if comparison else None,
        Markup("</body></html>\n"),
    ])
    return str(page)

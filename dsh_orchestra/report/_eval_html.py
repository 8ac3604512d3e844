"""The evaluations section of the report (scores with intervals as error bars, groups, pass@k,
distributions, usage and cost, run metadata) and the interval chart the comparison page shares.

Built with ``_markup.tag`` only: scorer names, group values and metadata are escaped text.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from ._charts import count_bars
from ._markup import Markup, tag
from ..eval import excluded_warnings


def fmt(value: Any, digits: int = 4) -> str:
    """A score for people: 4 decimals (``—`` for none)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def interval_text(ci: Any) -> str:
    """``[lo, hi]`` with 4 decimals, or ``—``."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or ci[0] is None:
        return "—"
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def interval_svg(rows: Sequence[tuple[str, float | None, Sequence[float] | None]], *, zero: bool = False,
                 width: int = 560, id: str | None = None) -> Markup:
    """One horizontal error bar per (label, value, [lo, hi]): a dot at the value, a line with caps
    over the interval. The axis spans [0, 1] when everything fits (scores), else the data; with
    ``zero`` (differences) it is symmetric around 0 and 0 is marked."""
    points = [v for _, value, ci in rows for v in ([value] + list(ci or ())) if isinstance(v, (int, float))]
    if not points:
        return tag("p", {"class": "muted"}, "No values to chart.")
    if zero:
        reach = max(abs(v) for v in points) or 1.0
        low, high = -reach * 1.1, reach * 1.1
    elif min(points) >= 0 and max(points) <= 1:
        low, high = 0.0, 1.0
    else:
        low, high = min(points), max(points)
        pad = (high - low) * 0.05 or 1.0
        low, high = low - pad, high + pad
    left, right, row_h, top = 120, 12, 26, 8
    plot_w = width - left - right
    height = top * 2 + row_h * len(rows) + 18

    def x(value: float) -> float:
        return left + (value - low) / (high - low) * plot_w

    parts: list[Any] = [tag("line", {"x1": left, "y1": height - 18, "x2": left + plot_w, "y2": height - 18, "class": "axis"})]
    for tick in (low, (low + high) / 2, high):
        parts.append(tag("text", {"x": f"{x(tick):.1f}", "y": height - 4, "text-anchor": "middle", "class": "tick"}, f"{tick:.3g}"))
    if zero or low <= 0 <= high:
        parts.append(tag("line", {"x1": f"{x(0):.1f}", "y1": top, "x2": f"{x(0):.1f}", "y2": height - 18, "class": "zero"}))
    for index, (label, value, ci) in enumerate(rows):
        y = top + row_h * index + row_h / 2
        group: list[Any] = [tag("title", None, f"{label}: {fmt(value)} {interval_text(ci)}"),
                            tag("text", {"x": left - 8, "y": y + 4, "text-anchor": "end", "class": "tick"}, label if len(label) <= 18 else label[:17] + "…")]
        if ci and isinstance(ci[0], (int, float)) and isinstance(ci[1], (int, float)):
            x1, x2 = x(ci[0]), x(ci[1])
            group += [
                tag("line", {"x1": f"{x1:.1f}", "y1": y, "x2": f"{x2:.1f}", "y2": y, "class": "ci"}),
                tag("line", {"x1": f"{x1:.1f}", "y1": y - 6, "x2": f"{x1:.1f}", "y2": y + 6, "class": "ci"}),
                tag("line", {"x1": f"{x2:.1f}", "y1": y - 6, "x2": f"{x2:.1f}", "y2": y + 6, "class": "ci"}),
            ]
        if isinstance(value, (int, float)):
            group.append(tag("circle", {"cx": f"{x(value):.1f}", "cy": y, "r": 4.5, "class": "point"}))
        parts.append(tag("g", {"class": "interval", "data-label": label}, group))
    return tag("svg", {"class": "chart intervals", "id": id, "viewBox": f"0 0 {width} {height}", "width": width, "height": height,
                       "role": "img", "aria-label": "means with 95% intervals"}, parts)


def _any_error(scores: Mapping[str, Any]) -> bool:
    return any(isinstance(s, Mapping) and (s.get("n_error") or 0) > 0 for s in scores.values())


_EXTRA = {"n_clusters": "clusters", "design_effect": "design effect", "epochs.within_var": "within-item var",
          "epochs.between_var": "between-item var", "epochs.narrowing": "narrowed by epochs"}


def _stat(entry: Mapping[str, Any], key: str) -> Any:
    outer, _, inner = key.partition(".")
    value = entry.get(outer)
    return (value.get(inner) if isinstance(value, Mapping) else None) if inner else value


def _scores_table(scores: Mapping[str, Any], names: Sequence[str], id: str, first: str = "scorer") -> Markup:
    """Per scorer: mean, interval, stderr, n, nulls; the clustered statistics and the epoch
    variance when the summary has them."""
    extra = [key for key in _EXTRA if any(_stat(scores.get(n) or {}, key) is not None for n in names)]
    rows = []
    strict_columns = _any_error(scores)
    for name in names:
        s = scores.get(name) or {}
        ci = s.get("ci95")
        found = s.get("strict")
        strict: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        strict_cells = [
            tag("td", {"class": "num", "data-key": "strict_mean", "data-value": orjson.dumps(strict.get("mean")).decode()}, fmt(strict.get("mean"))),
            tag("td", {"class": "num", "data-key": "strict_ci95"}, interval_text(strict.get("ci95"))),
            tag("td", {"class": "num", "data-key": "strict_n"}, fmt(strict.get("n"))),
        ] if strict_columns else []
        rows.append(tag(
            "tr", {"data-scorer": name},
            tag("td", None, tag("code", None, name)),
            tag("td", {"class": "num", "data-key": "mean", "data-value": orjson.dumps(s.get("mean")).decode()}, fmt(s.get("mean"))),
            tag("td", {"class": "num", "data-key": "ci95", "data-value": orjson.dumps(ci).decode()}, interval_text(ci)),
            tag("td", {"class": "num"}, fmt(s.get("stderr"))),
            tag("td", {"class": "num"}, fmt(s.get("n"))),
            tag("td", {"class": "num", "data-key": "n_error"}, fmt(s.get("n_error"))),
            tag("td", {"class": "num", "data-key": "n_na"}, fmt(s.get("n_na"))),
            strict_cells,
            [tag("td", {"class": "num", "data-key": key}, fmt(_stat(s, key))) for key in extra],
        ))
    heads = [first, "mean", "95% interval", "stderr", "n", "errors", "n/a"]
    if strict_columns:
        heads += ["strict mean", "strict 95% interval", "strict n"]
    heads += [_EXTRA[key] for key in extra]
    head = tag("tr", None, [tag("th", {"class": None if h == first else "num"}, h) for h in heads])
    return tag("table", {"class": "matrix", "id": id}, tag("thead", None, head), tag("tbody", None, rows))


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out.append((prefix, value if isinstance(value, str) else orjson.dumps(value, default=str).decode()))


def _usage(usage: Mapping[str, Any]) -> list[Any]:
    totals = usage["totals"]
    per_item = usage["per_item_tokens"]
    cards = [tag("div", {"class": "card"}, tag("div", {"class": "k"}, label), tag("div", {"class": "v", "data-key": key}, fmt(totals.get(key))))
             for key, label in (("input_tokens", "input tokens"), ("output_tokens", "output tokens"), ("total_tokens", "total tokens"))]
    if usage.get("cost_usd") is not None:
        cards.append(tag("div", {"class": "card"}, tag("div", {"class": "k"}, "cost (USD)"), tag("div", {"class": "v", "data-key": "cost_usd"}, f"{usage['cost_usd']:.4f}")))
    rows = [tag("tr", None, tag("th", None, "tokens per item"), [tag("td", {"class": "num"}, fmt(per_item.get(k), 1)) for k in ("mean", "median", "p95")])]
    if usage.get("per_item_cost"):
        cost = usage["per_item_cost"]
        rows.append(tag("tr", None, tag("th", None, "cost per item (USD)"), [tag("td", {"class": "num"}, fmt(cost.get(k), 6)) for k in ("mean", "median", "p95")]))
    table = tag("table", {"class": "matrix", "id": "usage-per-item", "style": "margin-top:10px"},
                tag("thead", None, tag("tr", None, tag("th", None, ""), [tag("th", {"class": "num"}, h) for h in ("mean", "median", "p95")])),
                tag("tbody", None, rows))
    note = "totals from the summary" if usage["totals_source"] == "summary" else "totals summed over the result lines"
    return [tag("h3", None, "Usage and cost"), tag("div", {"class": "cards", "id": "usage-totals"}, cards), table, tag("p", {"class": "muted"}, note + ".")]


def evaluation_section(ev: Mapping[str, Any]) -> Markup:
    """The evaluations section."""
    names = ev["names"]
    scores = ev["scores"]
    parts: list[Any] = []
    if names:
        sources = {s.get("source") for s in scores.values()}
        note = "from the summary file" if sources == {"summary"} else (
            f"computed from the results (reducer {ev['reducer']}, bootstrap seed as in the run)" if sources == {"results"}
            else "from the summary, and computed from the results for the scorers it lacks")
        parts += [
            tag("div", {"class": "grid", "style": "grid-template-columns: 3fr 2fr"},
                _scores_table(scores, names, "scores-table"),
                interval_svg([(n, (scores.get(n) or {}).get("mean"), (scores.get(n) or {}).get("ci95")) for n in names], id="scores-chart")),
            tag("p", {"class": "muted"}, f"Means over the items ({ev['epochs']} epoch{'s' if ev['epochs'] != 1 else ''} each reduced by "
                f"{ev['reducer']}); 95 % percentile bootstrap intervals; {note}. Errors: items that ended in error or "
                "whose scorer failed; n/a: items the scorer does not apply to (no target)."),
        ]
        warnings = excluded_warnings(scores)
        if warnings:
            parts.append(tag("div", {"class": "warning", "id": "errors-warning", "role": "note"},
                             [tag("p", None, "warning: " + line) for line in warnings]))
    if ev.get("groups"):
        blocks = []
        for index, (group, group_scores) in enumerate(ev["groups"].items()):
            blocks.append(tag("div", {"class": "group", "data-group": group}, tag("h4", None, f"{ev.get('group_by') or 'group'} = {group}"),
                              _scores_table(group_scores, [n for n in names if n in group_scores] or list(group_scores), f"group-{index}")))
        parts += [tag("h3", None, f"By {ev.get('group_by') or 'group'}"), tag("div", {"id": "groups"}, blocks)]
    if ev.get("pass_at_k"):
        ks = max(len(table) for table in ev["pass_at_k"].values())
        for key, interval, title, table_id in (("value", "ci95", "pass@", "pass-at-k"), ("pass_hat", "pass_hat_ci95", "pass^", "pass-hat-k")):
            rows = []
            for name, table in ev["pass_at_k"].items():
                rows.append(tag("tr", {"data-scorer": name}, tag("td", None, tag("code", None, name)),
                                [tag("td", {"class": "num", "data-k": entry["k"]}, fmt(entry.get(key))) for entry in table]))
                rows.append(tag("tr", {"data-scorer": name, "class": "interval"}, tag("td", {"class": "muted"}, "95% interval"),
                                [tag("td", {"class": "num muted", "data-k": entry["k"]}, interval_text(entry.get(interval))) for entry in table]))
            parts += [tag("h3", None, f"{title}k"),
                      tag("table", {"class": "matrix", "id": table_id},
                          tag("thead", None, tag("tr", None, tag("th", None, "scorer"), [tag("th", {"class": "num"}, f"{title}{k}") for k in range(1, ks + 1)])),
                          tag("tbody", None, rows))]
        parts.append(tag("p", {"class": "muted"}, "Unbiased estimators per item (n epochs with a value, c of them 1): pass@k = 1 − C(n−c, k)/C(n, k), "
                         "pass^k = C(c, k)/C(n, k), averaged over the items with n ≥ k; 95 % percentile bootstrap intervals over those items."))
    if names:
        dists = [tag("div", {"class": "distribution", "data-scorer": name}, tag("h4", None, name),
                     count_bars({bar["label"]: bar["count"] for bar in ev["distributions"][name]["bars"]}))
                 for name in names]
        parts += [tag("h3", None, "Score distribution (per item)"), tag("div", {"class": "grid"}, dists)]
    if ev.get("usage"):
        parts += _usage(ev["usage"])
    if ev.get("run"):
        flat: list[tuple[str, str]] = []
        _flatten("", ev["run"], flat)
        parts += [tag("h3", None, "Run"), tag("table", {"class": "kv", "id": "run-metadata"},
                                               tag("tbody", None, [tag("tr", None, tag("th", None, k), tag("td", None, tag("code", None, v))) for k, v in flat]))]
    return tag("section", {"id": "evaluation"}, tag("h2", None, "Evaluation"), parts)

"""The report's "Model gateway" section: the summary's ``model`` totals (calls, cache hits, hit
rate, tokens and cost, what the cache saved, 429s absorbed, the budget) and the concurrency
limit over time as a step chart.

Built with ``_markup.tag`` only; every value is checked, so a hand-edited summary cannot break
the page.
"""

from __future__ import annotations

from typing import Any

from ._charts import seconds
from ._common import number
from ._markup import Markup, tag

CHART_W, CHART_H, PAD = 560, 140, 28


def _value(value: Any, *, usd: bool = False, share: bool = False) -> str:
    amount = number(value)
    if amount is None:
        return "—"
    if share:
        return f"{amount:.1%}"
    if usd:
        return f"${amount:,.6f}".rstrip("0").rstrip(".") if amount else "$0"
    return f"{amount:,.0f}" if amount == int(amount) else f"{amount:,.3f}"


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _card(label: str, value: str, title: str | None = None) -> Markup:
    return tag("div", {"class": "card", "title": title}, tag("div", {"class": "k"}, label), tag("div", {"class": "v"}, value))


def concurrency_svg(changes: Any, final: Any) -> Markup | None:
    """The limit as a step line over the run's seconds (``changes``: ``[[seconds, limit], ...]``)."""
    points = [(number(p[0]), number(p[1])) for p in changes if isinstance(p, (list, tuple)) and len(p) == 2] \
        if isinstance(changes, list) else []
    steps = [(t, v) for t, v in points if t is not None and v is not None and t >= 0]
    if not steps:
        return None
    end = max(t for t, _ in steps) or 1.0
    top = max(v for _, v in steps) or 1.0
    width, height = CHART_W - 2 * PAD, CHART_H - 2 * PAD

    def x(t: float) -> float:
        return PAD + width * t / (end * 1.05)

    def y(v: float) -> float:
        return PAD + height * (1 - v / top)

    path = [f"M{x(steps[0][0]):.1f},{y(steps[0][1]):.1f}"]
    for t, v in steps[1:]:
        path.append(f"H{x(t):.1f}V{y(v):.1f}")
    path.append(f"H{x(end * 1.05):.1f}")
    return tag(
        "svg", {"id": "gateway-concurrency", "viewBox": f"0 0 {CHART_W} {CHART_H}", "width": CHART_W, "height": CHART_H,
                "role": "img", "aria-label": "the model concurrency limit over the run"},
        tag("line", {"x1": PAD, "y1": PAD + height, "x2": PAD + width, "y2": PAD + height, "stroke": "#999"}),
        tag("text", {"x": 2, "y": y(top) + 4, "font-size": 11}, _value(top)),
        tag("text", {"x": 2, "y": PAD + height + 4, "font-size": 11}, "0"),
        tag("text", {"x": PAD + width, "y": CHART_H - 6, "font-size": 11, "text-anchor": "end"}, seconds(end)),
        tag("path", {"d": "".join(path), "fill": "none", "stroke": "#3b6fb6", "stroke-width": 2}),
        tag("title", None, f"limit over time; final {_value(final)}"),
    )


def _budget(budget: Any) -> Markup | None:
    if not isinstance(budget, dict):
        return None
    reached = _object(budget.get("reached_with"))
    overshoot = _object(budget.get("overshoot"))
    rows = [
        ("max total tokens", _value(budget.get("max_total_tokens"))), ("max total cost", _value(budget.get("max_total_cost"), usd=True)),
        ("tokens counted", _value(budget.get("tokens"))), ("cost counted", _value(budget.get("cost_usd"), usd=True)),
        ("reached", "yes" if budget.get("reached") is True else "no"),
        ("calls in flight when reached", _value(reached.get("in_flight"))),
        ("overshoot", ", ".join([f"{_value(overshoot.get('tokens'))} tokens"] * (number(overshoot.get("tokens")) is not None)
                                + [_value(overshoot.get("cost_usd"), usd=True)] * (number(overshoot.get("cost_usd")) is not None)) or "—"),
        ("largest call", f"{_value(budget.get('largest_call_tokens'))} tokens"),
        ("calls refused", _value(budget.get("refused_calls"))), ("sessions refused a call", _value(budget.get("cut_sessions"))),
        ("items cut short", _value(budget.get("cut_items"))),
    ]
    return tag("div", None, tag("h3", None, "Budget"), tag("table", {"class": "kv", "id": "gateway-budget"}, tag("tbody", None, [
        tag("tr", None, tag("th", None, k), tag("td", {"class": "num"}, v)) for k, v in rows])))


def gateway_section(model: Any) -> Markup | None:
    """The section for a summary's ``model`` object (None when the run had no gateway)."""
    if not isinstance(model, dict):
        return None
    concurrency = _object(model.get("concurrency"))
    cards = [
        _card("model calls", _value(model.get("calls"))),
        _card("upstream", _value(model.get("upstream_calls"))),
        _card("cache hits", _value(model.get("cache_hits"))),
        _card("hit rate", _value(model.get("hit_rate"), share=True)),
        _card("429s absorbed", _value(model.get("retries")), "rate-limited answers retried inside the gateway"),
        _card("errors", _value(model.get("errors"))),
        _card("input tokens", _value(model.get("input_tokens"))),
        _card("output tokens", _value(model.get("output_tokens"))),
        _card("cost", _value(model.get("cost_usd"), usd=True), "of the calls that went upstream, at the run's prices"),
        _card("tokens saved", _value(model.get("saved_tokens")), "by cache hits"),
        _card("cost saved", _value(model.get("saved_cost_usd"), usd=True), "by cache hits"),
        _card("first token", seconds(number(model.get("time_to_first_token_s"))), "mean over upstream calls"),
        _card("call", seconds(number(model.get("call_duration_s"))), "mean duration over upstream calls"),
    ]
    limits = tag("p", {"class": "muted"}, f"Concurrency limit ({concurrency.get('mode', '—')}): final {_value(concurrency.get('final'))}, "
                 f"min {_value(concurrency.get('min'))}, max {_value(concurrency.get('max'))}.")
    return tag("section", {"id": "gateway"}, tag("h2", None, "Model gateway"), tag("div", {"class": "cards"}, cards),
               limits, concurrency_svg(concurrency.get("changes"), concurrency.get("final")), _budget(model.get("budget")))

"""Inline SVG charts drawn on the server side: the latency histogram, count bars, the workflow
graph (the Mermaid graph drawn without Mermaid, which is not available offline) and the step
timeline. Everything goes through ``_markup.tag``, so names from results are escaped.
"""

from __future__ import annotations

import math
from typing import Any

from ._markup import Markup, tag

STATUS_COLOURS = {
    "ok": ("#d7f5dd", "#2e7d32"),
    "failed": ("#fbd5d5", "#c62828"),
    "error": ("#fbd5d5", "#c62828"),
    "skipped": ("#eeeeee", "#9e9e9e"),
    "cancelled": ("#fff3cd", "#b26a00"),
}
_DEFAULT_COLOURS = ("#e3ecfa", "#3d5a99")


def seconds(value: float | None) -> str:
    """A duration for people: ``850 µs``, ``12.3 ms``, ``1.23 s``, ``2 m 03 s``."""
    if value is None or not math.isfinite(value):
        return "—"
    if value == 0:
        return "0"
    if value < 0.001:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    if value < 60:
        return f"{value:.2f} s"
    minutes, rest = divmod(value, 60)
    if minutes < 60:
        return f"{minutes:.0f} m {rest:02.0f} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours:.0f} h {minutes:02.0f} m"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def histogram_svg(latency: dict[str, Any], *, width: int = 760, height: int = 260) -> Markup:
    """Bars of the latency histogram with p50/p95/p99 markers; an empty note for no data."""
    histogram = latency.get("histogram")
    if not histogram or not histogram["counts"]:
        return tag("p", {"class": "muted"}, "No durations to chart.")
    counts: list[int] = histogram["counts"]
    edges: list[float] = histogram["edges"]
    left, right, top, bottom = 48, 16, 16, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(counts) or 1
    bar_w = plot_w / len(counts)
    low, high = edges[0], edges[-1]
    span = (high - low) or 1.0

    def x_of(value: float) -> float:
        return left + (min(max(value, low), high) - low) / span * plot_w

    parts: list[Any] = [
        tag("line", {"x1": left, "y1": top + plot_h, "x2": left + plot_w, "y2": top + plot_h, "class": "axis"}),
        tag("line", {"x1": left, "y1": top, "x2": left, "y2": top + plot_h, "class": "axis"}),
        tag("text", {"x": left - 6, "y": top + 4, "text-anchor": "end", "class": "tick"}, str(peak)),
        tag("text", {"x": left - 6, "y": top + plot_h, "text-anchor": "end", "class": "tick"}, "0"),
    ]
    for index, count in enumerate(counts):
        h = count / peak * plot_h
        last = index == len(counts) - 1 and histogram.get("overflow")
        label = f"{seconds(edges[index])} – {seconds(edges[index + 1])}{' and slower' if last else ''}: {count} item{'s' if count != 1 else ''}"
        parts.append(tag(
            "rect",
            {"x": f"{left + index * bar_w + 1:.2f}", "y": f"{top + plot_h - h:.2f}", "width": f"{max(bar_w - 2, 1):.2f}",
             "height": f"{h:.2f}", "class": "hist-bar overflow" if last else "hist-bar", "data-count": count},
            tag("title", None, label),
        ))
    every = max(1, math.ceil(len(counts) / 6))
    for index in range(0, len(edges), every):
        x = left + index * bar_w
        parts.append(tag("text", {"x": f"{x:.2f}", "y": top + plot_h + 16, "text-anchor": "middle", "class": "tick"}, seconds(edges[index])))
    parts.append(tag("text", {"x": left + plot_w / 2, "y": height - 6, "text-anchor": "middle", "class": "axis-label"}, "duration per item"))
    for row, key in enumerate(("p50", "p95", "p99")):
        cls = key
        value = latency.get(key)
        if value is None:
            continue
        x = x_of(value)
        parts.append(tag("line", {"x1": f"{x:.2f}", "y1": top, "x2": f"{x:.2f}", "y2": top + plot_h, "class": f"marker {cls}"},
                         tag("title", None, f"{key} = {seconds(value)}")))
        parts.append(tag("text", {"x": f"{x + 3:.2f}", "y": top + 10 + 12 * row, "class": f"marker-label {cls}"}, key))
    return tag(
        "svg",
        {"id": "latency-histogram", "class": "chart", "viewBox": f"0 0 {width} {height}", "width": width, "height": height,
         "role": "img", "aria-label": "latency histogram", "xmlns": "http://www.w3.org/2000/svg"},
        parts,
    )


def count_bars(counts: dict[str, int], *, css: str = "bars", link: str | None = None) -> Markup:
    """A table of labels, counts, shares and bars (largest first, as given)."""
    total = sum(counts.values()) or 1
    rows = []
    for label, count in counts.items():
        share = count / total
        colours = STATUS_COLOURS.get(label, _DEFAULT_COLOURS)
        cell: Any = label
        if link is not None:
            cell = tag("button", {"type": "button", "class": "linkish", "data-filter": link, "data-value": label}, label)
        rows.append(tag(
            "tr", None,
            tag("td", {"class": "label"}, cell),
            tag("td", {"class": "num"}, str(count)),
            tag("td", {"class": "num muted"}, f"{share:.1%}"),
            tag("td", {"class": "barcell"}, tag("span", {"class": "bar", "style": f"width:{share * 100:.1f}%;background:{colours[1]}"})),
        ))
    if not rows:
        return tag("p", {"class": "muted"}, "None.")
    return tag("table", {"class": css}, tag("tbody", None, rows))


# ---- the workflow graph ------------------------------------------------------------------

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 190, 56, 36, 60, 20


def workflow_graph_svg(workflow: dict[str, Any]) -> Markup:
    """The step graph in layers (longest path from the sources), edges by kind, nodes coloured
    by status: the same graph as the Mermaid source, drawn here."""
    steps = workflow["steps"]
    if not steps:
        return tag("p", {"class": "muted"}, "The workflow has no steps.")
    layers: dict[int, list[dict[str, Any]]] = {}
    for step in steps:
        layers.setdefault(step["depth"], []).append(step)
    widest = max(len(row) for row in layers.values())
    width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X
    height = PAD * 2 + len(layers) * NODE_H + (len(layers) - 1) * GAP_Y
    where: dict[str, tuple[float, float]] = {}
    for depth in sorted(layers):
        row = layers[depth]
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        x0 = (width - row_w) / 2
        for index, step in enumerate(row):
            where[step["name"]] = (x0 + index * (NODE_W + GAP_X), PAD + depth * (NODE_H + GAP_Y))
    parts: list[Any] = [tag("defs", None, tag(
        "marker", {"id": "arrow", "viewBox": "0 0 10 10", "refX": 9, "refY": 5, "markerWidth": 9, "markerHeight": 9, "markerUnits": "userSpaceOnUse", "orient": "auto-start-reverse"},
        tag("path", {"d": "M 0 0 L 10 5 L 0 10 z", "class": "arrowhead"}),
    ))]
    for edge in workflow["edges"]:
        if edge["from"] not in where or edge["to"] not in where:
            continue
        (sx, sy), (tx, ty) = where[edge["from"]], where[edge["to"]]
        x1, y1 = sx + NODE_W / 2, sy + NODE_H
        x2, y2 = tx + NODE_W / 2, ty
        if ty <= sy:  # same layer or upwards (a route back): leave from the side
            x1, y1 = sx + NODE_W, sy + NODE_H / 2
            x2, y2 = tx + NODE_W, ty + NODE_H / 2
            path = f"M {x1:.1f} {y1:.1f} C {x1 + 60:.1f} {y1:.1f}, {x2 + 60:.1f} {y2:.1f}, {x2:.1f} {y2:.1f}"
        else:
            mid = (y1 + y2) / 2
            path = f"M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f}, {x2:.1f} {mid:.1f}, {x2:.1f} {y2 - 2:.1f}"
        kind = str(edge["kind"])
        parts.append(tag("path", {"d": path, "class": f"edge edge-{kind if kind in ('dep', 'fan-out', 'route') else 'dep'}", "marker-end": "url(#arrow)",
                                  "data-from": edge["from"], "data-to": edge["to"]},
                         tag("title", None, f"{edge['from']} → {edge['to']} ({kind})")))
        if kind != "dep":
            parts.append(tag("text", {"x": f"{(x1 + x2) / 2 + 4:.1f}", "y": f"{(y1 + y2) / 2:.1f}", "class": "edge-label"}, kind))
    for step in steps:
        x, y = where[step["name"]]
        fill, stroke = STATUS_COLOURS.get(step["status"], _DEFAULT_COLOURS)
        detail = step["status"] if step["started_s"] is None else f"{step['status']}, {seconds(step['duration_s'])}"
        if step["fanned"]:
            detail += f", {step['ok_items']}/{len(step['items'])} items"
        if step["attempts"] > 1:
            detail += f", {step['attempts']} attempts"
        parts.append(tag(
            "g", {"class": f"node status-{step['status']}", "data-step": step["name"], "data-status": step["status"]},
            tag("title", None, f"{step['name']}: {detail}" + (f" — {step['reason']}" if step.get("reason") else "")),
            tag("rect", {"x": f"{x:.1f}", "y": f"{y:.1f}", "width": NODE_W, "height": NODE_H, "rx": 8,
                         "style": f"fill:{fill};stroke:{stroke}", "class": "node-box" + (" skipped" if step["status"] == "skipped" else "")}),
            tag("text", {"x": f"{x + NODE_W / 2:.1f}", "y": f"{y + 23:.1f}", "text-anchor": "middle", "class": "node-name"}, _short(step["name"], 24)),
            tag("text", {"x": f"{x + NODE_W / 2:.1f}", "y": f"{y + 42:.1f}", "text-anchor": "middle", "class": "node-detail"}, _short(detail, 32)),
        ))
    return tag(
        "svg",
        {"id": "workflow-graph", "class": "chart graph", "viewBox": f"0 0 {width:.0f} {height:.0f}", "width": f"{width:.0f}",
         "height": f"{height:.0f}", "role": "img", "aria-label": "workflow graph", "xmlns": "http://www.w3.org/2000/svg"},
        parts,
    )


def timeline_svg(workflow: dict[str, Any], *, width: int = 760) -> Markup:
    """One bar per step from its start to its end (seconds after the workflow started)."""
    steps = workflow["steps"]
    started = [s for s in steps if s["started_s"] is not None]
    if not started:
        return tag("p", {"class": "muted"}, "No step started.")
    end = max([s["started_s"] + s["duration_s"] for s in started] + [workflow.get("duration_s") or 0.0]) or 1.0
    label_w, right, row_h, top = 170, 40, 24, 8
    plot_w = width - label_w - right
    height = top * 2 + row_h * len(steps) + 20
    parts: list[Any] = []
    for index, step in enumerate(steps):
        y = top + index * row_h
        parts.append(tag("text", {"x": label_w - 8, "y": y + 16, "text-anchor": "end", "class": "tick"}, _short(step["name"], 24)))
        if step["started_s"] is None:
            parts.append(tag("text", {"x": label_w + 4, "y": y + 16, "class": "tick muted"}, step["status"]))
            continue
        x = label_w + step["started_s"] / end * plot_w
        w = max(step["duration_s"] / end * plot_w, 2)
        fill, stroke = STATUS_COLOURS.get(step["status"], _DEFAULT_COLOURS)
        parts.append(tag("rect", {"x": f"{x:.2f}", "y": y + 4, "width": f"{w:.2f}", "height": row_h - 8, "rx": 3,
                                  "style": f"fill:{fill};stroke:{stroke}", "class": "span-bar", "data-step": step["name"]},
                         tag("title", None, f"{step['name']}: starts at {seconds(step['started_s'])}, takes {seconds(step['duration_s'])}")))
    axis_y = top + row_h * len(steps) + 4
    parts.append(tag("line", {"x1": label_w, "y1": axis_y, "x2": label_w + plot_w, "y2": axis_y, "class": "axis"}))
    for fraction in (0, 0.25, 0.5, 0.75, 1):
        parts.append(tag("text", {"x": f"{label_w + fraction * plot_w:.1f}", "y": axis_y + 14, "text-anchor": "middle", "class": "tick"},
                         seconds(fraction * end)))
    return tag(
        "svg",
        {"id": "workflow-timeline", "class": "chart", "viewBox": f"0 0 {width} {height}", "width": width, "height": height,
         "role": "img", "aria-label": "step timeline", "xmlns": "http://www.w3.org/2000/svg"},
        parts,
    )


"""The comparison page (of ``compare``, or ``report`` with a base run): per scorer the mean
difference with its interval, the regressions and improvements as tables (every row in the
page as loaded, up to ``MAX_ROWS`` per table) that open both items side by side, and a table
of every pair with "only different" filtering.

``comparison_payload`` is the data; ``comparison_section`` the server-side HTML (escaped by
``_markup.tag``); the page's script (``assets/compare.js``) renders the pairs table and the
side-by-side panel with ``textContent`` from the embedded JSON.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from ..eval import reduce_items
from ._common import DEFAULT_MAX_TEXT, clip
from ._eval_html import fmt, interval_svg, interval_text
from ._items import PREVIEW
from ._markup import Markup, tag

MAX_ROWS = 500  # rows per regressions / improvements table


def _side(lines: Sequence[Mapping[str, Any]], names: Sequence[str], max_text: int) -> dict[str, dict[str, Any]]:
    """Per item id (its first epoch's line for the texts): status, response and scores."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        item_id = str(line.get("id"))
        if item_id in out:
            continue
        raw = line.get("scores")
        scores: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        out[item_id] = {
            "status": str(line.get("status")),
            "response": clip(line.get("final_response") if isinstance(line.get("final_response"), str) else None, max_text)[0],
            "error": line["error"].get("type") if isinstance(line.get("error"), dict) else None,
            "scores": {
                name: {k: (rec.get(k) if k == "value" else clip(rec.get(k), max_text)[0]) for k in ("value", "answer", "explanation")}
                for name in names if isinstance(rec := scores.get(name), dict)
            },
        }
    return out


def comparison_payload(
    doc: Mapping[str, Any],
    base_lines: Sequence[Mapping[str, Any]],
    candidate_lines: Sequence[Mapping[str, Any]],
    *,
    base_name: str,
    candidate_name: str,
    prompts: Mapping[str, str] | None = None,
    max_text: int = DEFAULT_MAX_TEXT,
) -> dict[str, Any]:
    """The comparison page's data: the comparison document (``compare`` as JSON), and every pair's texts."""

    names = list(doc["scorers"])
    base, candidate = _side(base_lines, names, max_text), _side(candidate_lines, names, max_text)
    base_values, _ = reduce_items(base_lines, names)
    candidate_values, _ = reduce_items(candidate_lines, names)
    pairs = []
    for item_id in base:
        if item_id not in candidate:
            continue
        b, c = base[item_id], candidate[item_id]
        values = {name: [base_values[item_id].get(name), candidate_values[item_id].get(name)] for name in names}
        different = b["status"] != c["status"] or b["response"] != c["response"] or any(v[0] != v[1] for v in values.values())
        pairs.append({
            "id": item_id,
            "prompt": clip(prompts.get(item_id), max_text)[0] if prompts is not None else None,
            "base": b, "candidate": c, "values": values, "different": different,
        })
    return {"doc": dict(doc), "names": names, "base_name": base_name, "candidate_name": candidate_name,
            "pairs": pairs, "has_prompts": prompts is not None}


def _value(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3f}"


def _signed(value: Any) -> str:
    return "—" if value is None else f"{value:+.4f}"


def _pair_table(cmp: Mapping[str, Any], name: str, ids: Sequence[str], kind: str) -> Markup:
    by_id = {p["id"]: p for p in cmp["pairs"]}
    shown = list(ids)[:MAX_ROWS]
    rows = []
    for item_id in shown:
        pair = by_id.get(item_id)
        if pair is None:
            continue
        b, c = pair["values"][name]
        rows.append(tag(
            "tr", {"class": "diff-row", "data-pair": item_id, "tabindex": 0},
            tag("td", {"class": "c-id"}, item_id),
            tag("td", {"class": "num"}, _value(b)), tag("td", {"class": "num"}, _value(c)),
            tag("td", {"class": "num " + ("pos" if c > b else "neg")}, _signed(c - b)),
            tag("td", {"class": "preview"}, clip(pair["prompt"], PREVIEW)[0] or "") if cmp["has_prompts"] else None,
            tag("td", {"class": "preview"}, clip(pair["base"]["response"], PREVIEW)[0] or ""),
            tag("td", {"class": "preview"}, clip(pair["candidate"]["response"], PREVIEW)[0] or ""),
        ))
    head = ["id", "base", "candidate", "change"] + (["prompt"] if cmp["has_prompts"] else []) + ["base response", "candidate response"]
    more = len(ids) - len(shown)
    return tag("div", {"class": f"pair-table {kind}", "data-scorer": name},
               tag("h4", None, f"{kind.capitalize()} ({len(ids)})"),
               tag("table", {"class": "plain pairs", "data-kind": kind, "data-scorer": name},
                   tag("thead", None, tag("tr", None, [tag("th", None, h) for h in head])), tag("tbody", None, rows))
               if ids else tag("p", {"class": "muted"}, "None."),
               tag("p", {"class": "muted"}, f"… and {more} more (the comparison as JSON lists them all)") if more > 0 else None)


def comparison_section(cmp: Mapping[str, Any]) -> Markup:
    """The comparison: counts, the differences with intervals, regressions and improvements,
    usage and latency, and the all-pairs table (filled by the script)."""
    doc = cmp["doc"]
    names = cmp["names"]
    summary_rows = []
    for name in names:
        s = doc["scorers"][name]
        summary_rows.append(tag(
            "tr", {"data-scorer": name},
            tag("td", None, tag("code", None, name)),
            tag("td", {"class": "num"}, fmt(s["n"])),
            tag("td", {"class": "num"}, fmt(s["mean_base"])), tag("td", {"class": "num"}, fmt(s["mean_candidate"])),
            tag("td", {"class": "num", "data-key": "diff", "data-value": orjson.dumps(s["diff"]).decode()}, _signed(s["diff"])),
            tag("td", {"class": "num", "data-key": "ci95", "data-value": orjson.dumps(s["ci95"]).decode()}, interval_text(s["ci95"])),
            tag("td", {"class": "num", "data-key": "p_value"}, fmt(s["p_value"])),
            tag("td", {"class": "num", "data-key": "p_adjusted"}, fmt(s.get("p_adjusted"))),
            tag("td", {"class": "num"}, str(len(s["regressions"]))), tag("td", {"class": "num"}, str(len(s["improvements"]))),
        ))
    scorers = tag("table", {"class": "matrix", "id": "compare-scorers"},
                  tag("thead", None, tag("tr", None, [tag("th", {"class": None if h == "scorer" else "num"}, h) for h in (
                      "scorer", "pairs", "base", "candidate", "difference", "95% interval", "p", "p adjusted", "regressions",
                      "improvements")])),
                  tag("tbody", None, summary_rows))
    chart = interval_svg([(n, doc["scorers"][n]["diff"], doc["scorers"][n]["ci95"]) for n in names], zero=True, id="compare-chart")
    cards = tag("div", {"class": "cards"}, [
        tag("div", {"class": "card"}, tag("div", {"class": "k"}, label), tag("div", {"class": "v", "data-key": key}, str(value)))
        for key, label, value in (("pairs", "pairs", doc["pairs"]), ("only_in_base", "only in base", len(doc["only_in_base"])),
                                  ("only_in_candidate", "only in candidate", len(doc["only_in_candidate"])),
                                  ("status_changes", "status changes", len(doc["status_changes"])))
    ])
    changes = tag("table", {"class": "plain", "id": "status-changes"}, tag("thead", None, tag("tr", None, tag("th", None, "id"), tag("th", None, "base"), tag("th", None, "candidate"))),
                  tag("tbody", None, [tag("tr", {"class": "diff-row", "data-pair": ch["id"], "tabindex": 0}, tag("td", None, ch["id"]), tag("td", None, ch["base"]), tag("td", None, ch["candidate"]))
                                      for ch in doc["status_changes"][:MAX_ROWS]])) if doc["status_changes"] else None
    per_scorer = [tag("div", {"class": "scorer-changes", "data-scorer": name}, tag("h3", None, name),
                      _pair_table(cmp, name, doc["scorers"][name]["regressions"], "regressions"),
                      _pair_table(cmp, name, doc["scorers"][name]["improvements"], "improvements"))
                  for name in names]
    side_rows = []
    for key, label in (("latency", "latency per item (s)"), ("usage", "tokens per item")):
        side = doc[key]
        for stat in ("total", "median", "p95"):
            side_rows.append(tag("tr", None, tag("th", None, f"{label}: {stat}"), tag("td", {"class": "num"}, fmt(side["base"].get(stat), 3)),
                                 tag("td", {"class": "num"}, fmt(side["candidate"].get(stat), 3)), tag("td", {"class": "num"}, fmt(side["ratio"].get(stat), 3))))
    if "cost_usd" in doc["usage"]["base"] or "cost_usd" in doc["usage"]["candidate"]:
        side_rows.append(tag("tr", None, tag("th", None, "cost (USD): total"), tag("td", {"class": "num"}, fmt(doc["usage"]["base"].get("cost_usd"), 6)),
                             tag("td", {"class": "num"}, fmt(doc["usage"]["candidate"].get("cost_usd"), 6)), tag("td", {"class": "num"}, fmt(doc["usage"]["ratio"].get("cost_usd"), 3))))
    usage = tag("table", {"class": "matrix", "id": "compare-usage"}, tag("thead", None, tag("tr", None, [tag("th", {"class": "num" if h else None}, h) for h in ("", "base", "candidate", "ratio")])),
                tag("tbody", None, side_rows))
    pairs_controls = tag("div", {"class": "controls"},
                         tag("label", None, tag("input", {"type": "checkbox", "id": "only-different"}), " only different"),
                         tag("input", {"type": "search", "id": "pair-search", "placeholder": "Search ids and responses…", "aria-label": "search pairs"}),
                         tag("span", {"id": "pairs-info", "class": "muted"}))
    return tag(
        "section", {"id": "comparison"},
        tag("h2", None, "Comparison"),
        tag("p", None, "base ", tag("code", None, cmp["base_name"]), " → candidate ", tag("code", None, cmp["candidate_name"])),
        cards,
        tag("div", {"class": "grid", "style": "grid-template-columns: 3fr 2fr"}, scorers, chart),
        tag("p", {"class": "muted"}, "Differences are candidate − base over the pairs where both have a value; 95 % paired percentile bootstrap "
            "(10,000 resamples; over 10,000 pairs of many distinct values, max(1,000, 10⁸ / n)); p: McNemar's exact "
            "test for 0/1 scores, else a paired sign-flip permutation test (10,000 assignments; from 313,600 "
            "differences its normal approximation, when that is within 0.002 of it)."),
        leaderboard_section(doc),
        tag("h3", None, "Status changes") if changes is not None else None, changes,
        per_scorer,
        tag("h3", None, "Usage and latency"), usage,
        tag("h3", None, "Every pair"), pairs_controls,
        tag("table", {"class": "plain pairs", "id": "pairs-table"}, tag("thead", None, tag("tr", None, [tag("th", None, h) for h in (
            ["id", "base status", "candidate status"] + [f"{n} (base → candidate)" for n in names] + ["base response", "candidate response"])])),
            tag("tbody", {"id": "pairs-body"})),
        tag("div", {"class": "pager"}, tag("button", {"type": "button", "id": "pairs-prev"}, "‹ Prev"), tag("span", {"id": "pairs-page", "class": "muted"}),
            tag("button", {"type": "button", "id": "pairs-next"}, "Next ›")),
    )


def leaderboard_section(doc: Mapping[str, Any]) -> Markup | None:
    """The leaderboard (runs ranked per scorer, the differences that hold after the correction)
    and, for several candidates, every comparison's raw and adjusted p; None without one."""
    board = doc.get("leaderboard")
    if not board:
        return None
    tables = []
    for name, rows in board.items():
        tables.append(tag("table", {"class": "matrix leaderboard", "data-scorer": name},
                          tag("caption", None, name),
                          tag("thead", None, tag("tr", None, [tag("th", None, h) for h in (
                              "rank", "run", "mean", "95% interval", "n", "better than", "worse than")])),
                          tag("tbody", None, [tag("tr", {"data-run": row["run"]},
                                                  tag("td", {"class": "num"}, str(row["rank"])), tag("td", None, tag("code", None, row["run"])),
                                                  tag("td", {"class": "num"}, fmt(row["mean"])), tag("td", {"class": "num"}, interval_text(row["ci95"])),
                                                  tag("td", {"class": "num"}, str(row["n"])), tag("td", None, ", ".join(row["better_than"])),
                                                  tag("td", None, ", ".join(row["worse_than"])))
                                              for row in rows])))
    every = None
    if doc.get("all_comparisons"):
        every = tag("table", {"class": "matrix", "id": "all-comparisons"},
                    tag("thead", None, tag("tr", None, [tag("th", None, h) for h in (
                        "base", "candidate", "scorer", "n", "difference", "95% interval", "p", "p adjusted")])),
                    tag("tbody", None, [tag("tr", None, tag("td", None, tag("code", None, one["base"])),
                                            tag("td", None, tag("code", None, one["candidate"])), tag("td", None, name),
                                            tag("td", {"class": "num"}, str(s["n"])), tag("td", {"class": "num"}, _signed(s["diff"])),
                                            tag("td", {"class": "num"}, interval_text(s["ci95"])), tag("td", {"class": "num"}, fmt(s["p_value"])),
                                            tag("td", {"class": "num"}, fmt(s.get("p_adjusted"))))
                                        for one in doc["all_comparisons"] for name, s in one["scorers"].items()]))
    return tag("div", {"id": "leaderboard"}, tag("h3", None, "Leaderboard"),
               tag("p", {"class": "muted"}, f"Runs ranked by mean per scorer; a difference holds when its p, adjusted across "
                   f"comparisons and scorers ({doc.get('correction', 'holm')}), is below 0.05."),
               tables, tag("h3", None, "Every comparison") if every is not None else None, every)


def pair_panel() -> Markup:
    """The side-by-side panel (filled by the script)."""
    return tag("aside", {"id": "pair", "hidden": True, "aria-label": "both items"},
               tag("button", {"type": "button", "class": "close", "id": "pair-close", "aria-label": "close"}, "✕"),
               tag("h2", {"id": "pair-title"}), tag("div", {"id": "pair-body"}))

"""The report's "Model gateway" section: the summary's ``model`` totals, the concurrency chart
and the budget; absent without a gateway; a malformed ``model`` cannot break the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from dsh_orchestra.report import build_payload, render_html

MODEL = {
    "calls": 120, "upstream_calls": 90, "cache_hits": 30, "retries": 7, "errors": 2, "input_tokens": 900,
    "output_tokens": 450, "saved_tokens": 450, "cost_usd": 0.0054, "saved_cost_usd": 0.0018,
    "time_to_first_token_s": 0.25, "call_duration_s": 1.5, "hit_rate": 0.25,
    "concurrency": {"mode": "auto", "final": 6, "min": 4, "max": 9, "changes": [[0.0, 8], [3.5, 9], [7.25, 4], [20.0, 6]]},
    "budget": {"max_total_tokens": 1000, "max_total_cost": None, "tokens": 1080, "cost_usd": None, "reached": True,
               "reached_with": {"tokens": 1003, "cost_usd": None, "in_flight": 8}, "overshoot": {"tokens": 80, "cost_usd": None},
               "largest_call_tokens": 15, "refused_calls": 9, "cut_sessions": 4, "cut_items": 3},
}


def write_run(tmp_path: Path, model: Any) -> dict[str, Path]:
    results = tmp_path / "results.jsonl"
    results.write_bytes(orjson.dumps({"id": "a", "status": "ok", "session_id": "s", "final_response": "x", "finish_reason": "completed",
                                      "subagents": [], "approvals": [], "attempts": 1, "duration_s": 0.5, "error": None,
                                      "metadata": {}}) + b"\n")
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"total": 1, "ok": 1, "error": 0, "model": model}))
    return {"results": results, "summary": summary}


def test_the_gateway_totals_and_the_limit_over_time_are_shown(tmp_path: Path) -> None:
    html = render_html(build_payload(**write_run(tmp_path, MODEL)))
    section = html[html.index('<section id="gateway">'):]
    section = section[:section.index("</section>")]
    for text in ("Model gateway", "cache hits", "25.0%", "429s absorbed", "tokens saved", "450", "$0.0054", "$0.0018",
                 "final 6, min 4, max 9", 'id="gateway-concurrency"', "Budget", "items cut short", "sessions refused a call"):
        assert text in section, text
    assert 'href="#gateway"' in html
    chart = section[section.index("<svg"):section.index("</svg>")]
    assert chart.count("V") >= 3  # a step per change of the limit


def test_no_gateway_no_section_and_a_malformed_model_is_shown_as_dashes(tmp_path: Path) -> None:
    html = render_html(build_payload(**write_run(tmp_path, None)))
    assert 'id="gateway"' not in html and 'href="#gateway"' not in html
    odd = {"calls": "many", "hit_rate": "x", "concurrency": {"changes": [[1, "a"], "bad", [None, 3]]},
           "budget": {"reached_with": [1], "overshoot": "big"}, "cost_usd": "<script>alert(1)</script>"}
    (tmp_path / "b").mkdir()
    html = render_html(build_payload(**write_run(tmp_path / "b", odd)))
    section = html[html.index('<section id="gateway">'):]
    assert "<script>alert" not in html and "—" in section and 'id="gateway-concurrency"' not in section

"""A report of more items than it embeds details for (``MAX_DETAILS``, lowered here): every
row is in the table; the details (drawer) of the items in error or with a failing score first,
then the rest in file order; a row without details says so and names the viewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from playwright_browser import Browser
from dsh_orchestra.report import build_payload, write_report


def result(index: int) -> dict[str, Any]:
    failed = index % 10 == 3
    return {"id": f"item-{index:02d}", "status": "error" if failed else "ok", "session_id": f"s{index}",
            "final_response": "" if failed else f"answer {index}", "finish_reason": "error" if failed else "completed",
            "subagents": [], "approvals": [], "attempts": 1, "duration_s": 0.5,
            "error": {"type": "TurnFailed", "message": "boom"} if failed else None, "metadata": {},
            "scores": {"exact": {"value": None if failed else int(index % 7 != 5), "answer": None, "explanation": None}}}


def test_details_past_the_cap(tmp_path: Path, browser: Browser, monkeypatch: Any) -> None:
    monkeypatch.setattr("dsh_orchestra.report._items.MAX_DETAILS", 6)
    results = tmp_path / "results.jsonl"
    results.write_bytes(b"".join(orjson.dumps(result(i)) + b"\n" for i in range(30)))
    batch = build_payload(results=results)["batch"]
    assert len(batch["rows"]) == 30 and batch["details_embedded"] == 6
    embedded = [f"item-{i:02d}" for i, d in enumerate(batch["details"]) if d is not None]
    # the 3 in error (3, 13, 23) and the 3 with exact = 0 (5, 12, 19), listed in file order
    assert embedded == ["item-03", "item-05", "item-12", "item-13", "item-19", "item-23"]

    out = write_report(tmp_path / "report.html", results=results)
    page = browser.new_page(1280, 900)
    page.goto(out.as_uri())
    page.wait_for("document.body.dataset.ready === '1'")
    page.click('#items-body tr[data-index="3"] td.c-id')
    page.wait_for("document.getElementById('detail-title').textContent === 'item-03'")
    assert "boom" in page.evaluate("document.getElementById('detail-error').textContent")
    page.click('#items-body tr[data-index="4"] td.c-id')
    page.wait_for("document.getElementById('detail-title').textContent === 'item-04'")
    note = page.evaluate("document.getElementById('detail-not-embedded').textContent")
    assert "details of 6 of its 30 items" in note and "dsh-orchestra view" in note
    assert page.problems() == []

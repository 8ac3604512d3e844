"""10,000 items: the report stays one file, loads quickly and renders only a page of rows."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import orjson

from playwright_browser import Browser
from dsh_orchestra.report import write_report

COUNT = 10_000


def synthetic_line(index: int, rng: random.Random) -> dict[str, Any]:
    """A result line of the documented contract (batch/_results.py result_line)."""
    failed = index % 37 == 0
    timed_out = index % 101 == 0
    approvals = [{"tool_name": "bash", "call_id": f"c{index}", "outcome": "allowed-once" if index % 3 else "rejected",
                  "rule": "allow-bash" if index % 3 else "default"}] if index % 7 == 0 else []
    subagents = [{"child_session_id": f"child-{index}-{k}", "status": "ok", "stop_reason": "completed", "text": f"child {k}"}
                 for k in range(index % 4 == 0 and 2 or 0)]
    error = None
    if timed_out:
        error = {"type": "TimeoutError", "message": f"item 'item-{index:05d}' did not finish within 30 s"}
    elif failed:
        error = {"type": "TurnFailed", "message": "INVALID_REQUEST: scripted HTTP 400"}
    return {
        "id": f"item-{index:05d}",
        "status": "error" if error else "ok",
        "session_id": f"item-{rng.getrandbits(64):016x}",
        "final_response": "" if error else f"answer {index}: " + "lorem ipsum dolor sit amet " * rng.randint(2, 12),
        "finish_reason": None if timed_out else "error" if failed else ("max-tokens" if index % 53 == 0 else "completed"),
        "subagents": subagents,
        "approvals": approvals,
        "attempts": 3 if timed_out else 1,
        "duration_s": round(rng.lognormvariate(0.0, 0.6), 6),
        "error": error,
        "metadata": {"index": index},
    }


def test_ten_thousand_items(browser: Browser, tmp_path: Path) -> None:
    rng = random.Random(7)
    results = tmp_path / "results.jsonl"
    results.write_bytes(b"".join(orjson.dumps(synthetic_line(i, rng)) + b"\n" for i in range(COUNT)))
    started = time.monotonic()
    out = write_report(tmp_path / "report.html", results=results)
    build_s = time.monotonic() - started
    assert build_s < 300, f"building the report took {build_s:.1f} s"  # a hang guard; bench/report_large.py measures speed
    assert out.stat().st_size < 20 * 1024 * 1024

    page = browser.new_page(1280, 900)
    page.goto(out.as_uri(), timeout=60)
    page.wait_for("document.body.dataset.ready === '1'", timeout=30)
    load_ms = page.evaluate("performance.now()")
    assert load_ms < 8000, f"the page took {load_ms:.0f} ms to be ready"

    # only one page of rows is in the DOM, and the pager knows them all
    assert page.evaluate("document.querySelectorAll('#items-body tr').length") == 100
    assert page.evaluate("document.getElementById('items-info').textContent") == f"Items 1–100 of {COUNT}"
    assert page.evaluate("document.getElementById('page-count').textContent") == "of 100"

    # the last page holds the last items
    page.evaluate("(() => { const p = document.getElementById('page-number'); p.value = '100'; p.dispatchEvent(new Event('change')); })()")
    page.wait_for("document.getElementById('items-info').textContent.startsWith('Items 9901')")
    ids = page.evaluate("Array.from(document.querySelectorAll('#items-body td.c-id')).map(td => td.textContent)")
    assert ids[-1] == "item-09999" and len(ids) == 100

    # a search over 10,000 items answers quickly
    before = page.evaluate("performance.now()")
    page.type_text("#search", "item-04243")
    page.wait_for("document.querySelectorAll('#items-body tr').length === 1")
    assert page.evaluate("performance.now()") - before < 3000
    page.click("#items-body tr td.c-id")
    page.wait_for("document.getElementById('detail-title').textContent === 'item-04243'")
    assert page.evaluate("document.getElementById('detail-response').textContent").startswith("answer 4243: lorem")
    page.press("Escape")
    page.click("#reset")
    page.wait_for("document.querySelectorAll('#items-body tr').length === 100")

    # sorting all of them by duration, slowest first
    page.click('th[data-col="duration_s"]')
    page.click('th[data-col="duration_s"]')
    page.wait_for("document.querySelector('th[data-col=duration_s]').getAttribute('aria-sort') === 'descending'")
    first = page.evaluate("document.querySelector('#items-body tr td.c-id').textContent")
    lines = [orjson.loads(line) for line in results.read_bytes().splitlines()]
    assert first == max(lines, key=lambda line: line["duration_s"])["id"]

    # the aggregates cover every item
    groups = page.evaluate("Array.from(document.querySelectorAll('#errors .error-group')).map(g => g.dataset.errorType)")
    assert groups == ["TurnFailed", "TimeoutError"]
    assert page.evaluate("document.querySelectorAll('#latency-histogram rect.hist-bar').length") >= 10
    assert page.problems() == []

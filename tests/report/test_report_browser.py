"""The report of a REAL simulator batch run, opened in headless Chromium and used like a person would."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import urllib.parse
from pathlib import Path

import orjson

from playwright_browser import Browser
from report_support import XSS_ID, SimRun

from dsh_orchestra.batch._summary import percentile
from dsh_orchestra.report._charts import seconds

DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "report-screenshot.png"
UPDATE_ENV = "DSH_ORCHESTRA_UPDATE_SCREENSHOT"

ROW_IDS = "Array.from(document.querySelectorAll('#items-body tr td.c-id')).map(td => td.textContent)"


def test_the_batch_ran_every_kind_of_item(sim_run: SimRun) -> None:
    """The run the report is built from really exercised the cases it shows."""
    lines = {line["id"]: line for line in sim_run.lines()}
    assert len(lines) == 32
    assert lines["approve-1"]["approvals"][0]["outcome"] == "allowed-once"
    assert lines["deny-1"]["approvals"][0]["outcome"] == "rejected"
    assert len(lines["spawn-1"]["subagents"]) == 2
    assert lines["fail-1"]["error"]["type"] == "TurnFailed"
    assert lines["hang-1"]["error"]["type"] == "TimeoutError"
    assert "window.pwned=1" in lines["xss-response"]["final_response"]
    assert sim_run.returncode == 1  # some items ended in error


def test_report_is_self_contained(sim_run: SimRun) -> None:
    """One file, no external resource: nothing to fetch when it is opened offline."""
    html = sim_run.report.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    for needle in ("src=\"http", "href=\"http", "<link", "@import", "cdn", "<script src"):
        assert needle not in html.lower().replace("href=\"https://mermaid", "")
    # the untrusted texts are nowhere as markup: only escaped inside the JSON block
    assert "<script>window.pwned" not in html
    assert "<svg onload" not in html
    assert "<img src=x" not in html


def test_report_in_the_browser(sim_run: SimRun, browser: Browser, tmp_path: Path) -> None:
    """Loads without console errors, lists every item, draws the histogram, opens an item,
    shows untrusted markup as text without running it, searches, sorts and links transcripts."""
    page = browser.new_page(1280, 1000)
    page.goto(sim_run.report.as_uri())
    assert page.wait_for("document.body.dataset.ready === '1'")
    ids = [line["id"] for line in sim_run.lines()]

    # every item is listed (32 fit on the first page of 100)
    assert sorted(page.evaluate(ROW_IDS)) == sorted(ids)
    assert page.evaluate("document.getElementById('items-info').textContent") == f"Items 1–{len(ids)} of {len(ids)}"

    # the histogram is drawn: bars with a size, their counts add up to the items
    bars = page.evaluate(
        "Array.from(document.querySelectorAll('#latency-histogram rect.hist-bar'))"
        ".map(r => [Number(r.dataset.count), r.getBoundingClientRect().width, r.getBoundingClientRect().height])"
    )
    assert bars and sum(count for count, _, _ in bars) == len(ids)
    assert all(width > 0 for _, width, _ in bars)
    assert max(height for _, _, height in bars) > 50
    durations = sorted(line["duration_s"] for line in sim_run.lines() if line.get("duration_s") is not None)
    assert page.evaluate("document.querySelector('#percentiles td[data-key=p95]').textContent") == seconds(percentile(durations, 0.95))

    # counts and groups
    status_text = page.evaluate("document.getElementById('status-counts').textContent")
    assert "ok" in status_text and "error" in status_text
    errors = page.evaluate("Array.from(document.querySelectorAll('#errors .error-group')).map(g => g.dataset.errorType)")
    assert set(errors) == {"TurnFailed", "TimeoutError"}
    by_rule = page.evaluate("document.getElementById('approvals-by-rule').textContent")
    assert "allow-bash" in by_rule and "default" in by_rule
    assert "bash" in page.evaluate("document.getElementById('approvals-by-tool').textContent")

    # a real click on a row opens its details with the final response
    index = ids.index("approve-1")
    page.click(f'#items-body tr[data-index="{index}"] td.c-id')
    assert page.wait_for("document.getElementById('detail').hidden === false")
    assert page.evaluate("document.getElementById('detail-title').textContent") == "approve-1"
    assert page.evaluate("document.getElementById('detail-response').textContent") == "approval was allowed-once"
    assert page.evaluate("document.getElementById('detail-prompt').textContent") == "APPROVE me"
    assert "allow-bash" in page.evaluate("document.getElementById('detail-body').textContent")
    page.press("Escape")
    assert page.wait_for("document.getElementById('detail').hidden === true")

    # an item whose response and prompt hold HTML and script: shown as text, nothing runs
    page.click(f'#items-body tr[data-index="{ids.index("xss-response")}"] td.c-id')
    page.wait_for("document.getElementById('detail-title').textContent === 'xss-response'")
    shown = page.evaluate("document.getElementById('detail-response').textContent")
    assert shown == '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"> & done'
    assert page.evaluate("document.getElementById('detail-prompt').textContent").endswith("<script>window.pwned=3</script><!--")
    assert page.evaluate("document.querySelectorAll('#detail-body script, #detail-body img, main svg[onload], main img').length") == 0
    page.screenshot(tmp_path / "xss-item.png")

    # the item whose id is markup: listed as text, its error button opens it
    assert XSS_ID in page.evaluate(ROW_IDS)
    page.click(f'#errors button[data-item="{XSS_ID}"]')
    page.wait_for(f"document.getElementById('detail-title').textContent === {json.dumps(XSS_ID)}")
    assert "<img src=x onerror=window.pwned=4>" in page.evaluate("document.getElementById('detail-error').textContent")
    assert page.evaluate("typeof window.pwned") == "undefined"

    # its transcript link is relative, and points at the gzip JSON Lines file of that item
    href = page.evaluate("document.getElementById('detail-transcript').getAttribute('href')")
    assert href.startswith("../transcripts/") and ".." not in href[3:]
    target = (sim_run.report.parent / urllib.parse.unquote(href)).resolve()
    with gzip.open(target) as handle:
        header = orjson.loads(handle.readline())
    assert header["transcript"]["item"] == XSS_ID
    page.press("Escape")

    # searching narrows the table (typed into the box like a person)
    page.type_text("#search", "approve")
    page.wait_for("document.querySelectorAll('#items-body tr').length === 2")
    assert sorted(page.evaluate(ROW_IDS)) == ["approve-1", "approve-2"]
    page.click("#reset")
    page.wait_for(f"document.querySelectorAll('#items-body tr').length === {len(ids)}")

    # the error filter from the errors section, then sorting by duration (descending)
    page.click('#errors button[data-filter="error"][data-value="TimeoutError"]')
    page.wait_for("document.querySelectorAll('#items-body tr').length === 1")
    assert page.evaluate(ROW_IDS) == ["hang-1"]
    page.click("#reset")
    page.click('th[data-col="duration_s"]')
    page.click('th[data-col="duration_s"]')
    page.wait_for("document.querySelector('th[data-col=duration_s]').getAttribute('aria-sort') === 'descending'")
    assert page.evaluate(ROW_IDS)[0] == "hang-1"  # it ran into the timeout (HANG_TIMEOUT)

    assert page.problems() == []
    assert page.evaluate("typeof window.pwned") == "undefined"


def test_screenshot_for_the_docs(sim_run: SimRun, browser: Browser, tmp_path: Path) -> None:
    """A screenshot of the real report (docs/report-screenshot.png when DSH_ORCHESTRA_UPDATE_SCREENSHOT=1)."""
    page = browser.new_page(1280, 1200)
    page.goto(sim_run.report.as_uri() + "#item=spawn-1")
    page.wait_for("document.body.dataset.ready === '1'")
    assert page.wait_for("document.getElementById('detail').hidden === false")  # opened from the URL
    assert page.evaluate("document.querySelectorAll('#detail-body pre.subagent-text').length") == 2
    page.click("#detail-close")
    page.wait_for("document.getElementById('detail').hidden === true")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for("window.scrollY === 0")
    shot = tmp_path / "report.png"
    data = page.screenshot(shot)
    assert data.startswith(b"\x89PNG") and len(data) > 20_000
    assert page.problems() == []
    if os.environ.get(UPDATE_ENV) == "1":
        shutil.copyfile(shot, DOCS_SCREENSHOT)
    assert DOCS_SCREENSHOT.stat().st_size < 300_000


def test_items_named_like_object_properties_open(browser: Browser, tmp_path: Path) -> None:
    """Ids such as ``__proto__``, ``constructor`` or ``toString`` are ids like any other: each is
    listed, opens from the table, from the errors list and from a ``#item=`` link."""
    from dsh_orchestra.report import write_report

    ids = ["__proto__", "constructor", "toString", "hasOwnProperty", "valueOf", "plain"]
    lines = [{"id": i, "status": "error", "session_id": f"s-{i}", "final_response": f"answer of {i}",
              "finish_reason": "error", "subagents": [], "approvals": [], "attempts": 1, "duration_s": 0.1,
              "error": {"type": "TurnFailed", "message": f"failed {i}"}, "metadata": {}} for i in ids]
    results = tmp_path / "results.jsonl"
    results.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in lines))
    report = write_report(tmp_path / "report.html", results=results)
    page = browser.new_page(1280, 900)
    for item_id in ids:
        page.goto("about:blank")  # a hash-only change would not load the page again
        page.goto(report.as_uri() + "#item=" + urllib.parse.quote(item_id))
        assert page.wait_for("document.body.dataset.ready === '1'")
        assert page.wait_for(f"document.getElementById('detail-title').textContent === {json.dumps(item_id)}"), item_id
        assert page.evaluate("document.getElementById('detail-response').textContent") == f"answer of {item_id}"
    page.goto("about:blank")
    page.goto(report.as_uri())
    assert page.wait_for("document.body.dataset.ready === '1'")
    assert sorted(page.evaluate(ROW_IDS)) == sorted(ids)
    for item_id in ids:
        page.click(f'#errors button[data-item="{item_id}"]')
        assert page.wait_for(f"document.getElementById('detail-title').textContent === {json.dumps(item_id)}"), item_id
        page.press("Escape")
        page.click(f'#items-body tr[data-index="{ids.index(item_id)}"] td.c-id')
        assert page.wait_for(f"document.getElementById('detail-title').textContent === {json.dumps(item_id)}"), item_id
        page.press("Escape")
    assert page.problems() == []

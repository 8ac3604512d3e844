"""The viewer over a REAL simulator batch, in the system Chromium: the numbers, the filters,
an item's whole conversation with subagents, the comparison, hostile strings as text."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from view_support import RunningViewer, ViewRun
from playwright_browser import Browser, Tab
from report_support import XSS_ID

DOCS = Path(__file__).resolve().parents[2] / "docs"
UPDATE_ENV = "DSH_ORCHESTRA_UPDATE_SCREENSHOT"
ROW_IDS = "Array.from(document.querySelectorAll('#items-body tr.item-row')).map(tr => tr.dataset.id)"


def shot(page: Tab, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    data = page.screenshot(path)
    assert data.startswith(b"\x89PNG")
    if os.environ.get(UPDATE_ENV) == "1":
        shutil.copyfile(path, DOCS / name)


def open_run(page: Tab, v: RunningViewer, n: int = 0) -> None:
    page.goto(v.page(f"/run/{n}"))
    page.wait_for("document.body.dataset.ready === '1' && document.body.dataset.loading === ''", timeout=30)


def wait_rows(page: Tab, count: int) -> list[str]:
    page.wait_for(f"document.body.dataset.loading === '' && document.querySelectorAll('#items-body tr.item-row').length === {count}", timeout=30)
    ids: list[str] = page.evaluate(ROW_IDS)
    return ids


def set_select(page: Tab, selector: str, value: str) -> None:
    page.page.select_option(selector, value)


def test_runs_and_run_page_numbers(view_run: ViewRun, browser: Browser, viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    lines = view_run.lines()
    summary = view_run.summary_data()
    v = viewer(view_run.results.parent)
    page = browser.new_page(1280, 900)
    page.goto(v.url)
    page.wait_for("document.body.dataset.ready === '1'")
    row = "#runs-table tr[data-run='0']"
    items = len({line["id"] for line in lines})
    ok = sum(1 for line in lines if line["status"] == "ok")
    assert page.evaluate(f"document.querySelector(\"{row} td.items\").textContent") == str(items)
    assert page.evaluate(f"document.querySelector(\"{row} td.ok\").textContent") == str(ok)
    assert page.evaluate(f"document.querySelector(\"{row} td.error\").textContent") == str(len(lines) - ok)
    mean = summary["scores"]["includes"]["mean"]
    low, high = summary["scores"]["includes"]["ci95"]
    assert page.evaluate(f"document.querySelector(\"{row} [data-scorer=includes]\").textContent") == (
        f"includes: {mean:.4f} [{low:.4f}, {high:.4f}]")
    assert page.evaluate(f"document.querySelector(\"{row} td.state\").textContent") == "finished"
    shot(page, tmp_path, "view-runs.png")

    page.click(f"{row} a.run-link")
    page.wait_for("document.body.dataset.ready === '1' && document.body.dataset.finished === '1'", timeout=30)
    assert page.evaluate("document.querySelector('#card-lines .v').textContent") == str(len(lines))
    assert page.evaluate("document.querySelector('#card-items .v').textContent") == str(items)
    assert page.evaluate("document.querySelector('#card-ok .v').textContent") == str(ok)
    assert page.evaluate("document.querySelector('#scores tr[data-scorer=includes] td.mean').textContent") == f"{mean:.4f}"
    files = page.evaluate("document.querySelector('dl.files').textContent")
    assert str(view_run.dataset) in files and str(view_run.transcripts) in files and str(view_run.audit) in files
    assert page.evaluate("document.getElementById('items-info').textContent") == f"Items 1–{items} of {items}" if items <= 50 else True
    assert page.problems() == []


def test_filters_sort_and_epochs(view_run: ViewRun, browser: Browser, viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    lines = view_run.lines()
    all_ids = list(dict.fromkeys(line["id"] for line in lines))
    v = viewer(view_run.results.parent)
    page = browser.new_page(1280, 1000)
    open_run(page, v)
    assert sorted(wait_rows(page, len(all_ids))) == sorted(all_ids)

    errors = sorted({line["id"] for line in lines if line["status"] == "error"})
    set_select(page, "#filter-status", "error")
    assert sorted(wait_rows(page, len(errors))) == errors
    turn_failed = sorted({line["id"] for line in lines if (line.get("error") or {}).get("type") == "TurnFailed"})
    set_select(page, "#filter-status", "")
    set_select(page, "#filter-error", "TurnFailed")
    assert sorted(wait_rows(page, len(turn_failed))) == turn_failed
    page.click("#reset")
    wait_rows(page, len(all_ids))

    # a scorer's value: below 1 (or none) in some epoch
    failed = sorted({line["id"] for line in lines if (line["scores"]["includes"]["value"] is not None and line["scores"]["includes"]["value"] < 1)})
    page.page.fill("input.score-filter[data-scorer=includes]", "<1")
    page.page.press("input.score-filter[data-scorer=includes]", "Enter")
    assert sorted(wait_rows(page, len(failed))) == failed
    page.click("#reset")
    wait_rows(page, len(all_ids))

    # metadata and text search (the prompt is in the dataset, the response in the results)
    page.page.select_option("#meta-key", "n")
    page.page.fill("#meta-value", "3")
    page.page.press("#meta-value", "Enter")
    assert wait_rows(page, 1) == ["plain-03"]
    page.click("#reset")
    wait_rows(page, len(all_ids))
    page.type_text("#search", "APPROVE me")
    assert sorted(wait_rows(page, 2)) == ["approve-1", "approve-2"]
    page.click("#reset")
    wait_rows(page, len(all_ids))
    page.type_text("#search", "children done")  # spawn-1's response
    assert wait_rows(page, 1) == ["spawn-1"]
    page.click("#reset")
    wait_rows(page, len(all_ids))

    # sort by duration (the mean over the epochs), slowest first
    page.click("th[data-col=duration_s]")
    page.wait_for("document.querySelector('th[data-col=duration_s]').getAttribute('aria-sort') === 'ascending'")
    page.click("th[data-col=duration_s]")
    page.wait_for("document.querySelector('th[data-col=duration_s]').getAttribute('aria-sort') === 'descending' && document.body.dataset.loading === ''")
    means = {i: statistics.mean(line["duration_s"] for line in lines if line["id"] == i) for i in all_ids}
    assert page.evaluate(ROW_IDS)[0] == max(means, key=lambda i: means[i])

    # the target and choices of an item; its two epochs expand
    page.click("#reset")
    wait_rows(page, len(all_ids))
    row = "#items-body tr[data-id='plain-00']"
    assert page.evaluate(f"document.querySelector(\"{row} td.c-target\").textContent") == "Hello"
    assert page.evaluate(f"document.querySelector(\"{row} td.c-choices\").textContent") == "Hello | Goodbye <b>bold</b>"
    assert page.evaluate(f"document.querySelector(\"{row} td.c-epochs\").textContent") == "2"
    page.click(f"{row} button.toggle")
    page.wait_for("document.querySelectorAll('#items-body tr.epoch-row').length === 2")
    assert page.evaluate("Array.from(document.querySelectorAll('#items-body tr.epoch-row')).map(r => r.dataset.epoch)") == ["1", "2"]
    assert page.evaluate("document.querySelectorAll('#items-body b, #items-body script, #items-body img, #items-body svg').length") == 0
    shot(page, tmp_path, "view-run.png")
    assert page.problems() == []


def entries(page: Tab, epoch: int, kind: str) -> int:
    count: int = page.evaluate(f"document.querySelectorAll(\"section.epoch[data-epoch='{epoch}'] [data-kind={kind}]\").length")
    return count


def test_item_page_has_the_whole_conversation(view_run: ViewRun, browser: Browser, viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    v = viewer(view_run.results.parent)
    page = browser.new_page(1280, 1400)
    page.goto(v.page("/run/0/item", id="spawn-1"))
    page.wait_for("document.body.dataset.ready === '1'")
    assert page.evaluate("document.getElementById('item-id').textContent") == "spawn-1"
    for epoch in (1, 2):
        assert entries(page, epoch, "user") >= 1
        assert entries(page, epoch, "subagent") == 2  # nested under the calls that spawned them
        assert entries(page, epoch, "tool") >= 2
        nested = page.evaluate(f"document.querySelectorAll(\"section.epoch[data-epoch='{epoch}'] .entry.subagent .children [data-kind]\").length")
        assert nested >= 2  # each subagent's own conversation
        assert page.evaluate(f"document.querySelector(\"section.epoch[data-epoch='{epoch}'] tr[data-scorer=includes]\") !== null")
        usage = page.evaluate(f"document.querySelector(\"section.epoch[data-epoch='{epoch}'] dd[data-field=tokens]\").textContent")
        assert "total" in usage
    text = page.evaluate("document.getElementById('main').textContent")
    assert "child says hi" in text and "second child" in text and "children done" in text
    shot(page, tmp_path, "view-item.png")

    # an approval with its decision and rule; the target
    page.goto(v.page("/run/0/item", id="approve-1"))
    page.wait_for("document.body.dataset.ready === '1'")
    approval = page.evaluate("document.querySelector(\"section.epoch[data-epoch='1'] [data-kind=approval]\").textContent")
    assert "allowed-once" in approval and "allow-bash" in approval
    assert page.evaluate("document.getElementById('item-target').textContent") == "allowed | approval"
    assert page.problems() == []


def test_hostile_strings_are_text(view_run: ViewRun, browser: Browser, viewer: Callable[..., RunningViewer]) -> None:
    v = viewer(view_run.results.parent)
    page = browser.new_page(1280, 1000)
    open_run(page, v)
    wait_rows(page, len({line["id"] for line in view_run.lines()}))
    assert XSS_ID in page.evaluate(ROW_IDS)
    response = page.evaluate("document.querySelector(\"#items-body tr[data-id='xss-response'] td.c-response\").textContent")
    assert response.startswith("<script>window.pwned=1</script>")
    page.goto(v.page("/run/0/item", id=XSS_ID))
    page.wait_for("document.body.dataset.ready === '1'")
    assert page.evaluate("document.getElementById('item-id').textContent") == XSS_ID
    page.goto(v.page("/run/0/item", id="xss-response"))
    page.wait_for("document.body.dataset.ready === '1'")
    assert "<img src=x onerror=" in page.evaluate("document.getElementById('main').textContent")
    assert page.evaluate("document.querySelectorAll('main script, main img, main svg').length") == 0
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.problems() == []


def flipped_copy(view_run: ViewRun, directory: Path) -> tuple[Path, set[str]]:
    """The run's results with two items' scores turned and one status changed: a candidate."""
    directory.mkdir()
    out, flipped = [], {"plain-01", "plain-02", "fail-1"}
    for line in view_run.lines():
        if line["id"] in ("plain-01", "plain-02") and line["scores"]["includes"]["value"] is not None:
            line["scores"]["includes"]["value"] = 1 - line["scores"]["includes"]["value"]
        if line["id"] == "fail-1":
            line["status"], line["error"] = "ok", None
        out.append(orjson.dumps(line) + b"\n")
    path = directory / "candidate.jsonl"
    path.write_bytes(b"".join(out))
    return path, flipped


def test_compare_flipped_first_side_by_side(view_run: ViewRun, browser: Browser, viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    candidate, flipped = flipped_copy(view_run, tmp_path / "candidate")
    v = viewer(view_run.results, candidate)
    page = browser.new_page(1400, 1200)
    page.goto(v.page("/compare", a="0", b="1"))
    page.wait_for("document.body.dataset.ready === '1'", timeout=30)
    listed = page.evaluate("Array.from(document.querySelectorAll('#flipped-table tr')).map(tr => tr.dataset.id)")
    assert set(listed) == flipped
    why = page.evaluate("document.querySelector(\"#flipped-table tr[data-id='fail-1']\").textContent")
    assert "status error → ok" in why
    page.click("#flipped-table button.open-pair[data-id='plain-01']")
    page.wait_for("document.getElementById('side-base').dataset.ready === '1' && document.getElementById('side-candidate').dataset.ready === '1'")
    for side in ("base", "candidate"):
        assert page.evaluate(f"document.querySelectorAll('#side-{side} section.epoch').length") == 2
        assert page.evaluate(f"document.querySelectorAll('#side-{side} [data-kind=text]').length") >= 2
    # the base has its transcripts (the prompt, the tool calls); the copy only its result lines
    assert page.evaluate("document.querySelectorAll('#side-base [data-kind=user]').length") >= 2
    shot(page, tmp_path, "view-compare.png")
    assert page.problems() == []


def test_the_token_is_required(view_run: ViewRun, browser: Browser, viewer: Callable[..., RunningViewer]) -> None:
    import urllib.error
    import urllib.request

    v = viewer(view_run.results.parent)
    for path in ("/", "/run/0", "/api/runs", "/api/run/0/items", "/assets/view.js"):
        for query in ("", "?token=wrong", "?token=" + v.token[:-1]):
            try:
                urllib.request.urlopen(v.base + path + query, timeout=30)  # noqa: S310 - loopback
            except urllib.error.HTTPError as exc:
                assert exc.code == 403, (path, query)
            else:
                raise AssertionError(f"{path}{query} answered without the token")
        with urllib.request.urlopen(v.page(path), timeout=30) as answer:  # noqa: S310 - loopback
            assert answer.status == 200
    page = browser.new_page(1280, 600)
    response = page.goto(v.base + "/run/0")
    assert response.status == 403
    assert "access token" in page.evaluate("document.body.textContent")
    data = json.loads(urllib.request.urlopen(v.page("/api/runs"), timeout=30).read())  # noqa: S310 - loopback
    assert data["runs"][0]["results"] == str(view_run.results)


def test_live_rows_within_two_seconds(browser: Browser, viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    """A file a batch is writing (its lock note names a live pid): a line appended shows as a
    row, and in the counts, within 2 s; a torn last line waits; the run ends as finished."""
    import time

    results = tmp_path / "live.jsonl"
    note = Path(str(results) + ".lock")
    note.write_bytes(orjson.dumps({"pid": os.getpid(), "host": "here", "since": "2026-01-01T00:00:00Z"}))

    def line(i: int, **extra: Any) -> bytes:
        return orjson.dumps({"id": f"live-{i}", "status": "ok", "final_response": f"answer {i}", "duration_s": 0.5,
                             "scores": {"exact": {"value": i % 2}}, **extra}) + b"\n"

    results.write_bytes(line(0))
    v = viewer(tmp_path)
    page = browser.new_page(1280, 900)
    open_run(page, v)
    assert wait_rows(page, 1) == ["live-0"]
    page.wait_for("(document.getElementById('run-state') || {}).textContent === 'live'")  # the head comes by its own request: rows may be first
    for i in (1, 2):
        with open(results, "ab") as handle:
            handle.write(line(i))
        written = time.monotonic()
        page.wait_for(f"document.querySelectorAll('#items-body tr.item-row').length === {i + 1}", timeout=5)
        assert time.monotonic() - written < 2.0
        page.wait_for(f"document.querySelector('#card-ok .v').textContent === '{i + 1}'", timeout=2)
    torn = line(3)
    with open(results, "ab") as handle:
        handle.write(torn[:15])
    page.wait_for("document.getElementById('pending') !== null", timeout=5)
    assert len(page.evaluate(ROW_IDS)) == 3
    with open(results, "ab") as handle:
        handle.write(torn[15:])
    wait_rows(page, 4)
    note.unlink()  # the batch ended
    page.wait_for("(document.getElementById('run-state') || {}).textContent === 'finished'", timeout=5)
    page.wait_for("document.body.dataset.finished === '1'", timeout=5)
    assert page.problems() == []

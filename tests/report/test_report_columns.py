"""The report's item table is readable at 1280 and 1920 px wide: no header is cut or overlaps
another, every column keeps a usable width, and the dataset's target and choices are shown."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from playwright_browser import Browser
from report_support import SimRun

from dsh_orchestra.report import build_payload, write_report

ROW_IDS = "Array.from(document.querySelectorAll('#items-body tr td.c-id')).map(td => td.textContent)"
# each header: [column, left, right, width, text width, box width]
HEADERS = """Array.from(document.querySelectorAll('#items-table th')).map(th => {
  const r = th.getBoundingClientRect();
  return [th.dataset.col, r.left, r.right, r.width, th.scrollWidth, th.clientWidth];
})"""
MIN_TEXT_COLUMN = 100  # px: a prompt, response, target or id column is never narrower


def wide_run(directory: Path) -> tuple[Path, Path]:
    """The widest table: epochs, three scorers, tokens, cost, prompts, targets and choices."""
    dataset, lines = [], []
    for i in range(6):
        item_id = f"mc-{i}"
        dataset.append({"id": item_id, "prompt": f"Which letter is {i}? " * 4, "target": "B" if i % 2 else ["A", "alpha"],
                        "choices": [f"option one of {i}", f"option two of {i}", "neither"]})
        for epoch in (1, 2):
            lines.append({
                "id": item_id, "epoch": epoch, "status": "ok" if i != 3 else "error", "session_id": f"s-{i}-{epoch}",
                "final_response": f"I pick {'B' if epoch == 1 else 'A'} because " + "reasons " * 20, "finish_reason": "completed",
                "subagents": [], "approvals": [], "attempts": 1, "duration_s": 1.25 + i, "metadata": {"topic": "mc"},
                "error": {"type": "TurnFailed", "message": "boom"} if i == 3 else None,
                "scores": {name: {"value": float(epoch == 1), "answer": "B", "explanation": None}
                           for name in ("choice", "exact_match_normalised", "f1")},
                "usage": {"input_tokens": 1200, "output_tokens": 345, "total_tokens": 1545}, "cost_usd": 0.001234,
            })
    results, data = directory / "results.jsonl", directory / "dataset.jsonl"
    results.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    data.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in dataset))
    return results, data


def test_target_and_choices_are_columns_and_details(tmp_path: Path) -> None:
    results, dataset = wide_run(tmp_path)
    batch = build_payload(results=results, dataset=dataset)["batch"]
    assert batch["columns"][:8] == ["id", "status", "epoch", "score:choice", "score:exact_match_normalised", "score:f1", "prompt", "target"]
    assert "choices" in batch["columns"]
    row = dict(zip(batch["columns"], batch["rows"][0], strict=True))
    assert row["target"] == "A | alpha"
    assert row["choices"] == "option one of 0 | option two of 0 | neither"
    assert batch["details"][0]["target"] == ["A", "alpha"]
    assert batch["details"][2]["choices"] == ["option one of 1", "option two of 1", "neither"]
    # without a dataset: no such columns
    assert "target" not in build_payload(results=results)["batch"]["columns"]


def check_headers(headers: list[list[Any]]) -> None:
    for column, _left, _right, width, text, box in headers:
        assert text <= box + 1, f"header {column!r} is cut: {text} px of text in {box} px"
        if column in ("id", "prompt", "response", "target", "choices", "error"):
            assert width >= MIN_TEXT_COLUMN, f"column {column!r} is {width} px wide"
    for (left_col, _, right, *_), (right_col, left, *_) in itertools.pairwise(headers):
        assert right <= left + 1, f"headers {left_col!r} and {right_col!r} overlap"


@pytest.mark.parametrize("width", [1280, 1920])
def test_wide_table_is_readable(browser: Browser, tmp_path: Path, width: int) -> None:
    results, dataset = wide_run(tmp_path)
    report = write_report(tmp_path / "report.html", results=results, dataset=dataset)
    page = browser.new_page(width, 900)
    page.goto(report.as_uri())
    assert page.wait_for("document.body.dataset.ready === '1'")
    headers = page.evaluate(HEADERS)
    assert [h[0] for h in headers][:3] == ["id", "status", "epoch"]
    check_headers(headers)
    # the target and the choices of each row, as the dataset has them
    first = "#items-body tr[data-index='0']"
    assert page.evaluate(f"document.querySelector(\"{first} td.c-target\").textContent") == "A | alpha"
    assert page.evaluate(f"document.querySelector(\"{first} td.c-choices\").textContent") == "option one of 0 | option two of 0 | neither"
    if width == 1920:  # everything fits: no sideways scrolling
        assert page.evaluate("(() => { const b = document.querySelector('.table-box'); return b.scrollWidth <= b.clientWidth; })()")
    # and the details show them too
    page.click(f"{first} td.c-id")
    page.wait_for("document.getElementById('detail').hidden === false")
    assert page.evaluate("document.getElementById('detail-target').textContent") == "A\nalpha"
    assert page.evaluate("Array.from(document.querySelectorAll('#detail-choices li')).map(li => li.textContent)") == [
        "option one of 0", "option two of 0", "neither"]
    page.screenshot(tmp_path / f"table-{width}.png")
    assert page.problems() == []


@pytest.mark.parametrize("width", [1280, 1920])
def test_real_run_table_fits(sim_run: SimRun, browser: Browser, width: int) -> None:
    """The real simulator run's table: every header whole and the table fits its box."""
    page = browser.new_page(width, 900)
    page.goto(sim_run.report.as_uri())
    assert page.wait_for("document.body.dataset.ready === '1'")
    check_headers(page.evaluate(HEADERS))
    assert page.evaluate("(() => { const b = document.querySelector('.table-box'); return b.scrollWidth <= b.clientWidth; })()")
    assert page.problems() == []

"""Workflow results in the viewer: a real workflow run on the simulator (``WorkflowResult.to_json()``,
what ``dsh-orchestra run --json`` prints) listed on the runs page, and its own page: status, the
steps with their timing, items, outputs and errors; names with markup stay text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson

from playwright_browser import Browser
from test_report_workflow import MARKUP_STEP, run
from view_support import RunningViewer

from dsh_orchestra.view import check_paths


def test_workflow_runs_listed_and_shown(browser: Browser, viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    result = run(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    path = runs / "release.json"
    path.write_bytes(orjson.dumps(result.to_json(), default=str))
    assert check_paths([runs]) == [runs] and check_paths([path]) == [path]  # a folder with only a workflow result will do
    v = viewer(runs)
    page = browser.new_page(1280, 900)
    page.goto(v.url)
    page.wait_for("document.body.dataset.ready === '1' && !!document.querySelector('#workflows-table')")
    row = "#workflows-table tr[data-workflow='0']"
    ok_steps = sum(1 for step in result.steps.values() if step.status == "ok")
    assert page.evaluate(f"document.querySelector(\"{row} td.state\").textContent") == result.status == "failed"
    assert page.evaluate(f"document.querySelector(\"{row} td.steps\").textContent") == f"{ok_steps} / {len(result.steps)}"

    page.click(f"{row} a.workflow-link")
    page.wait_for("document.body.dataset.ready === '1' && !!document.querySelector('#steps-table')")
    assert page.evaluate("document.querySelector('#workflow-status').textContent") == "failed"
    rows = page.evaluate("Array.from(document.querySelectorAll('#steps-table tbody tr')).map(r => [r.dataset.step, r.children[1].textContent])")
    assert rows == [[name, step.status] for name, step in result.steps.items()]
    work = page.evaluate("document.querySelector('#steps-table tr[data-step=work]').textContent")
    assert "2 / 3" in work and "TurnFailedError" in work
    items = page.evaluate("Array.from(document.querySelectorAll('details.step[data-step=work] .entry')).map(e => e.textContent)")
    assert len(items) == 3 and sum("error" in text for text in items) == 1
    assert any("done: ITEM alpha" in text for text in items)
    assert page.evaluate("document.querySelector('details.step[data-step=join] pre.output')") is None  # skipped: no output
    assert page.evaluate("document.querySelector('details.step[data-step=triage] pre.output').textContent") == "ship"
    assert page.evaluate(f"document.querySelector('#steps-table tr[data-step=\"{MARKUP_STEP}\"] td').textContent") == MARKUP_STEP
    assert page.evaluate("typeof window.pwned") == "undefined" and page.problems() == []

"""The evaluation report and the comparison page of two REAL scored simulator runs, opened in
headless Chromium: scores equal the summary's, previews are text, the drawer is a conversation,
the comparison lists exactly what `compare --json` says."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from playwright_browser import Browser, Tab as Page
from scored_runs import HOSTILE_PROMPT, HOSTILE_RESPONSE, EvalRuns

DOCS = Path(__file__).resolve().parents[2] / "docs"
UPDATE_ENV = "DSH_ORCHESTRA_UPDATE_SCREENSHOT"
ROW_IDS = "Array.from(document.querySelectorAll('#items-body tr td.c-id')).map(td => td.textContent)"


def open_page(browser: Browser, url: str, height: int = 1100) -> Page:
    page = browser.new_page(1280, height)
    page.goto(url)
    assert page.wait_for("document.body.dataset.ready === '1'")
    return page


def test_the_runs_differ_as_scripted(eval_runs: EvalRuns) -> None:
    """The two real runs give regressions, improvements and a status change to compare."""
    base = {line["id"]: line for line in eval_runs.base.lines()}
    candidate = {line["id"]: line for line in eval_runs.candidate.lines()}
    assert base["flaky-1"]["status"] == "error" and candidate["flaky-1"]["status"] == "ok"
    assert base["fact-05"]["scores"]["exact"]["value"] == 1 and candidate["fact-05"]["scores"]["exact"]["value"] == 0
    assert len(candidate["agent-1"]["subagents"]) == 1 and candidate["agent-1"]["approvals"][0]["outcome"] == "allowed-once"
    assert candidate["html-1"]["final_response"] == HOSTILE_RESPONSE
    doc = eval_runs.compare_json
    assert doc["pairs"] == 21 and doc["status_changes"] == [{"id": "flaky-1", "base": "error", "candidate": "ok"}]
    assert doc["scorers"]["exact"]["regressions"] == ["fact-05", "fact-06"]
    assert doc["scorers"]["exact"]["improvements"] == ["fact-07", "fact-08", "fact-09", "fact-10", "num-0", "num-1", "num-2", "num-3", "num-4"]


def test_evaluation_section_equals_the_summary(eval_runs: EvalRuns, browser: Browser) -> None:
    page = open_page(browser, eval_runs.report.as_uri())
    summary = eval_runs.candidate.summary_data()
    shown = page.evaluate(
        "Array.from(document.querySelectorAll('#scores-table tbody tr')).map(tr => [tr.dataset.scorer,"
        " JSON.parse(tr.querySelector('[data-key=mean]').dataset.value), JSON.parse(tr.querySelector('[data-key=ci95]').dataset.value),"
        " tr.querySelector('[data-key=mean]').textContent, tr.querySelector('[data-key=ci95]').textContent])"
    )
    assert [row[0] for row in shown] == list(summary["scores"])
    for name, mean, ci, mean_text, ci_text in shown:
        expected = summary["scores"][name]
        assert mean == expected["mean"] and ci == expected["ci95"]
        assert mean_text == f"{expected['mean']:.4f}"
        assert ci_text == f"[{expected['ci95'][0]:.4f}, {expected['ci95'][1]:.4f}]"
    # one error bar per scorer, drawn with a size
    bars = page.evaluate("Array.from(document.querySelectorAll('#scores-chart g.interval')).map(g => [g.dataset.label, g.getBoundingClientRect().width])")
    assert [label for label, _ in bars] == list(summary["scores"]) and all(width > 0 for _, width in bars)
    # groups by topic, the distributions, the run metadata
    groups = page.evaluate("Array.from(document.querySelectorAll('#groups .group')).map(g => g.dataset.group)")
    assert groups == sorted(summary["groups"])
    assert page.evaluate("document.querySelectorAll('.distribution').length") == 3
    assert summary["run"]["dataset"]["sha256"] in page.evaluate("document.getElementById('run-metadata').textContent")
    assert page.problems() == []


def test_item_table_scores_previews_filters(eval_runs: EvalRuns, browser: Browser) -> None:
    page = open_page(browser, eval_runs.report.as_uri())
    lines = eval_runs.candidate.lines()
    ids = [line["id"] for line in lines]
    assert sorted(page.evaluate(ROW_IDS)) == sorted(ids)
    headers = page.evaluate("Array.from(document.querySelectorAll('#items-table th')).map(th => th.textContent)")
    assert {"exact", "includes", "f1", "prompt", "response"} <= set(headers)

    # the previews of the hostile item are its first 120 characters, as text
    index = ids.index("html-1")
    row = f'#items-body tr[data-index="{index}"]'
    assert page.evaluate(f"document.querySelector('{row} td.c-prompt').textContent") == HOSTILE_PROMPT[:120]
    assert page.evaluate(f"document.querySelector('{row} td.c-response').textContent") == HOSTILE_RESPONSE[:120]
    assert page.evaluate("document.querySelectorAll('#items-body img, #items-body script, #items-body b').length") == 0
    assert page.evaluate("typeof window.pwned") == "undefined"

    # "failed a scorer": exactly the lines with a score below 1 or null
    failed = sorted(line["id"] for line in lines if any(s["value"] is None or s["value"] < 1 for s in line["scores"].values()))
    page.evaluate("(() => { const s = document.getElementById('filter-scored'); s.value = '*'; s.dispatchEvent(new Event('change')); })()")
    page.wait_for(f"document.querySelectorAll('#items-body tr').length === {len(failed)}")
    assert sorted(page.evaluate(ROW_IDS)) == failed
    only_exact = sorted(line["id"] for line in lines if (line["scores"]["exact"]["value"] or 0) < 1)
    page.evaluate("(() => { const s = document.getElementById('filter-scored'); s.value = 'exact'; s.dispatchEvent(new Event('change')); })()")
    page.wait_for(f"document.querySelectorAll('#items-body tr').length === {len(only_exact)}")
    assert sorted(page.evaluate(ROW_IDS)) == only_exact
    page.click("#reset")

    # sort by a score column (descending puts the best f1 first), free text over responses
    page.click('th[data-col="score:f1"]')
    page.click('th[data-col="score:f1"]')
    page.wait_for("document.querySelector('th[data-col=\"score:f1\"]').getAttribute('aria-sort') === 'descending'")
    best = max(lines, key=lambda line: line["scores"]["f1"]["value"] or -1)["scores"]["f1"]["value"]
    first = page.evaluate(ROW_IDS)[0]
    assert next(line for line in lines if line["id"] == first)["scores"]["f1"]["value"] == best
    page.type_text("#search", "forty-one")
    page.wait_for("document.querySelectorAll('#items-body tr').length === 1")
    assert page.evaluate(ROW_IDS) == ["num-5"]
    assert page.problems() == []


def test_drawer_is_a_conversation(eval_runs: EvalRuns, browser: Browser) -> None:
    """The agent item: prompt, reasoning (collapsed), tool calls with arguments and results, the
    subagent under the call that spawned it, the approval inline on its call, then the scores."""
    page = open_page(browser, eval_runs.report.as_uri() + "#item=agent-1", height=1400)
    assert page.wait_for("document.getElementById('detail').hidden === false")
    kinds = page.evaluate("Array.from(document.querySelectorAll('#detail-conversation [data-kind]')).map(e => e.dataset.kind)")
    assert kinds[0] == "user" and "reasoning" in kinds
    assert kinds.index("subagent") < kinds.index("approval")  # the helper was spawned before bash asked
    calls = page.evaluate(
        "Array.from(document.querySelectorAll('#detail-conversation > [data-kind=tool]')).map(e => [e.querySelector('.who').textContent,"
        " e.querySelector('pre.args').textContent, e.querySelectorAll(':scope > .children > [data-kind=subagent]').length,"
        " Array.from(e.querySelectorAll(':scope > [data-kind=approval]')).map(a => a.textContent)])"
    )
    assert [c[0] for c in calls] == ["tool call subagent", "tool call bash"]
    assert json.loads(calls[0][1]) == {"description": "check the facts", "prompt": "helper task"}
    assert calls[0][2] == 1 and calls[1][2] == 0 and calls[0][3] == []
    assert len(calls[1][3]) == 1 and "allowed-once" in calls[1][3][0] and "allow-bash" in calls[1][3][0]
    helper = page.evaluate("document.querySelector('#detail-conversation [data-kind=subagent]').textContent")
    assert "check the facts" in helper and "helper says yes" in helper
    assert page.evaluate("document.querySelector('#detail-conversation details.reasoning').open") is False
    results = page.evaluate("Array.from(document.querySelectorAll('#detail-conversation pre.result')).map(p => p.textContent)")
    assert any(r.startswith("started subagent") for r in results) and any("[simulated bash]" in r for r in results)
    scores = page.evaluate("Array.from(document.querySelectorAll('#detail-body table.scores tbody tr')).map(tr => tr.textContent)")
    assert [row.split("\n")[0][:2] for row in scores] and len(scores) == 3
    assert [s.startswith(name) for s, name in zip(scores, ("exact", "includes", "f1"), strict=True)] == [True, True, True]
    assert page.problems() == []


def assert_lists_like_compare_json(page: Page, doc: dict[str, object]) -> None:
    scorers = doc["scorers"]
    assert isinstance(scorers, dict)
    for name, stats in scorers.items():
        for kind in ("regressions", "improvements"):
            listed = page.evaluate(
                f"Array.from(document.querySelectorAll('table.pairs[data-kind={kind}][data-scorer={json.dumps(name)}] tbody tr')).map(tr => tr.dataset.pair)"
            )
            assert listed == stats[kind], (name, kind)


def test_comparison_page(eval_runs: EvalRuns, browser: Browser, tmp_path: Path) -> None:
    page = open_page(browser, eval_runs.compare_page.as_uri(), height=1200)
    page.wait_for("document.body.dataset.compareReady === '1'")
    doc = eval_runs.compare_json
    assert_lists_like_compare_json(page, doc)
    diffs = page.evaluate("Array.from(document.querySelectorAll('#compare-scorers tbody tr')).map(tr => [tr.dataset.scorer,"
                          " JSON.parse(tr.querySelector('[data-key=diff]').dataset.value), JSON.parse(tr.querySelector('[data-key=ci95]').dataset.value)])")
    assert diffs == [[name, s["diff"], s["ci95"]] for name, s in doc["scorers"].items()]

    # an improvement opens both items side by side: the prompt once, both responses, both scores
    page.click('table.pairs[data-kind=improvements][data-scorer="exact"] tr[data-pair="num-0"]')
    assert page.wait_for("document.getElementById('pair').hidden === false")
    assert page.evaluate("document.getElementById('pair-prompt').textContent") == "NUM 0"
    assert page.evaluate("Array.from(document.querySelectorAll('#pair-body pre.response')).map(p => p.textContent)") == ["It is 42.", "42"]
    exact = page.evaluate("Array.from(document.querySelectorAll('#pair-scores tr[data-scorer=exact] td')).map(td => td.textContent)")
    assert exact[:3] == ["exact", "0", "1"]
    page.press("Escape")
    assert page.wait_for("document.getElementById('pair').hidden === true")

    # "only different" keeps exactly the pairs whose scores, status or response differ
    base = {line["id"]: line for line in eval_runs.base.lines()}
    different = sorted(line["id"] for line in eval_runs.candidate.lines() if line["id"] in base and (
        line["status"] != base[line["id"]]["status"] or line["final_response"] != base[line["id"]]["final_response"]
        or line["scores"] != base[line["id"]]["scores"]))
    assert page.evaluate("document.querySelectorAll('#pairs-body tr').length") == doc["pairs"]
    page.click("#only-different")
    page.wait_for(f"document.querySelectorAll('#pairs-body tr').length === {len(different)}")
    assert sorted(page.evaluate("Array.from(document.querySelectorAll('#pairs-body tr')).map(tr => tr.dataset.pair)")) == different
    assert page.evaluate("document.querySelectorAll('#comparison img, #comparison script').length") == 0
    assert page.evaluate("typeof window.pwned") == "undefined"
    page.click("#only-different")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for("window.scrollY === 0")
    shot = page.screenshot(tmp_path / "compare.png")
    assert shot.startswith(b"\x89PNG") and len(shot) > 20_000
    assert page.problems() == []
    if os.environ.get(UPDATE_ENV) == "1":
        shutil.copyfile(tmp_path / "compare.png", DOCS / "compare-screenshot.png")
    assert (DOCS / "compare-screenshot.png").stat().st_size < 400_000


def test_report_with_compare_lists_the_same(eval_runs: EvalRuns, browser: Browser) -> None:
    page = open_page(browser, eval_runs.report.as_uri())
    page.wait_for("document.body.dataset.compareReady === '1'")
    assert_lists_like_compare_json(page, eval_runs.compare_json)
    assert page.problems() == []


def test_screenshot_of_the_evaluation_report(eval_runs: EvalRuns, browser: Browser, tmp_path: Path) -> None:
    page = open_page(browser, eval_runs.report.as_uri() + "#item=agent-1", height=1300)
    assert page.wait_for("document.getElementById('detail').hidden === false")
    page.evaluate("document.getElementById('evaluation').scrollIntoView()")
    shot = page.screenshot(tmp_path / "evaluation.png")
    assert shot.startswith(b"\x89PNG") and len(shot) > 20_000
    assert page.problems() == []
    if os.environ.get(UPDATE_ENV) == "1":
        shutil.copyfile(tmp_path / "evaluation.png", DOCS / "report-evaluation-screenshot.png")
    assert (DOCS / "report-evaluation-screenshot.png").stat().st_size < 400_000

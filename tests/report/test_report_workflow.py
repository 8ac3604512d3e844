"""A WorkflowResult from a real workflow run on the simulator, reported and opened in Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import trio

from cdp import Browser
from report_support import cli
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, WorkflowResult, run_workflow

SCRIPT = '''
default_reply = "done: {prompt}"

[[rules]]
name = "fail"
match = "FAIL"
fail = "http-400"

[[rules]]
name = "slow"
match = "SLOW"
reply = "slowly"
delay = 0.2
'''

MARKUP_STEP = "<i onmouseover=window.pwned=1>review</i>"


def build_workflow() -> Workflow:
    wf = Workflow("release")

    @wf.step()
    async def plan(ctx: StepContext) -> list[str]:
        return ["alpha", "SLOW beta", "FAIL gamma"]

    wf.prompt("work", "ITEM {item}", fan_out="plan")

    @wf.step(depends_on="work")
    async def join(ctx: StepContext) -> str:
        return ",".join(ctx.inputs["work"])

    wf.prompt(MARKUP_STEP, "SLOW review the plan", depends_on="plan")

    @wf.step(depends_on=MARKUP_STEP)
    async def triage(ctx: StepContext) -> str:
        return "ship"

    @wf.step()
    async def ship(ctx: StepContext) -> str:
        return "shipped"

    @wf.step()
    async def rollback(ctx: StepContext) -> str:
        return "rolled back"

    wf.route("triage", lambda output: output, ["ship", "rollback"])
    return wf


def run(tmp_path: Path) -> WorkflowResult:
    (tmp_path / "scenario.toml").write_text(SCRIPT, encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    spec = RuntimeSpec.simulator(script=tmp_path / "scenario.toml", dsh_home=home, cwd=tmp_path)

    async def main() -> WorkflowResult:
        with trio.fail_after(30):
            return await run_workflow(build_workflow(), WorkflowOptions(spec=spec, failure="collect"))

    return trio.run(main)


def test_workflow_report(tmp_path: Path, browser: Browser) -> None:
    result = run(tmp_path)
    statuses = {name: step.status for name, step in result.steps.items()}
    assert statuses == {"plan": "ok", "work": "failed", "join": "skipped", MARKUP_STEP: "ok", "triage": "ok",
                        "ship": "ok", "rollback": "skipped"}
    path = tmp_path / "workflow.json"
    path.write_bytes(orjson.dumps(result.to_json(), default=str))
    done = cli("report", "--workflow", path, "--out", tmp_path / "wf.html")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "wf.html").read_text(encoding="utf-8")
    assert "<i onmouseover" not in html

    page = browser.new_page(1280, 1100)
    page.goto((tmp_path / "wf.html").as_uri())
    page.wait_for("document.body.dataset.ready === '1'")

    # the graph: one node per step, coloured by status, one path per edge
    nodes: list[list[Any]] = page.evaluate(
        "Array.from(document.querySelectorAll('#workflow-graph g.node')).map(g => [g.dataset.step, g.dataset.status,"
        " g.querySelector('.node-name').textContent, g.getBoundingClientRect().width])"
    )
    assert {n[0]: n[1] for n in nodes} == statuses
    assert all(width > 100 for *_, width in nodes)
    assert any(n[2].startswith("<i onmouseover") for n in nodes)  # the name is text, not markup
    edges = page.evaluate("Array.from(document.querySelectorAll('#workflow-graph path.edge')).map(p => [p.dataset.from, p.dataset.to, p.getAttribute('class')])")
    assert sorted((a, b) for a, b, _ in edges) == sorted((a, b) for a, b, _ in result.edges)
    assert any("edge-fan-out" in css for *_, css in edges) and any("edge-route" in css for *_, css in edges)
    fill = page.evaluate("getComputedStyle(document.querySelector('#workflow-graph g.node[data-status=failed] rect')).fill")
    assert fill == "rgb(251, 213, 213)"

    # the Mermaid source as text, exactly what WorkflowResult.mermaid() says
    assert page.evaluate("document.getElementById('mermaid-source').textContent") == result.mermaid()

    # per-step timing: the table and the timeline
    rows = page.evaluate("Array.from(document.querySelectorAll('#workflow-steps tbody tr')).map(r => r.dataset.step)")
    assert rows == list(result.steps)
    bars = page.evaluate("Array.from(document.querySelectorAll('#workflow-timeline rect.span-bar')).map(r => r.dataset.step)")
    assert set(bars) == {name for name, step in result.steps.items() if step.started_s is not None}
    work_row = page.evaluate("document.querySelector('#workflow-steps tr[data-step=work]').textContent")
    assert "2/3" in work_row and "TurnFailedError" in work_row

    page.screenshot(tmp_path / "workflow.png", full_page=True)
    assert page.problems() == []
    assert page.evaluate("typeof window.pwned") == "undefined"

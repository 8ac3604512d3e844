"""OpenTelemetry spans (extra ``otel``): off by default and never imported then; when on, a span
per batch item, workflow step, turn and approval decision, nested item -> turn -> approval."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh_orchestra import Decision, enable_tracing
from dsh_orchestra._tracing import APPROVAL_SPAN, ITEM_SPAN, NO_SPAN, STEP_SPAN, TURN_SPAN, span, tracing_enabled
from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, run_workflow
from obs_support import SCENARIO


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """Spans recorded in memory by a provider of this test only (the global one is untouched)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    assert enable_tracing(tracer_provider=provider)
    return memory


def spec_for(tmp_path: Path) -> RuntimeSpec:
    (tmp_path / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    return RuntimeSpec.simulator(script=tmp_path / "scenario.toml", dsh_home=tmp_path, cwd=tmp_path)


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attr(item: ReadableSpan, key: str) -> Any:
    assert item.attributes is not None
    return item.attributes.get(f"dsh_orchestra.{key}")


def test_off_by_default_and_the_api_is_not_imported(tmp_path: Path) -> None:
    """Without enable_tracing or DSH_ORCHESTRA_OTEL a whole batch runs without importing opentelemetry."""
    assert not tracing_enabled()
    with span("x", a=1) as current:
        assert current is NO_SPAN
        current.set_attribute("k", "v")  # accepted, ignored
    (tmp_path / "data.jsonl").write_text('{"id": "a", "prompt": "hi"}\n', encoding="utf-8")
    code = (
        "import sys, trio\n"
        "from dsh_orchestra.batch import run_batch, BatchOptions\n"
        "from dsh_orchestra.runtime import RuntimeSpec\n"
        f"spec = RuntimeSpec.simulator(dsh_home={str(tmp_path)!r}, cwd={str(tmp_path)!r})\n"
        f"s = trio.run(run_batch, {str(tmp_path / 'data.jsonl')!r}, {str(tmp_path / 'r.jsonl')!r}, spec, BatchOptions(progress='none'))\n"
        "assert s.ok == 1\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'opentelemetry was imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DSH_ORCHESTRA_OTEL"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False, env=env)
    assert done.returncode == 0, done.stderr


def test_the_environment_variable_turns_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_ORCHESTRA_OTEL", "1")
    assert tracing_enabled()
    monkeypatch.setenv("DSH_ORCHESTRA_OTEL", "0")
    assert not tracing_enabled()


async def test_spans_nest_item_turn_approval(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    dataset = tmp_path / "data.jsonl"
    dataset.write_text('{"id": "ask", "prompt": "APPROVE"}\n{"id": "plain", "prompt": "hi"}\n{"id": "kids", "prompt": "SPAWN"}\n', encoding="utf-8")
    options = BatchOptions(policy=lambda request: Decision(outcome="allowed-once", rule="allow-all"), progress="none", runtimes=2)
    with trio.fail_after(30):
        summary = await run_batch(dataset, tmp_path / "results.jsonl", spec_for(tmp_path), options)
    assert summary.ok == 3
    spans = exporter.get_finished_spans()
    items = {attr(s, "item"): s for s in named(spans, ITEM_SPAN)}
    assert set(items) == {"ask", "plain", "kids"}
    turns = named(spans, TURN_SPAN)
    assert len(turns) == 3
    by_id = {s.context.span_id: s for s in spans}
    for turn in turns:
        assert turn.parent is not None
        parent = by_id[turn.parent.span_id]
        assert parent.name == ITEM_SPAN
        assert turn.context.trace_id == parent.context.trace_id
        assert str(attr(turn, "runtime")).startswith("sim#") and str(attr(turn, "session")).startswith("item-")
    (approval,) = named(spans, APPROVAL_SPAN)
    assert approval.parent is not None
    turn = by_id[approval.parent.span_id]
    assert turn.name == TURN_SPAN
    assert by_id[turn.parent.span_id] is items["ask"]  # type: ignore[union-attr]
    assert attr(approval, "session") == attr(turn, "session")
    assert attr(approval, "runtime") == attr(turn, "runtime")
    assert attr(approval, "item") == "ask"
    assert attr(approval, "tool") == "bash" and attr(approval, "outcome") == "allowed-once"
    # the approval happened inside the turn
    assert turn.start_time <= approval.start_time <= approval.end_time <= turn.end_time  # type: ignore[operator]


async def test_workflow_steps_have_spans(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    wf = Workflow("traced")

    @wf.step()
    async def plan(ctx: StepContext) -> list[str]:
        return ["a", "b"]

    wf.prompt("work", "ITEM {item}", fan_out="plan")
    with trio.fail_after(30):
        result = await run_workflow(wf, WorkflowOptions(spec=spec_for(tmp_path)))
    assert result.ok
    spans = exporter.get_finished_spans()
    steps = {attr(s, "step"): s for s in named(spans, STEP_SPAN)}
    assert set(steps) == {"plan", "work"} and all(attr(s, "workflow") == "traced" for s in steps.values())
    turns = named(spans, TURN_SPAN)
    assert len(turns) == 2
    assert all(t.parent is not None and t.parent.span_id == steps["work"].context.span_id for t in turns)


async def test_a_failing_block_marks_its_span(exporter: InMemorySpanExporter) -> None:
    with pytest.raises(KeyError):
        with span("dsh_orchestra.test", item="x"):
            raise KeyError("boom")
    (failed,) = exporter.get_finished_spans()
    assert not failed.status.is_ok and failed.events and failed.events[0].name == "exception"

"""Log and trace context belong to the runtime that owns a session, not to its bare id.

Two runtimes in one process run a turn of the same session id at the same time, each under
its own batch item; each turn's approval decision (decided in a handler task of its own
runtime's connection) keeps its own item in its log record and nests under its own turn.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra import Decision, log_context
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime, open_runtime
from obs_support import SCENARIO

SESSION = "same-id"


def spec(tmp_path: Path, name: str) -> RuntimeSpec:
    home = tmp_path / name
    home.mkdir()
    (home / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    return RuntimeSpec.simulator(script=home / "scenario.toml", dsh_home=home, cwd=home, name=name)


async def run_both(tmp_path: Path) -> dict[str, Any]:
    both_asked = trio.Event()
    asked: list[str] = []

    async def policy(request: Any) -> Decision:
        asked.append(request.session_id)
        if len(asked) == 2:
            both_asked.set()
        await both_asked.wait()  # both turns are in flight, both decisions pending
        return Decision(outcome="allowed-once", rule="allow")

    results: dict[str, Any] = {}

    async def turn(runtime: Runtime, item: str) -> None:
        with log_context(item=item):
            results[item] = await runtime.session(SESSION).run("APPROVE")

    with trio.fail_after(30):
        async with open_runtime(spec(tmp_path, "rt-a"), approvals=policy) as a, open_runtime(
            spec(tmp_path, "rt-b"), approvals=policy
        ) as b:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn, a, "item-a")
                nursery.start_soon(turn, b, "item-b")
            assert len(a.contexts) == 0 and len(b.contexts) == 0  # nothing left bound
    assert asked == [SESSION, SESSION]
    assert all(result.ok for result in results.values())
    return results


async def test_two_runtimes_same_session_id_keep_log_records_apart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="dsh_orchestra")
    await run_both(tmp_path)
    decisions = [
        r for r in caplog.records if r.name == "dsh_orchestra.approvals" and r.getMessage().startswith("approval ")
    ]
    by_runtime = {r.runtime: (r.session, r.item) for r in decisions}  # type: ignore[attr-defined]
    assert by_runtime == {"rt-a": (SESSION, "item-a"), "rt-b": (SESSION, "item-b")}
    assert len(decisions) == 2


async def test_two_runtimes_same_session_id_keep_spans_apart(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from dsh_orchestra import enable_tracing
    from dsh_orchestra._tracing import APPROVAL_SPAN, TURN_SPAN

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    assert enable_tracing(tracer_provider=provider)
    await run_both(tmp_path)
    spans = memory.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}

    def attr(span: Any, key: str) -> Any:
        return span.attributes.get(f"dsh_orchestra.{key}")

    approvals = [s for s in spans if s.name == APPROVAL_SPAN]
    assert sorted(attr(s, "runtime") for s in approvals) == ["rt-a", "rt-b"]
    for approval in approvals:
        assert approval.parent is not None
        turn = by_id[approval.parent.span_id]
        assert turn.name == TURN_SPAN
        assert attr(turn, "runtime") == attr(approval, "runtime")  # its own runtime's turn
        assert attr(turn, "session") == attr(approval, "session") == SESSION
        assert attr(approval, "item") == {"rt-a": "item-a", "rt-b": "item-b"}[attr(approval, "runtime")]

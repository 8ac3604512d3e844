"""Failure handling: fail-fast vs collect, skipped dependents, retries with backoff, timeouts.

Virtual time (autojump_clock): the in-process simulator's scripted delays are trio.sleep calls.
"""

from __future__ import annotations

from typing import Callable

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.pool import open_pool
from dsh_orchestra.protocol import JsonRpcResponseError, SdkProtocolError, TransportClosedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.workflow import Statistics, StepContext, StepFailedError, Workflow, WorkflowOptions, retryable, run_workflow

from .workflow_support import WireMeter

SpecFactory = Callable[..., RuntimeSpec]

SCRIPT = """
default_reply = "ok: {prompt}"

[[rules]]
name = "boom"
match = "BOOM"
fail = "http-400"
delay = 1.0

[[rules]]
name = "slow"
match = "SLOW"
reply = "slow done"
delay = 10.0

[[rules]]
name = "first-attempt-hangs"
regex = "attempt 1$"
reply = "late"
delay = 100.0

[[rules]]
name = "second"
match = "SECOND"
reply = "second done"
delay = 1.0
"""


def mixed() -> Workflow:
    """A fan-out with one failing item, an independent slow step, and dependents of both kinds."""
    wf = Workflow("mixed")

    @wf.step()
    async def items(ctx: StepContext) -> list[str]:
        return ["fine", "BOOM", "SLOW", "SLOW"]

    wf.prompt("work", "{item}", fan_out="items")
    wf.prompt("side", "SLOW side")
    wf.prompt("after", "after {work}", depends_on="work")
    wf.prompt("later", "later {after}", depends_on="after")
    wf.prompt("after_side", "after side", depends_on="side")
    return wf


async def test_fail_fast_cancels_siblings_and_skips_dependents(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    result = await run_workflow(mixed(), WorkflowOptions(spec=sim_spec(SCRIPT), failure="fail-fast"))
    assert result.status == "failed"
    assert result.duration_s == pytest.approx(1.0, abs=0.1)  # nothing waited for the 10 s prompts
    work = result.steps["work"]
    assert work.status == "failed"
    assert [i.status for i in work.items] == ["ok", "failed", "cancelled", "cancelled"]
    assert len(work.errors) == 1 and work.errors[0].type == "TurnFailedError"
    assert "INVALID_REQUEST" in work.errors[0].message
    assert work.reason == "1 of 4 run(s) failed, 2 cancelled (fail-fast)"
    side = result.steps["side"]
    assert side.status == "cancelled" and side.reason == "cancelled after step 'work' failed (fail-fast)"
    assert side.started_s is not None  # it was running
    assert result.steps["after"].status == "skipped" and result.steps["after"].reason == "dependency 'work' failed"
    assert result.steps["later"].status == "skipped" and result.steps["later"].reason == "dependency 'after' skipped"
    after_side = result.steps["after_side"]
    assert after_side.status == "cancelled" and after_side.started_s is None
    assert result.errors() == {"work": work.errors} and result.first_failure == "work"


async def test_collect_finishes_what_can_finish_and_reports_every_failure(
    sim_spec: SpecFactory, autojump_clock: MockClock
) -> None:
    wf = mixed()
    wf.prompt("also_bad", "BOOM again")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), failure="collect"))
    assert result.status == "failed" and result.failure_policy == "collect"
    assert result.duration_s == pytest.approx(10.0, abs=0.5)  # the slow prompts ran to the end
    work = result.steps["work"]
    assert [i.status for i in work.items] == ["ok", "failed", "ok", "ok"]
    assert [i.output for i in work.items] == ["ok: fine", None, "slow done", "slow done"]
    assert work.output is None  # a failed step has no output
    assert result.steps["side"].status == "ok" and result.steps["after_side"].status == "ok"
    assert result.steps["after"].status == "skipped" and result.steps["later"].status == "skipped"
    assert set(result.errors()) == {"work", "also_bad"}
    assert result.first_failure == "also_bad"  # it failed after 1 s; "work" failed once its items ended (10 s)
    with pytest.raises(StepFailedError, match="step 'also_bad' failed: TurnFailedError"):
        result.raise_for_status()


async def test_retry_after_the_runtime_was_lost(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    """The runtime crashes on every second prompt; the pool restarts it and the item retries."""
    crashing = SCRIPT.replace('default_reply = "ok: {prompt}"', 'default_reply = "ok: {prompt}"\ncrash_after_prompts = 2')
    wf = Workflow("crash")

    @wf.step()
    async def items(ctx: StepContext) -> list[int]:
        return [0, 1, 2]

    wf.prompt("work", "SECOND {item}", fan_out="items", retries=3, backoff=0.25, concurrency=1)
    stats = Statistics()
    async with open_pool(lambda i: sim_spec(crashing), size=1, backoff=(0.5, 1.0)) as pool:
        result = await run_workflow(wf, pool, WorkflowOptions(statistics=stats))
        restarts = pool.statistics().restarts
    assert result.ok, result.summary()
    assert result.output("work") == ["second done"] * 3
    attempts = [i.attempts for i in result.steps["work"].items]
    assert sum(attempts) == stats.prompts == 5 and stats.retries == 2 and restarts == 2
    assert result.steps["work"].attempts == max(attempts) > 1


async def test_runtime_lost_without_retries_fails(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    crashing = "crash_after_prompts = 1\n" + SCRIPT
    wf = Workflow("crash")
    wf.prompt("work", "SECOND")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(crashing)))
    work = result.steps["work"]
    assert work.status == "failed" and work.attempts == 1
    assert work.errors[0].type in ("TransportClosedError", "RuntimeExitedError")


async def test_protocol_rejections_are_not_retried(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meter = WireMeter(reject=lambda n, params: n == 1)
    wf = Workflow("reject")
    wf.prompt("work", "SECOND", retries=3)
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter)))
    work = result.steps["work"]
    assert work.status == "failed" and work.attempts == 1 and meter.prompts == 1
    assert work.errors[0].type == "JsonRpcResponseError" and "rejected by the wire meter" in work.errors[0].message


async def test_model_errors_are_not_retried(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meter = WireMeter()
    wf = Workflow("boom")
    wf.prompt("work", "BOOM", retries=3)
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter)))
    assert result.steps["work"].attempts == 1 and meter.prompts == 1
    assert result.steps["work"].items[0].finish_reason == "error"  # the failed turn is kept for debugging


async def test_timeout_then_retry_with_backoff(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    """Attempt 1 hangs past the 2 s timeout; after 0.5 s of backoff attempt 2 answers in 1 s."""
    wf = Workflow("retry")
    wf.prompt("work", "SECOND attempt {attempt}", timeout=2.0, retries=1, backoff=0.5)
    stats = Statistics()
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), statistics=stats))
    work = result.steps["work"]
    assert work.ok and work.output == "second done" and work.attempts == 2 and stats.retries == 1
    assert work.duration_s == pytest.approx(2.0 + 0.5 + 1.0, abs=0.05)


async def test_timeouts_exhaust_the_retries_with_doubling_backoff(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("timeout")
    wf.prompt("work", "SLOW forever", timeout=2.0, retries=3, backoff=0.5)
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    work = result.steps["work"]
    assert work.status == "failed" and work.attempts == 4
    assert work.errors[0].type == "TimeoutError"
    assert work.errors[0].message == "the prompt of step 'work' did not finish within 2 s"
    assert work.duration_s == pytest.approx(4 * 2.0 + 0.5 + 1.0 + 2.0, abs=0.05)


async def test_timeout_does_not_count_waiting_for_a_slot(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    """Five 1 s prompts one at a time take 5 s, yet none exceeds its 1.5 s timeout."""
    wf = Workflow("queue")

    @wf.step()
    async def items(ctx: StepContext) -> list[int]:
        return list(range(5))

    wf.prompt("work", "SECOND {item}", fan_out="items", timeout=1.5, concurrency=1)
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    assert result.ok and result.steps["work"].duration_s == pytest.approx(5.0, abs=0.1)


async def test_function_step_timeout(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("fn")

    @wf.step(timeout=1.0)
    async def sleepy(ctx: StepContext) -> None:
        await trio.sleep(5)

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    assert result.steps["sleepy"].errors[0].message == "step 'sleepy' did not finish within 1 s"
    assert result.duration_s == pytest.approx(1.0, abs=0.05)


async def test_function_step_retries_only_retryable_errors(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    calls = {"lost": 0, "bug": 0}
    wf = Workflow("fn")

    @wf.step(retries=2, backoff=1.0)
    async def lost(ctx: StepContext) -> int:
        calls["lost"] += 1
        if ctx.attempt < 3:
            raise TransportClosedError("runtime went away")
        return ctx.attempt

    @wf.step(retries=2)
    async def bug(ctx: StepContext) -> None:
        calls["bug"] += 1
        raise ValueError("a bug in the step")

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), failure="collect"))
    assert result.steps["lost"].output == 3 and result.steps["lost"].duration_s == pytest.approx(3.0, abs=0.05)
    assert calls == {"lost": 3, "bug": 1}
    assert result.steps["bug"].errors[0].type == "ValueError"


def test_retryable_classification() -> None:
    assert retryable(TransportClosedError("gone"))
    assert retryable(trio.TooSlowError())
    assert not retryable(JsonRpcResponseError("session/prompt", -32603, "no"))
    assert not retryable(SdkProtocolError("bad frame"))
    assert not retryable(ValueError("bug"))
    assert retryable(ExceptionGroup("g", [TransportClosedError("a"), trio.TooSlowError()]))
    assert not retryable(ExceptionGroup("g", [TransportClosedError("a"), ValueError("b")]))


async def test_a_named_session_abandoned_by_a_timeout_is_not_reused(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    """The first step times out mid-turn (the session is abandoned); the next step naming the
    session fails at once with SessionLostError instead of prompting a busy session."""
    meter = WireMeter()
    wf = Workflow("lost")
    wf.prompt("first", "SLOW start", session="chat", timeout=1.0)

    @wf.step()
    async def pause(ctx: StepContext) -> None:
        await trio.sleep(0.5)  # so "first" holds the session first

    wf.prompt("second", "continue", session="chat", depends_on="pause")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), failure="collect"))
    assert result.steps["first"].errors[0].type == "TimeoutError"
    assert result.steps["second"].status == "failed"
    (error,) = result.steps["second"].errors
    assert error.type == "SessionLostError" and "a cancelled run abandoned it" in error.message
    assert meter.prompts == 1


async def test_cancelling_a_workflow_on_a_caller_runtime_abandons_its_sessions(
    sim_spec: SpecFactory, autojump_clock: MockClock
) -> None:
    wf = Workflow("cancel")
    wf.prompt("slow", "SLOW please")
    async with open_runtime(sim_spec(SCRIPT)) as runtime:
        with trio.move_on_after(1.0) as scope:
            await run_workflow(wf, runtime)
        assert scope.cancelled_caught
        assert len(runtime.abandoned) == 1 and runtime.alive  # the runtime itself is fine
        again = await run_workflow(_single("hello"), runtime)
        assert again.ok


def _single(text: str) -> Workflow:
    wf = Workflow("single")
    wf.prompt("ask", text)
    return wf

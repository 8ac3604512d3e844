"""Policies and answerers are user code (issue 31, part 1): a sync one runs off the event loop,
its deadline fires even when it blocks, and whatever it raises, ``SystemExit`` and
``KeyboardInterrupt`` included, is that decision's error (rejected), never the run's."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
import trio

from dsh_orchestra.approvals import ApprovalRequest, LoadedPolicy
from dsh_orchestra.approvals._service import decide
from dsh_orchestra.protocol import Question, QuestionOption, UserQuestionAskParams
from dsh_orchestra.questions import QuestionAnswerError, QuestionService

REQUEST = ApprovalRequest(session_id="s", tool_name="bash", reason="x")


def _exits(request: Any) -> Any:
    sys.exit(2)


def _interrupts(request: Any) -> Any:
    raise KeyboardInterrupt


def _generator_exit(request: Any) -> Any:
    raise GeneratorExit


async def _async_exits(request: Any) -> Any:
    sys.exit(5)


@pytest.mark.parametrize(("policy", "error"), [
    (_exits, "policy raised SystemExit: 2"), (_interrupts, "policy raised KeyboardInterrupt"),
    (_generator_exit, "policy raised GeneratorExit"), (_async_exits, "policy raised SystemExit: 5"),
    (LoadedPolicy(_exits), "policy raised SystemExit: 2"),
])
async def test_what_a_policy_raises_is_that_decisions_error(policy: Any, error: str) -> None:
    assert await decide(policy, REQUEST, 5.0) == (None, error)


async def test_a_blocking_sync_policy_misses_its_deadline_and_the_loop_goes_on() -> None:
    release = threading.Event()
    ticks = 0

    def blocks(request: Any) -> Any:
        release.wait(60)

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0.01)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            with trio.fail_after(20):
                decision, error = await decide(blocks, REQUEST, 0.3)
            nursery.cancel_scope.cancel()
    finally:
        release.set()
    assert decision is None and error == "policy took longer than its deadline of 0.3 s"
    assert ticks > 3  # the event loop ran while the policy blocked


async def test_a_sync_policy_that_decides_runs_in_a_thread() -> None:
    from dsh_orchestra.approvals import Decision

    seen: list[int] = []

    def allow(request: Any) -> Decision:
        seen.append(threading.get_ident())
        return Decision(outcome="allowed-once", rule="mine")

    decision, error = await decide(allow, REQUEST, 5.0)
    assert error is None and decision is not None and decision.rule == "mine"
    assert seen and seen[0] != threading.get_ident()


ENV = Question(id="env", question="Which?", options=[QuestionOption(label="a"), QuestionOption(label="b")])


@pytest.mark.parametrize("answerer", [_exits, _interrupts, _generator_exit, _async_exits])
async def test_what_an_answerer_raises_is_that_answers_error(answerer: Any) -> None:
    service = QuestionService(answerer)
    params = UserQuestionAskParams(request_id="r1", session_id="s1", questions=[ENV])
    with pytest.raises(QuestionAnswerError, match="the answerer failed"):
        await service.handle(params)
    assert service.failed == 1


async def test_a_blocking_sync_answerer_can_be_cancelled() -> None:
    release = threading.Event()

    def blocks(request: Any) -> Any:
        release.wait(60)
        return ["a"]

    service = QuestionService(blocks)
    params = UserQuestionAskParams(request_id="r1", session_id="s1", questions=[ENV])
    try:
        with trio.move_on_after(0.3) as scope, trio.fail_after(20):
            await service.handle(params)
    finally:
        release.set()
    assert scope.cancelled_caught

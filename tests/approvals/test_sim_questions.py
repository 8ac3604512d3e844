"""User questions end to end against the in-process simulated runtime."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import trio

from approval_support import SimWire, result_text, tool_results
from dsh_orchestra.protocol import Answer
from dsh_orchestra.questions import DISMISS, QuestionService, QuestionsRequest, by_rule, first_option
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime

SimFactory = Callable[..., tuple[RuntimeSpec, SimWire]]


def tool_error(result: Any) -> tuple[str | None, str]:
    (tool,) = tool_results(result)
    return (tool.get("error") or {}).get("code"), result_text(tool)


async def test_without_an_answerer_no_capability_is_sent(sim: SimFactory) -> None:
    spec, wire = sim()
    async with open_runtime(spec) as runtime:
        result = await runtime.session().run("CHOOSE one")
    assert "capabilities" not in wire.initialize_params()
    assert wire.runtime is not None and not wire.runtime.questions_enabled
    assert wire.server_requests("user-question/ask") == []
    assert tool_error(result)[0] == "NO_PROVIDER" and result.final_response == "picked "


async def test_the_answerer_sees_the_questions_as_asked(sim: SimFactory) -> None:
    seen: list[QuestionsRequest] = []

    async def answerer(request: QuestionsRequest) -> list[Answer]:
        seen.append(request)
        await trio.lowlevel.checkpoint()
        return [Answer(id="env", selected=["production"])]

    spec, wire = sim()
    async with open_runtime(spec, answerer=answerer) as runtime:
        result = await runtime.session("s-q").run("CHOOSE one")
    assert wire.initialize_params()["capabilities"] == {"userQuestions": True} and "approvalRequests" not in wire.initialize_params()
    (request,) = seen
    (ask,) = wire.server_requests("user-question/ask")
    assert request.request_id == ask["params"]["requestId"] and request.session_id == "s-q" and request.runtime == "sim"
    (question,) = request.questions
    assert (question.id, question.question, question.header, question.detail) == ("env", "Which environment?", "Deploy", "staging is safe")
    assert [o.label for o in question.options or ()] == ["staging", "production"]
    assert result.final_response == "picked production"
    (reply,) = wire.replies_to(ask["id"])
    assert reply["result"] == {"answers": [{"id": "env", "selected": ["production"]}]}


@pytest.mark.parametrize(
    ("answerer", "prompt", "reply"),
    [
        (first_option, "CHOOSE", "picked staging"),
        (first_option, "MANY", "picked python"),
        (by_rule({"langs": ["rust", "go"]}), "MANY", "picked rust, go"),
        (by_rule({"name": "Zebra"}, fallback=None), "FREE", "named Zebra"),
        (lambda request: [{"id": "env", "selected": ["production"]}], "CHOOSE", "picked production"),
    ],
)
async def test_built_in_and_plain_answerers(sim: SimFactory, answerer: Any, prompt: str, reply: str) -> None:
    spec, _ = sim()
    async with open_runtime(spec, answerer=answerer) as runtime:
        result = await runtime.session().run(prompt)
    assert result.final_response == reply


async def test_a_dismissal_is_sent_as_cancelled(sim: SimFactory) -> None:
    spec, wire = sim()
    async with open_runtime(spec, answerer=lambda request: DISMISS) as runtime:
        result = await runtime.session().run("CHOOSE")
    (ask,) = wire.server_requests("user-question/ask")
    assert wire.replies_to(ask["id"])[0]["result"] == {"cancelled": True}
    assert tool_error(result)[0] == "ASK_CANCELLED"


@pytest.mark.parametrize(
    ("answerer", "message"),
    [
        (lambda request: [{"id": "env", "selected": ["qa"]}], "not among its options"),
        (lambda request: [], "were not answered"),
        (lambda request: [{"id": "env", "selected": ["staging"]}] * 2, "answered more than once"),
        (lambda request: 1 / 0, "the answerer failed: ZeroDivisionError"),
        (first_option, "they have no options"),  # FREE has no options: never made up
    ],
)
async def test_an_invalid_answer_set_is_never_sent_an_error_is(
    sim: SimFactory, caplog: pytest.LogCaptureFixture, answerer: Any, message: str
) -> None:
    caplog.set_level("WARNING", logger="dsh_orchestra.questions")
    spec, wire = sim()
    prompt = "FREE" if answerer is first_option else "CHOOSE"
    async with open_runtime(spec, answerer=answerer) as runtime:
        result = await runtime.session().run(prompt)
    (ask,) = wire.server_requests("user-question/ask")
    (reply,) = wire.replies_to(ask["id"])
    assert "result" not in reply and reply["error"]["code"] == -32603 and message in reply["error"]["message"]
    code, text = tool_error(result)
    assert code == "PROVIDER_ERROR" and message in text
    assert any(message in r.getMessage() and r.name == "dsh_orchestra.questions" for r in caplog.records)


async def test_user_question_cancelled_cancels_the_answerer_and_nothing_is_sent(sim: SimFactory) -> None:
    cancelled = trio.Event()

    async def slow(request: QuestionsRequest) -> Any:
        try:
            await trio.sleep(10)
        finally:
            cancelled.set()
        return first_option(request)

    service = QuestionService(slow)
    spec, wire = sim()
    async with open_runtime(spec, answerer=service) as runtime:
        with trio.fail_after(5):
            result = await runtime.session().run("SLOWQ")
            await cancelled.wait()
        await trio.sleep(0.05)
    (ask,) = wire.server_requests("user-question/ask")
    notices = [f for f in wire.received() if f.get("method") == "user-question.cancelled"]
    assert notices and notices[0]["params"]["requestId"] == ask["params"]["requestId"]
    assert wire.replies_to(ask["id"]) == []  # no late answer
    assert tool_error(result)[0] == "ASK_TIMED_OUT" and service.cancelled == 1 and service.answered == 0


async def test_approvals_and_questions_together(sim: SimFactory) -> None:
    spec, wire = sim()
    async with open_runtime(spec, approvals=lambda r: None, answerer=first_option) as runtime:
        session = runtime.session()
        asked = await session.run("CHOOSE")
        approved = await session.run("DEPLOY")
    assert wire.initialize_params()["approvalRequests"] is True
    assert wire.initialize_params()["capabilities"] == {"userQuestions": True}
    assert asked.final_response == "picked staging" and approved.final_response == "deploy was rejected"

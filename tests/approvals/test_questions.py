"""Answer validation, the built-in answerers and QuestionService on their own (no runtime)."""

from __future__ import annotations

import io
from typing import Any

import pytest
import trio
import trio.testing

from dsh_orchestra.protocol import Answer, Question, QuestionIntent, QuestionOption, UserQuestionAskParams, UserQuestionAskResult
from dsh_orchestra.questions import (
    DISMISS,
    QuestionAnswerError,
    QuestionService,
    QuestionsRequest,
    ask_terminal,
    by_rule,
    first_option,
    validate_answers,
)

ENV = Question(id="env", question="Which environment?", header="Deploy", detail="staging is safe",
               options=[QuestionOption(label="staging", description="safe"), QuestionOption(label="production")])
LANGS = Question(id="langs", question="Which languages?", multi_select=True,
                 options=[QuestionOption(label="python"), QuestionOption(label="rust"), QuestionOption(label="go")])
NAME = Question(id="name", question="What is it called?")
PLAN = Question(id="plan", question="Approve the plan?", intent=QuestionIntent(kind="plan-review", approve="Yes"),
                options=[QuestionOption(label="Yes"), QuestionOption(label="No")])


def request(*questions: Question) -> QuestionsRequest:
    return QuestionsRequest(request_id="req_1", session_id="s1", questions=questions)


def ask_params(*questions: Question, request_id: str = "req_1") -> UserQuestionAskParams:
    return UserQuestionAskParams(request_id=request_id, session_id="s1", questions=list(questions))


def test_valid_answers_dismissals_and_wire_shapes() -> None:
    result = validate_answers([{"id": "env", "selected": ["staging"]}, Answer(id="name", selected=[], custom="Zebra")], [ENV, NAME])
    assert result == UserQuestionAskResult(answers=[Answer(id="env", selected=["staging"]), Answer(id="name", selected=[], custom="Zebra")])
    assert validate_answers({"answers": [{"id": "langs", "selected": ["go", "rust"]}]}, [LANGS]).answers is not None
    assert validate_answers(DISMISS, [ENV]) == UserQuestionAskResult(cancelled=True)
    assert validate_answers({"cancelled": True}, [ENV]) == UserQuestionAskResult(cancelled=True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], r"\['env'\] were not answered"),
        ([{"id": "env", "selected": ["staging"]}] * 2, "answered more than once"),
        ([{"id": "other", "selected": ["x"]}], "unknown question id 'other'"),
        ([{"id": "env", "selected": ["qa"]}], "not among its options"),
        ([{"id": "env", "selected": ["staging", "production"]}], "takes one option"),
        ([{"id": "env", "selected": []}], "select an option or give a custom answer"),
        ([{"id": "env", "selected": "staging"}], "must be a list of strings"),
        ([{"id": "env", "selected": ["staging"], "extra": 1}], "unknown key"),
        ([{"selected": ["staging"]}], "needs a string 'id'"),
        ([{"id": "env", "selected": ["staging"], "custom": 5}], "'custom' must be a string"),
        ("staging", "list of answers or DISMISS"),
        ({"cancelled": True, "answers": []}, "list of answers or DISMISS"),
        ([3], "not an Answer or a mapping"),
    ],
)
def test_invalid_answers_are_refused(value: Any, message: str) -> None:
    with pytest.raises(QuestionAnswerError, match=message):
        validate_answers(value, [ENV])


def test_first_option_picks_the_first_label_and_never_invents_text() -> None:
    assert first_option(request(ENV, LANGS)) == [Answer(id="env", selected=["staging"]), Answer(id="langs", selected=["python"])]
    with pytest.raises(QuestionAnswerError, match=r"\['name'\]: they have no options"):
        first_option(request(ENV, NAME))


async def test_by_rule_answers_per_question_id() -> None:
    async def name_it(question: Question) -> str:
        await trio.lowlevel.checkpoint()
        return f"answer to {question.id}"

    answerer = by_rule({"env": "production", "langs": ["rust", "go"], "name": name_it, "plan": lambda q: q.intent.approve})
    answers = await answerer(request(ENV, LANGS, NAME, PLAN))
    assert validate_answers(answers, [ENV, LANGS, NAME, PLAN]).answers == [
        Answer(id="env", selected=["production"]), Answer(id="langs", selected=["rust", "go"]),
        Answer(id="name", selected=[], custom="answer to name"), Answer(id="plan", selected=["Yes"]),
    ]
    fallback = await by_rule({"env": {"custom": "qa, please"}})(request(ENV, LANGS))
    assert fallback == [Answer(id="env", selected=[], custom="qa, please"), Answer(id="langs", selected=["python"])]
    typo = await by_rule({"env": "prodution"})(request(ENV))
    with pytest.raises(QuestionAnswerError, match="not among its options"):  # never sent as free text
        validate_answers(typo, [ENV])
    with pytest.raises(QuestionAnswerError, match="no rule for question"):
        await by_rule({}, fallback=None)(request(ENV))


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("2\n", [Answer(id="env", selected=["production"])]),
        ("qa please\n", [Answer(id="env", selected=[], custom="qa please")]),
        ("9\n", [Answer(id="env", selected=[], custom="9")]),
        ("\n", DISMISS),
        ("", DISMISS),
    ],
)
async def test_ask_terminal_reads_a_number_or_text(typed: str, expected: Any) -> None:
    out = io.StringIO()
    answers = await ask_terminal(stream_in=io.StringIO(typed), stream_out=out)(request(ENV))
    assert answers == expected
    shown = out.getvalue()
    assert "Deploy (session s1): Which environment?" in shown and "staging is safe" in shown
    assert "1. staging - safe" in shown and "2. production" in shown


async def test_ask_terminal_multi_select_and_several_questions() -> None:
    answerer = ask_terminal(stream_in=io.StringIO("1, 3\nZebra\n"), stream_out=io.StringIO())
    answers = await answerer(request(LANGS, NAME))
    assert answers == [Answer(id="langs", selected=["python", "go"]), Answer(id="name", selected=[], custom="Zebra")]
    assert validate_answers(answers, [LANGS, NAME]).answers == answers


async def test_service_validates_and_counts() -> None:
    service = QuestionService(first_option, runtime="rt")
    assert await service.handle(ask_params(ENV)) == UserQuestionAskResult(answers=[Answer(id="env", selected=["staging"])])
    dismissing = QuestionService(lambda r: DISMISS)
    assert await dismissing.handle(ask_params(ENV)) == UserQuestionAskResult(cancelled=True)
    assert (service.answered, service.failed, dismissing.answered) == (1, 0, 1)


async def test_service_reports_a_failing_or_invalid_answerer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="dsh_orchestra.questions")
    invalid = QuestionService(lambda r: [{"id": "env", "selected": ["qa"]}])
    with pytest.raises(QuestionAnswerError, match="not among its options"):
        await invalid.handle(ask_params(ENV))
    nothing: dict[str, Any] = {}
    broken = QuestionService(lambda r: nothing["missing"])
    with pytest.raises(QuestionAnswerError, match="the answerer failed: KeyError"):
        await broken.handle(ask_params(ENV))
    assert invalid.failed == broken.failed == 1
    assert sum("nothing sent, answering an error" in r.getMessage() for r in caplog.records) == 2


async def test_cancelled_question_cancels_the_answerer_and_drops_its_result(nursery: trio.Nursery) -> None:
    entered, finished = trio.Event(), []

    async def slow(req: QuestionsRequest) -> Any:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            finished.append("cancelled")
        return first_option(req)

    service = QuestionService(slow)
    results: list[Any] = []

    async def ask() -> None:
        results.append(await service.handle(ask_params(ENV, request_id="req_9")))

    nursery.start_soon(ask)
    await entered.wait()
    service.on_notification("session.event", {"requestId": "req_9"})  # other notifications: ignored
    service.on_notification("user-question.cancelled", {"requestId": "req_9", "sessionId": "s1", "extra": True})
    await trio.testing.wait_all_tasks_blocked()
    assert finished == ["cancelled"] and results == [None] and service.cancelled == 1


async def test_a_result_is_dropped_even_when_the_answerer_ignores_the_cancel() -> None:
    service = QuestionService(lambda r: None)  # replaced below

    def stubborn(req: QuestionsRequest) -> Any:  # sync: cannot be interrupted, answers anyway
        service.on_notification("user-question.cancelled", {"requestId": req.request_id})
        return first_option(req)

    service.answerer = stubborn
    assert await service.handle(ask_params(ENV)) is None


async def test_a_cancel_that_overtakes_its_ask_drops_it() -> None:
    service = QuestionService(first_option)
    service.on_notification("user-question.cancelled", {"requestId": "req_early"})
    service.on_notification("user-question.cancelled", {"requestId": 7})  # not an id: ignored
    assert await service.handle(ask_params(ENV, request_id="req_early")) is None
    assert await service.handle(ask_params(ENV, request_id="req_early")) is not None  # forgotten once used

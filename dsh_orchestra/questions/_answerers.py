"""User questions: answerers, their built-ins, answer validation, and the QuestionService.

An answerer is any sync or async callable receiving a QuestionsRequest and returning answers
(each question id exactly once) or ``DISMISS``. Answers are validated before they are sent;
an invalid set is never sent. ``user-question.cancelled`` cancels the answerer's work.
Imports only the protocol layer (and trio).
"""

from __future__ import annotations

import datetime as dt
import inspect
import logging
import sys
from collections import OrderedDict, defaultdict
from typing import Any, Callable, Mapping, Sequence, TextIO

import attrs
import trio

from .._records import take_by_session
from ..protocol import (
    USER_QUESTION_CANCELLED,
    Answer,
    Question,
    UserQuestionAskParams,
    UserQuestionAskResult,
)

log = logging.getLogger("dsh_orchestra.questions")

VIA_ASK = "user-question/ask"
"""``QuestionRecord.via`` of a question that came as a JSON-RPC ``user-question/ask``."""

_REMEMBERED_CANCELS = 1024
"""Cancellations kept for asks not seen yet (a cancel can overtake its ask's handler task)."""


class QuestionAnswerError(ValueError):
    """An answerer returned answers that break the rules; they were not sent."""


@attrs.frozen
class _Dismiss:
    """The user dismissed the questions (``{"cancelled": true}``)."""


DISMISS = _Dismiss()


@attrs.frozen(kw_only=True)
class QuestionsRequest:
    """What an answerer receives: the questions as the model asked them (hints preserved)."""

    request_id: str
    session_id: str
    questions: tuple[Question, ...]
    runtime: str = ""


Answerer = Callable[[QuestionsRequest], Any]


def _as_answer(value: Any, index: int) -> Answer:
    if isinstance(value, Answer):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"id", "selected", "custom"}
        if unknown:
            raise QuestionAnswerError(f"answer {index} has unknown key(s) {sorted(unknown)}")
        qid, selected, custom = value.get("id"), value.get("selected", []), value.get("custom")
        if not isinstance(qid, str):
            raise QuestionAnswerError(f"answer {index} needs a string 'id', not {qid!r}")
        if not isinstance(selected, list) or not all(isinstance(s, str) for s in selected):
            raise QuestionAnswerError(f"answer {qid!r}: 'selected' must be a list of strings, not {selected!r}")
        if custom is not None and not isinstance(custom, str):
            raise QuestionAnswerError(f"answer {qid!r}: 'custom' must be a string, not {custom!r}")
        return Answer(id=qid, selected=list(selected), custom=custom)
    raise QuestionAnswerError(f"answer {index} is {type(value).__name__}, not an Answer or a mapping")


def validate_answers(value: Any, questions: Sequence[Question]) -> UserQuestionAskResult:
    """The wire result for ``value``, or QuestionAnswerError saying what is wrong."""
    if isinstance(value, _Dismiss) or (isinstance(value, Mapping) and dict(value) == {"cancelled": True}):
        return UserQuestionAskResult(cancelled=True)
    if isinstance(value, Mapping) and set(value) == {"answers"}:
        value = value["answers"]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise QuestionAnswerError(f"an answerer must return a list of answers or DISMISS, not {type(value).__name__}")
    answers = [_as_answer(v, i) for i, v in enumerate(value)]
    by_id = {q.id: q for q in questions}
    seen: set[str] = set()
    for answer in answers:
        question = by_id.get(answer.id)
        if question is None:
            raise QuestionAnswerError(f"answer for unknown question id {answer.id!r}; asked: {sorted(by_id)}")
        if answer.id in seen:
            raise QuestionAnswerError(f"question {answer.id!r} answered more than once")
        seen.add(answer.id)
        labels = [o.label for o in question.options or ()]
        if labels:
            bad = [s for s in answer.selected if s not in labels]
            if bad:
                raise QuestionAnswerError(f"question {answer.id!r}: {bad!r} not among its options {labels!r}")
            if not question.multi_select and len(answer.selected) > 1:
                raise QuestionAnswerError(f"question {answer.id!r} takes one option, not {len(answer.selected)}")
        if not answer.selected and not answer.custom:
            raise QuestionAnswerError(f"question {answer.id!r}: select an option or give a custom answer")
    missing = [q.id for q in questions if q.id not in seen]
    if missing:
        raise QuestionAnswerError(f"questions {missing!r} were not answered; answer each id exactly once")
    return UserQuestionAskResult(answers=answers)


_USER_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit, KeyboardInterrupt, GeneratorExit)


def _is_async(answerer: Any) -> bool:
    if inspect.iscoroutinefunction(answerer) or (callable(answerer) and inspect.iscoroutinefunction(answerer.__call__)):
        return True
    inner = getattr(answerer, "answerer", None)  # a wrapper calls it: async when it is
    return inner is not None and inner is not answerer and callable(inner) and _is_async(inner)


async def _call(answerer: Answerer, request: QuestionsRequest) -> Any:
    """Call a sync or async answerer; a sync one (user code: it may block) in a worker thread,
    abandoned when the caller is cancelled. The built-in ``first_option`` runs inline."""
    if _is_async(answerer) or answerer is first_option:
        value = answerer(request)
    else:
        value = await trio.to_thread.run_sync(answerer, request, abandon_on_cancel=True)
    if inspect.isawaitable(value):
        value = await value
    return value


# ---- built-in answerers ---------------------------------------------------------------


def first_option(request: QuestionsRequest) -> list[Answer]:
    """Pick each question's first option.

    Raises:
        QuestionAnswerError: a question has no options (free text cannot be made up); the
            runtime then gets an error answer, never an invented one.
    """
    free = [q.id for q in request.questions if not q.options]
    if free:
        raise QuestionAnswerError(f"first_option cannot answer question(s) {free!r}: they have no options")
    return [Answer(id=q.id, selected=[q.options[0].label]) for q in request.questions if q.options]


def _answer_for(question: Question, value: Any) -> Answer:
    """A rule's value as the Answer to ``question``.

    Text selects that option of a question with options (a label that is not one of them is
    refused by validation, so a typo never goes out as free text) and is the custom answer of
    a question without options. A list selects several labels; a mapping gives the fields.
    """
    if isinstance(value, Answer):
        return value
    if isinstance(value, Mapping):
        return _as_answer({"id": question.id, "selected": [], **value}, 0)
    if isinstance(value, (list, tuple)):
        return Answer(id=question.id, selected=[str(v) for v in value])
    text = str(value)
    if question.options:
        return Answer(id=question.id, selected=[text])
    return Answer(id=question.id, selected=[], custom=text)


def by_rule(rules: Mapping[str, Any], *, fallback: Answerer | None = first_option) -> Answerer:
    """Answer by question id; the questions without a rule go to ``fallback``.

    A rule is an option label to select (for a question without options: the free-text
    answer), a list of labels (multi-select), a mapping ``{"selected": [...], "custom": "..."}``,
    an Answer, or a sync or async function of the Question returning one of these.
    """

    async def answerer(request: QuestionsRequest) -> list[Answer]:
        rest = [q for q in request.questions if q.id not in rules]
        answers: list[Answer] = []
        for question in request.questions:
            if question.id not in rules:
                continue
            rule = rules[question.id]
            value = rule(question) if callable(rule) else rule
            if inspect.isawaitable(value):
                value = await value
            answers.append(_answer_for(question, value))
        if rest:
            if fallback is None:
                raise QuestionAnswerError(f"no rule for question(s) {[q.id for q in rest]!r}")
            sub = attrs.evolve(request, questions=tuple(rest))
            answers.extend(_as_answer(a, i) for i, a in enumerate(await _call(fallback, sub)))
        return answers

    return answerer


def ask_terminal(*, stream_in: TextIO | None = None, stream_out: TextIO | None = None) -> Answerer:
    """Ask each question on the terminal: an option number, or free text; empty input dismisses."""
    lock = trio.Lock()

    def ask(request: QuestionsRequest) -> Any:
        out, inp = stream_out or sys.stderr, stream_in or sys.stdin
        answers = []
        for question in request.questions:
            out.write(f"\n{question.header or 'question'} (session {request.session_id}): {question.question}\n")
            if question.detail:
                out.write(f"  {question.detail}\n")
            for number, option in enumerate(question.options or (), start=1):
                out.write(f"  {number}. {option.label}" + (f" - {option.description}" if option.description else "") + "\n")
            several = "numbers separated by commas" if question.multi_select else "a number"
            out.write(f"answer ({several} or text; empty dismisses): " if question.options else "answer (empty dismisses): ")
            out.flush()
            line = inp.readline().strip()
            if not line:
                return DISMISS
            options = question.options or []
            picks = [p.strip() for p in line.split(",")] if question.multi_select else [line]
            if options and all(p.isdigit() and 1 <= int(p) <= len(options) for p in picks):
                answers.append(Answer(id=question.id, selected=[options[int(p) - 1].label for p in picks]))
            else:
                answers.append(Answer(id=question.id, selected=[], custom=line))
        return answers

    async def answerer(request: QuestionsRequest) -> Any:
        async with lock:
            return await trio.to_thread.run_sync(ask, request, abandon_on_cancel=True)

    return answerer


# ---- the service ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class QuestionRecord:
    """One question as it was asked and answered (``TurnResult.questions``, result lines).

    ``outcome``: ``answered``, ``dismissed`` (the answerer dismissed), ``cancelled`` (the
    runtime stopped waiting) or ``failed`` (the answerer raised or answered invalidly: nothing
    was sent, ``error`` says why). ``answered_by`` names the answerer.
    """

    time: str
    runtime: str
    session_id: str
    request_id: str
    question_id: str
    question: str
    options: tuple[str, ...]
    outcome: str
    selected: tuple[str, ...] = ()
    custom: str | None = None
    answered_by: str = ""
    error: str | None = None
    via: str = VIA_ASK
    time_monotonic: float = attrs.field(default=0.0, eq=False)

    def to_json(self) -> dict[str, Any]:
        """The result-line form (no monotonic clock)."""
        return {
            "time": self.time, "runtime": self.runtime, "session": self.session_id,
            "request_id": self.request_id, "id": self.question_id, "question": self.question,
            "options": list(self.options), "outcome": self.outcome, "selected": list(self.selected),
            "custom": self.custom, "answered_by": self.answered_by, "error": self.error, "via": self.via,
        }


def answerer_name(answerer: Any) -> str:
    """A short name for ``answerer`` in records: its ``name`` attribute, else its qualified name."""
    name = getattr(answerer, "name", None)
    if isinstance(name, str) and name:
        return name
    return str(getattr(answerer, "__qualname__", None) or type(answerer).__name__)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class QuestionService:
    """Answers ``user-question/ask`` with ``answerer``; honours ``user-question.cancelled``.

    The answerer runs in a cancel scope per ask: ``user-question.cancelled`` (fed through
    ``on_notification``) cancels it and its result is dropped, so nothing is sent. Answers are
    validated before they are sent; an answerer that fails or returns an invalid set gets a
    QuestionAnswerError instead (logged, and answered as a JSON-RPC error by the connection).
    """

    def __init__(self, answerer: Answerer, *, runtime: str = "", name: str | None = None) -> None:
        self.answerer = answerer
        self.runtime = runtime
        self.name = name or answerer_name(answerer)
        self._by_session: dict[str, list[QuestionRecord]] = defaultdict(list)
        self._scopes: dict[str, trio.CancelScope] = {}
        self._cancelled: OrderedDict[str, None] = OrderedDict()
        self.answered = 0
        self.cancelled = 0
        self.failed = 0

    async def handle(self, params: UserQuestionAskParams, *, via: str = VIA_ASK) -> UserQuestionAskResult | None:
        """The ``user-question/ask`` handler; None means "cancelled: send nothing".

        Every question is recorded (``take``) with what was answered, or why nothing was.

        Raises:
            QuestionAnswerError: the answerer failed or its answers were invalid (not sent).
        """
        started = trio.current_time()
        outcome, result, error = "cancelled", None, None
        try:
            result = await self._handle(params)
        except QuestionAnswerError as exc:
            outcome, error = "failed", str(exc)
            raise
        else:
            if result is not None:
                outcome = "dismissed" if result.cancelled else "answered"
            return result
        finally:  # also when cancelled (the connection went away): recorded, never answered
            self._record(params, outcome, result, error, started, via)

    def _record(
        self, params: UserQuestionAskParams, outcome: str, result: UserQuestionAskResult | None,
        error: str | None, started: float, via: str,
    ) -> None:
        answers = {a.id: a for a in (result.answers or ())} if result is not None else {}
        records = self._by_session[params.session_id]
        for question in params.questions:
            answer = answers.get(question.id)
            records.append(QuestionRecord(
                time=_now(), runtime=self.runtime, session_id=params.session_id,
                request_id=params.request_id, question_id=question.id, question=question.question,
                options=tuple(o.label for o in question.options or ()), outcome=outcome,
                selected=tuple(answer.selected) if answer is not None else (),
                custom=answer.custom if answer is not None else None,
                answered_by=self.name, error=error, via=via, time_monotonic=started,
            ))

    def take(self, session_ids: Any, since: float | None = None) -> tuple[QuestionRecord, ...]:
        """Remove and return these sessions' records, oldest first (as ``ApprovalService.take``)."""
        return take_by_session(self._by_session, session_ids, since)

    async def _handle(self, params: UserQuestionAskParams) -> UserQuestionAskResult | None:
        request = QuestionsRequest(
            request_id=params.request_id,
            session_id=params.session_id,
            questions=tuple(params.questions),
            runtime=self.runtime,
        )
        if params.request_id in self._cancelled:  # the cancel overtook this handler
            del self._cancelled[params.request_id]
            self.cancelled += 1
            return None
        try:
            with trio.CancelScope() as scope:
                self._scopes[params.request_id] = scope
                try:
                    value = await _call(self.answerer, request)
                finally:
                    del self._scopes[params.request_id]
            if scope.cancel_called:  # cancelled by the runtime: whatever came back is dropped
                self.cancelled += 1
                log.info("question %s on session %s cancelled by the runtime", params.request_id, params.session_id)
                return None
            result = validate_answers(value, params.questions)
        except _USER_ERRORS as exc:  # SystemExit, KeyboardInterrupt too: the answer's error, not the run's
            self.failed += 1
            error = exc if isinstance(exc, QuestionAnswerError) else QuestionAnswerError(
                f"the answerer failed: {type(exc).__name__}: {exc}"
            )
            log.warning(
                "question %s on session %s: nothing sent, answering an error: %s",
                params.request_id, params.session_id, error,
            )
            raise error from exc
        self.answered += 1
        return result

    def on_notification(self, method: str, params: Mapping[str, Any]) -> None:
        """Feed notifications; ``user-question.cancelled`` cancels that answerer's work."""
        if method != USER_QUESTION_CANCELLED:
            return
        request_id = params.get("requestId")
        if not isinstance(request_id, str):
            return
        scope = self._scopes.get(request_id)
        if scope is not None:
            scope.cancel(reason="user-question.cancelled")
            return
        # Not running (yet): its handler task may still be queued behind the reader, or it was
        # already answered. Remember a bounded number, so a late ask is dropped.
        self._cancelled[request_id] = None
        while len(self._cancelled) > _REMEMBERED_CANCELS:
            self._cancelled.popitem(last=False)

"""``ResultLine``: one finished attempt at one dataset item, as the results file holds it.

The typed form of the documented contract (docs/batch.md, docs/evaluation.md). Written and read
through ``CONVERTER`` (the project's strict scalars, hand-written hooks for the exact key order
of the file). A line read from a file keeps the object it was read from (``to_json`` gives it
back as it was, keys of later versions included), so a tool that rewrites lines changes only
what it means to. Pure: no trio, no I/O.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, NotRequired, TypedDict

import attrs
import cattrs

from ..protocol import strict_scalars

if TYPE_CHECKING:
    from ..session import TurnResult


def _count(value: Any) -> int:
    if type(value) is int:  # the common case, checked first
        return value if value > 0 else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@attrs.frozen
class Usage:
    """Token totals: ``input_tokens``, ``output_tokens`` and ``total_tokens``."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.total_tokens + other.total_tokens,
        )

    def to_json(self) -> dict[str, int]:
        """The ``usage`` object of result lines and summaries."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "total_tokens": self.total_tokens}

    @classmethod
    def from_json(cls, value: Any) -> Usage:
        """A ``usage`` object read back (missing or malformed counts are 0)."""
        if not isinstance(value, dict):
            return cls()
        return cls(_count(value.get("input_tokens")), _count(value.get("output_tokens")), _count(value.get("total_tokens")))


@attrs.frozen
class SubagentRecord:
    """A subagent the item's session started: ``child_session_id``, ``status``, ``stop_reason``, ``text``."""

    child_session_id: str | None = None
    status: str | None = None
    stop_reason: str | None = None
    text: str | None = None


@attrs.frozen
class ApprovalRecord:
    """An approval decided during the item: ``tool_name``, ``call_id``, ``outcome``, ``rule``."""

    tool_name: str | None = None
    call_id: str | None = None
    outcome: str | None = None
    rule: str | None = None


@attrs.frozen
class QuestionRecord:
    """A question the item's session asked: ``id``, ``question``, ``outcome``, ``selected``,
    ``custom``, ``answered_by``."""

    id: str | None = None
    question: str | None = None
    outcome: str | None = None
    selected: tuple[Any, ...] = ()
    custom: str | None = None
    answered_by: str | None = None


@attrs.frozen
class ResultError:
    """Why an item failed: ``type`` and ``message``."""

    type: str | None = None
    message: str | None = None


class ScoreRecord(TypedDict):
    """One scorer's verdict in a result line: ``value`` (None: no value), the extracted
    ``answer``, an ``explanation``, and ``metadata`` when the scorer gave some. A plain dict
    (scores are written as scorers return them, without a copy)."""

    value: float | None
    answer: Any
    explanation: Any
    metadata: NotRequired[Any]


def score_value(record: Any) -> float | None:
    """The number of a score record (None: none, or not a number)."""
    value = record.get("value") if type(record) is dict or isinstance(record, dict) else None
    if type(value) is float:
        return value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


_EVAL_KEYS = ("epoch", "scores", "usage", "cost_usd", "judge_usage", "judge_cost_usd", "workspace")
_BASE_KEYS = ("id", "status", "session_id", "final_response", "finish_reason", "subagents", "approvals", "questions",
              "attempts", "duration_s", "error", "metadata")
KNOWN_KEYS = frozenset(_BASE_KEYS + _EVAL_KEYS)
"""The keys of the documented result line; others (of later versions) are kept as they are."""


@attrs.frozen(kw_only=True)
class ResultLine:
    """One result line (docs/batch.md): the item's ``id``, ``status`` (``"ok"`` or ``"error"``),
    its session, final response and finish reason, the ``subagents``, ``approvals`` and
    ``questions`` of its turn, ``attempts``, ``duration_s``, ``error``, ``metadata``; with an
    evaluation ``epoch`` (epochs > 1), ``scores`` (with scorers), ``usage``, ``cost_usd``
    (with prices), ``judge_usage`` and ``judge_cost_usd`` (with a judge), ``workspace`` (kept
    workspaces). ``None``: the line has no such key. ``extra``: keys of later versions.

    Build one with ``ResultLine.of_attempt``; read them with ``read_results``; ``to_json`` is
    the object written (``CONVERTER.unstructure`` the same).
    """

    id: str
    status: str
    session_id: str | None = None
    final_response: str | None = None
    finish_reason: str | None = None
    subagents: tuple[SubagentRecord, ...] = ()
    approvals: tuple[ApprovalRecord, ...] = ()
    questions: tuple[QuestionRecord, ...] = ()
    attempts: int = 1
    duration_s: float = 0.0
    error: ResultError | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    epoch: int | None = None
    scores: Mapping[str, ScoreRecord] | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    judge_usage: Usage | None = None
    judge_cost_usd: float | None = None
    workspace: str | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict)
    source: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    """The object this line was read from (None: built here); ``to_json`` returns it."""

    @property
    def ok(self) -> bool:
        """True for status ``"ok"``."""
        return self.status == "ok"

    @property
    def epoch_number(self) -> int:
        """``epoch``, 1 when the line has none (one epoch)."""
        return self.epoch if self.epoch is not None else 1

    def score_value(self, name: str) -> float | None:
        """Scorer ``name``'s value (None: no such score, or no value)."""
        return score_value(self.scores.get(name)) if self.scores is not None else None

    @classmethod
    def of_attempt(
        cls, item_id: str, *, status: str, session_id: str | None, turn: TurnResult | None, attempts: int,
        duration_s: float, error: Mapping[str, str] | None, metadata: Mapping[str, Any], **evaluation: Any,
    ) -> ResultLine:
        """The line of an item's last attempt: what its ``turn`` (None: none finished) did,
        and the ``evaluation`` fields (``epoch``, ``scores``, ``usage``, ...: see ``evaluated``)."""
        subagents: tuple[SubagentRecord, ...] = ()
        approvals: tuple[ApprovalRecord, ...] = ()
        questions: tuple[QuestionRecord, ...] = ()
        if turn is not None:  # (a comprehension only over a non-empty tuple: each costs a function call)
            if turn.subagents:
                subagents = tuple(SubagentRecord(s.child_session_id, s.status, s.stop_reason, s.text) for s in turn.subagents)
            if turn.approvals:
                approvals = tuple(ApprovalRecord(d.tool_name, d.call_id, d.outcome, d.rule) for d in turn.approvals)
            if turn.questions:
                questions = tuple(QuestionRecord(q.question_id, q.question, q.outcome, tuple(q.selected), q.custom, q.answered_by)
                                  for q in turn.questions)
        return cls(
            id=item_id, status=status, session_id=session_id,
            final_response=turn.final_response if turn is not None else None,
            finish_reason=turn.finish_reason if turn is not None else None,
            subagents=subagents, approvals=approvals, questions=questions, attempts=attempts,
            duration_s=round(duration_s, 6), error=ResultError(error.get("type"), error.get("message")) if error is not None else None,
            metadata=metadata, **evaluation,
        )

    def to_json(self) -> dict[str, Any]:
        """The object of the results file: for a line read from a file, the very object it was
        decoded from (not a copy: change a copy); else the documented keys in their order (the
        evaluation keys only when set), then ``extra``."""
        if self.source is not None:
            return self.source  # type: ignore[return-value]  # (a dict: what the reader decoded)
        return unstructure_line(self)

    def evaluation_json(self) -> dict[str, Any]:
        """The evaluation keys that are set (``epoch``, ``scores``, ``usage``, ``cost_usd``,
        ``judge_usage``, ``judge_cost_usd``, ``workspace``), in the file's order."""
        return _evaluation_json(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ResultLine:
        """A line of a results file (checked by ``result_problem``: types of keys it does
        not check are read leniently, as the summary always has: a malformed count is 0)."""
        return structure_line(value)


def unstructure_line(line: ResultLine) -> dict[str, Any]:
    """``line`` as the object the results file holds (see ``ResultLine.to_json``)."""
    subagents, approvals, questions = line.subagents, line.approvals, line.questions
    error = line.error
    out: dict[str, Any] = {
        "id": line.id,
        "status": line.status,
        "session_id": line.session_id,
        "final_response": line.final_response,
        "finish_reason": line.finish_reason,
        "subagents": [
            {"child_session_id": s.child_session_id, "status": s.status, "stop_reason": s.stop_reason, "text": s.text}
            for s in subagents
        ] if subagents else [],
        "approvals": [
            {"tool_name": d.tool_name, "call_id": d.call_id, "outcome": d.outcome, "rule": d.rule}
            for d in approvals
        ] if approvals else [],
        "questions": [
            {"id": q.id, "question": q.question, "outcome": q.outcome, "selected": list(q.selected),
             "custom": q.custom, "answered_by": q.answered_by}
            for q in questions
        ] if questions else [],
        "attempts": line.attempts,
        "duration_s": line.duration_s,
        "error": {"type": error.type, "message": error.message} if error is not None else None,
        "metadata": line.metadata,
    }
    out.update(line.evaluation_json())
    if line.extra:
        out.update(line.extra)
    return out


def _evaluation_json(line: ResultLine) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if line.epoch is not None:
        out["epoch"] = line.epoch
    if line.scores is not None:
        out["scores"] = line.scores
    if line.usage is not None:
        out["usage"] = line.usage.to_json()
    if line.cost_usd is not None:
        out["cost_usd"] = line.cost_usd
    if line.judge_usage is not None:
        out["judge_usage"] = line.judge_usage.to_json()
    if line.judge_cost_usd is not None:
        out["judge_cost_usd"] = line.judge_cost_usd
    if line.workspace is not None:
        out["workspace"] = line.workspace
    return out


def _records(value: Any, make: Any, keys: tuple[str, ...]) -> tuple[Any, ...]:
    if not value or not isinstance(value, list):
        return ()
    return tuple(make(*(_text(entry.get(k)) for k in keys)) for entry in value if isinstance(entry, dict))


def _questions(value: Any) -> tuple[QuestionRecord, ...]:
    if not value or not isinstance(value, list):
        return ()
    out = []
    for q in value:
        if isinstance(q, dict):
            selected = q.get("selected")
            out.append(QuestionRecord(_text(q.get("id")), _text(q.get("question")), _text(q.get("outcome")),
                                      tuple(selected) if isinstance(selected, list) else (),
                                      _text(q.get("custom")), _text(q.get("answered_by"))))
    return tuple(out)


_SUBAGENT_KEYS = ("child_session_id", "status", "stop_reason", "text")
_APPROVAL_KEYS = ("tool_name", "call_id", "outcome", "rule")
_NO_EXTRA: Mapping[str, Any] = {}


def _usage(value: Any) -> Usage:
    if type(value) is dict:  # a written line's: three non-negative ints (checked as Usage.from_json would)
        inputs, outputs, total = value.get("input_tokens"), value.get("output_tokens"), value.get("total_tokens")
        if type(inputs) is int and type(outputs) is int and type(total) is int and inputs >= 0 and outputs >= 0 and total >= 0:
            return Usage(inputs, outputs, total)
    return Usage.from_json(value)


def structure_line(raw: Mapping[str, Any]) -> ResultLine:
    """A ``ResultLine`` of a decoded line (see ``ResultLine.from_json``). Written lines take
    the fast paths (exact types checked with ``type() is``); anything else is read leniently."""
    get = raw.get
    duration = get("duration_s")
    if type(duration) is not float:  # (a written line's is a float: no isinstance calls)
        duration = float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else 0.0
    attempts = get("attempts", 1)
    if type(attempts) is not int:
        attempts = attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 1
    epoch = get("epoch")
    if epoch is not None and type(epoch) is not int:
        epoch = epoch if isinstance(epoch, int) else 1  # (as the tallies always read it)
    item_id, status = get("id"), get("status")
    session_id, response, finish = get("session_id"), get("final_response"), get("finish_reason")
    scores, error, metadata = get("scores"), get("error"), get("metadata")
    subagents, approvals, questions = get("subagents"), get("approvals"), get("questions")
    cost, judge_cost, workspace = get("cost_usd"), get("judge_cost_usd"), get("workspace")
    judge_usage = get("judge_usage")
    return ResultLine(
        id=item_id if type(item_id) is str else str(item_id),
        status=status if type(status) is str else str(status),
        session_id=session_id if session_id is None or type(session_id) is str else _text(session_id),
        final_response=response if response is None or type(response) is str else _text(response),
        finish_reason=finish if finish is None or type(finish) is str else _text(finish),
        subagents=_records(subagents, SubagentRecord, _SUBAGENT_KEYS) if subagents else (),
        approvals=_records(approvals, ApprovalRecord, _APPROVAL_KEYS) if approvals else (),
        questions=_questions(questions) if questions else (),
        attempts=attempts,
        duration_s=duration,
        error=ResultError(_text(error.get("type")), _text(error.get("message"))) if isinstance(error, dict) else None,
        metadata=metadata if type(metadata) is dict or isinstance(metadata, dict) else {},
        epoch=epoch,
        scores=scores if type(scores) is dict or isinstance(scores, dict) else None,
        usage=_usage(get("usage")) if "usage" in raw else None,
        cost_usd=(cost if type(cost) is float and math.isfinite(cost) else _number(cost)) if cost is not None else None,
        judge_usage=_usage(judge_usage) if judge_usage is not None or "judge_usage" in raw else None,
        judge_cost_usd=_number(judge_cost) if judge_cost is not None else None,
        workspace=workspace if workspace is None or type(workspace) is str else _text(workspace),
        extra=_NO_EXTRA if KNOWN_KEYS.issuperset(raw) else {k: v for k, v in raw.items() if k not in KNOWN_KEYS},
        source=raw,
    )


class TallyLine:
    """The fields of a result line that the tallies read (``eval.EvalTally``, ``ScoreTally``):
    ``id``, ``status``, ``duration_s``, ``finish_reason``, ``approvals``, ``usage``, ``cost_usd``,
    ``judge_usage``, ``judge_cost_usd``, ``epoch``, ``scores``, ``metadata``, read from a decoded
    line by ``structure_line``'s rules (``tally_line``), without the rest of a ``ResultLine``:
    what a resumed batch counts of each line already done."""

    __slots__ = ("id", "status", "duration_s", "finish_reason", "approvals", "usage", "cost_usd", "judge_usage",
                 "judge_cost_usd", "epoch", "scores", "metadata")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        get = raw.get
        duration = get("duration_s")
        if type(duration) is not float:
            duration = float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else 0.0
        epoch = get("epoch")
        if epoch is not None and type(epoch) is not int:
            epoch = epoch if isinstance(epoch, int) else 1
        item_id, status, finish = get("id"), get("status"), get("finish_reason")
        approvals, scores, metadata = get("approvals"), get("scores"), get("metadata")
        cost, judge_cost, judge_usage = get("cost_usd"), get("judge_cost_usd"), get("judge_usage")
        self.id: str = item_id if type(item_id) is str else str(item_id)
        self.status: str = status if type(status) is str else str(status)
        self.duration_s: float = duration
        self.finish_reason: str | None = finish if finish is None or type(finish) is str else _text(finish)
        self.approvals: tuple[ApprovalRecord, ...] = _records(approvals, ApprovalRecord, _APPROVAL_KEYS) if approvals else ()
        self.usage: Usage | None = _usage(get("usage")) if "usage" in raw else None
        self.cost_usd: float | None = (cost if type(cost) is float and math.isfinite(cost) else _number(cost)) if cost is not None else None
        self.judge_usage: Usage | None = _usage(judge_usage) if judge_usage is not None or "judge_usage" in raw else None
        self.judge_cost_usd: float | None = _number(judge_cost) if judge_cost is not None else None
        self.epoch: int | None = epoch
        self.scores: Mapping[str, ScoreRecord] | None = scores if type(scores) is dict or isinstance(scores, dict) else None
        self.metadata: Mapping[str, Any] = metadata if type(metadata) is dict or isinstance(metadata, dict) else {}


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    strict_scalars(conv)
    conv.register_unstructure_hook(ResultLine, ResultLine.to_json)
    conv.register_structure_hook(ResultLine, lambda raw, _: structure_line(raw))
    conv.register_unstructure_hook(Usage, Usage.to_json)
    conv.register_structure_hook(Usage, lambda raw, _: Usage.from_json(raw))
    return conv


CONVERTER = _make_converter()
"""Result lines (and ``Usage``) to the results file's JSON objects and back."""

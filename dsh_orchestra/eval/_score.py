"""Scores and what a scorer sees: ``Score``, ``EvalItem``, ``EvalResult``, and the score record.

Pure: no trio, no I/O. A scorer is called as ``scorer(item, result)`` and returns a ``Score``,
a number or a bool; ``score_record`` turns that into the result line's
``{"value", "answer", "explanation"}`` object.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol, Sequence

import attrs

from ..results import Usage

ScoreRecord = dict[str, Any]
"""``{"value": float | None, "answer": str | None, "explanation": str | None}`` (plus
``"metadata"`` when the scorer gave some)."""


@attrs.frozen
class Score:
    """What a scorer found: a ``value`` (a number; True = 1, False = 0), the extracted
    ``answer``, an ``explanation`` and free ``metadata`` (JSON-compatible)."""

    value: float | int | bool | None
    answer: str | None = None
    explanation: str | None = None
    metadata: dict[str, Any] | None = None


class ItemLike(Protocol):
    """What scorers read of a dataset item (``EvalItem`` and ``batch.BatchItem`` both fit)."""

    @property
    def id(self) -> str: ...
    @property
    def prompt(self) -> str | list[dict[str, Any]]: ...
    @property
    def target(self) -> str | list[str] | None: ...
    @property
    def choices(self) -> list[str] | None: ...
    @property
    def metadata(self) -> dict[str, Any]: ...


@attrs.frozen(kw_only=True)
class EvalItem:
    """A dataset item as scorers see it: ``target`` is a string, a list of accepted strings,
    or None; ``choices`` a list of strings or None; ``metadata`` a dict (``{}`` when absent)."""

    id: str
    prompt: str | list[dict[str, Any]] = ""
    target: str | list[str] | None = None
    choices: list[str] | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class EvalResult:
    """One finished attempt of an item as scorers see it.

    ``events`` are the root session's events (raw wire JSON objects), ``notifications`` the
    descendants' (subagents') notifications, ``subagents`` the ``SubagentResult`` objects of a
    live run or the result line's subagent objects when re-scoring, ``approvals`` the approval
    decisions, ``usage`` the tokens of the whole session tree, ``workspace`` the item's own
    workspace copy (or None). ``status`` is ``"ok"`` or ``"error"``.
    """

    final_response: str = ""
    status: str = "ok"
    finish_reason: str | None = None
    events: Sequence[dict[str, Any]] = ()
    notifications: Sequence[Any] = ()
    subagents: Sequence[Any] = ()
    approvals: Sequence[Any] = ()
    usage: Usage = attrs.field(factory=Usage)
    workspace: Path | None = None
    epoch: int = 1
    error: dict[str, Any] | None = None


def targets_of(item: ItemLike) -> tuple[str, ...]:
    """The accepted targets of ``item`` (empty when it has none)."""
    target = getattr(item, "target", None)
    if target is None:
        return ()
    if isinstance(target, str):
        return (target,)
    return tuple(map(str, target))


def null_record(explanation: str | None) -> ScoreRecord:
    """A score with no value (the item or the scorer failed; ``explanation`` says why)."""
    return {"value": None, "answer": None, "explanation": explanation}


class ScoreValueError(TypeError):
    """A scorer returned something that is not a Score, a number or a bool."""


def _value(value: Any, who: str) -> float | None:
    if value is None:
        return None
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, (int, float)):
        raise ScoreValueError(f"scorer {who!r} returned a value of type {type(value).__name__}, expected a number or a bool")
    number = float(value)
    if not math.isfinite(number):
        raise ScoreValueError(f"scorer {who!r} returned {value!r}, expected a finite number")
    return number


def score_record(returned: Any, who: str) -> ScoreRecord:
    """The result line's record of what scorer ``who`` returned.

    Raises:
        ScoreValueError: ``returned`` is not a Score, a number or a bool (or not finite).
    """
    if type(returned) is Score:
        answer, explanation = returned.answer, returned.explanation
        record: ScoreRecord = {
            "value": _value(returned.value, who),
            "answer": answer if answer is None or type(answer) is str else str(answer),
            "explanation": explanation if explanation is None or type(explanation) is str else str(explanation),
        }
        if returned.metadata is not None:
            record["metadata"] = returned.metadata
        return record
    if returned is None or isinstance(returned, (str, bytes)):
        raise ScoreValueError(
            f"scorer {who!r} returned {type(returned).__name__}, expected dsh_orchestra.eval.Score, a number or a bool"
        )
    return {"value": _value(returned, who), "answer": None, "explanation": None}

"""Scoring one item attempt: bind ``ScorerSpec``s to callables, call each, record its score.

``score_attempt`` never raises for a scorer's failure: that scorer's value is null and the
error is its explanation; the run goes on. Sync Python scorers run in a worker thread (they may
run a test suite), async ones in the caller's task; built-ins are called directly.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
from typing import Any, Callable, Mapping, Sequence

import attrs
import trio

from ._builtin import F1, Choice, Exact, Includes, Numeric, Regex, _Builtin, _response
from ._config import ScorerSpec, ScoringError
from ._judge import Judge, JudgeError, Lease
from ._score import ItemLike, ScoreRecord, null_record, score_record, targets_of
from ..results import Usage

log = logging.getLogger("dsh_orchestra.eval")


def load_function(spec: str | Callable[..., Any]) -> Callable[..., Any]:
    """Import ``module:attr`` (the working directory is importable, then PYTHONPATH); a
    callable is returned as it is.

    Raises:
        ScoringError: it cannot be imported, or it is not callable.
    """
    if callable(spec):
        return spec
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ScoringError(f"scorer {spec!r} must be of the form module:attr")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ScoringError(f"scorer {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ScoringError(f"scorer {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(value):
        raise ScoringError(f"scorer {spec!r}: {attr!r} is {type(value).__name__}, not a callable scorer(item, result)")
    return value  # type: ignore[no-any-return]


def check_scorers(specs: Sequence[ScorerSpec]) -> None:
    """Import every Python scorer now, so that a bad one fails before any item runs.

    Raises:
        ScoringError: as ``load_function``.
    """
    for spec in specs:
        if spec.kind == "python":
            load_function(spec.settings["function"])


@attrs.frozen
class BoundScorer:
    """A scorer ready to call: ``fn(item, result)``, or a ``judge``."""

    name: str
    kind: str
    fn: Callable[..., Any] | None = None
    judge: Judge | None = None


def bind_scorers(specs: Sequence[ScorerSpec], *, judges: Mapping[str, Lease] | None = None) -> tuple[BoundScorer, ...]:
    """Build each scorer of ``specs``; ``judges`` gives each judge scorer's lease (``open_judges``).

    Raises:
        ScoringError: a Python scorer cannot be loaded, or a judge has no lease.
    """
    bound: list[BoundScorer] = []
    for spec in specs:
        settings = spec.settings
        if spec.kind == "judge":
            lease = (judges or {}).get(spec.name)
            if lease is None:
                raise ScoringError(f"judge scorer {spec.name!r} has no runtime to grade on")
            judge = Judge(spec.name, lease, settings.get("rubric"), settings.get("parse_attempts", 2))
            bound.append(BoundScorer(spec.name, spec.kind, judge=judge))
            continue
        fn: Callable[..., Any]
        if spec.kind == "python":
            fn = load_function(settings["function"])
        elif spec.kind == "regex":
            fn = Regex(settings["pattern"], bool(settings.get("fullmatch", False)))
        elif spec.kind == "numeric":
            fn = Numeric(settings.get("rel_tol", 1e-6))
        else:
            builtin: dict[str, Callable[[], Callable[..., Any]]] = {"exact": Exact, "includes": Includes, "choice": Choice, "f1": F1}
            fn = builtin[spec.kind]()
        bound.append(BoundScorer(spec.name, spec.kind, fn=fn))
    return tuple(bound)


@attrs.frozen
class AttemptScores:
    """The ``scores`` of one attempt, and the tokens its judges spent (counted apart)."""

    scores: dict[str, ScoreRecord]
    judge_usage: Usage = Usage()


_NO_USAGE = Usage()
_BUILTIN = frozenset({"exact", "includes", "choice", "numeric", "f1", "regex"})


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(fn.__call__))


async def _call(scorer: BoundScorer, item: ItemLike, result: Any) -> tuple[Any, Usage]:
    if scorer.judge is not None:
        return await scorer.judge.grade(item, result)
    assert scorer.fn is not None
    if _is_async(scorer.fn):
        value = await scorer.fn(item, result)
    else:
        value = await trio.to_thread.run_sync(scorer.fn, item, result)
    if inspect.isawaitable(value):
        value = await value
    return value, Usage()


def error_scores(names: Sequence[str], explanation: str | None = "the item ended in error") -> dict[str, ScoreRecord]:
    """Every scorer's key with a null value (an item that ended in error is not scored)."""
    return {name: null_record(explanation) for name in names}


async def score_attempt(scorers: Sequence[BoundScorer], item: ItemLike, result: Any) -> AttemptScores:
    """Score one finished attempt (an ``EvalResult``); a result whose ``status`` is not ``"ok"``
    gets null for every scorer. A scorer that raises gets null with the error as explanation.
    """
    if getattr(result, "status", "ok") != "ok":
        return AttemptScores(error_scores([s.name for s in scorers]))
    records: dict[str, ScoreRecord] = {}
    judge_usage = _NO_USAGE
    text: str | None = None
    targets: tuple[str, ...] = ()
    for scorer in scorers:
        try:
            fn = scorer.fn
            if scorer.kind in _BUILTIN:  # pure and fast: called directly
                if isinstance(fn, _Builtin):
                    if text is None:  # read once for every built-in
                        text, targets = _response(result), targets_of(item)
                    records[scorer.name] = fn.record(text, targets, item)
                else:
                    records[scorer.name] = score_record(fn(item, result), scorer.name)  # type: ignore[misc]
                continue
            returned, spent = await _call(scorer, item, result)
            judge_usage = judge_usage + spent
            records[scorer.name] = score_record(returned, scorer.name)
        except Exception as exc:  # noqa: BLE001 (a scorer's failure is recorded, the run goes on)
            if isinstance(exc, JudgeError):
                judge_usage = judge_usage + exc.usage
            log.warning("scorer %r failed on item %r: %s: %s", scorer.name, getattr(item, "id", None), type(exc).__name__, exc)
            records[scorer.name] = null_record(f"{type(exc).__name__}: {exc}")
    return AttemptScores(records, judge_usage)

"""Scoring one item attempt: bind ``ScorerSpec``s to callables, call each, record its score.

``score_attempt`` never raises for a scorer's failure: that scorer's value is null and the
error is its explanation; the run goes on. ``module:attr`` scorers run in worker processes
when a pool is given (``_workers``); otherwise sync Python scorers run in a worker thread (they
may run a test suite), async ones in the caller's task. Every call of user code is bounded by
its timeout, and whatever it raises (``SystemExit`` and ``KeyboardInterrupt`` included) is that
scorer's error (``_checked``). Built-ins are called directly; a regex is matched bounded.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import math
import os
import sys
from typing import Any, Callable, Mapping, Sequence

import attrs
import trio

from ._builtin import F1, Choice, Exact, Includes, Numeric, Regex, _Builtin, _response
from ._checked import USER_ERRORS, checked_record, describe_error
from ._config import ScorerSpec, ScoringError
from ._judge import Judge, JudgeError, Lease
from ._score import ItemLike, ScoreRecord, null_record, score_record, targets_of
from ..results import Usage
from ._workers import DEFAULT_TIMEOUT, ScorerCallError, ScorerWorkers

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
    """A scorer ready to call: ``fn(item, result)``, or a ``judge``, or ``function``
    (``module:attr``) on ``workers``; each call bounded by ``timeout`` seconds (None: no bound)."""

    name: str
    kind: str
    fn: Callable[..., Any] | None = None
    judge: Judge | None = None
    timeout: float | None = None
    function: str | None = None
    workers: ScorerWorkers | None = None


def bind_scorers(
    specs: Sequence[ScorerSpec], *, judges: Mapping[str, Lease] | None = None, workers: ScorerWorkers | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> tuple[BoundScorer, ...]:
    """Build each scorer of ``specs``; ``judges`` gives each judge scorer's lease (``open_judges``).

    ``module:attr`` scorers run on ``workers`` (``open_scorer_workers``; None: in this process,
    unprotected). ``timeout`` bounds each call of a Python or regex scorer (a scorer's own
    ``timeout`` setting wins; a judge is bounded only by its own).

    Raises:
        ScoringError: a Python scorer cannot be loaded, or a judge has no lease.
    """
    bound: list[BoundScorer] = []
    for spec in specs:
        settings = spec.settings
        bound_by = settings.get("timeout", timeout)
        if spec.kind == "judge":
            lease = (judges or {}).get(spec.name)
            if lease is None:
                raise ScoringError(f"judge scorer {spec.name!r} has no runtime to grade on")
            judge = Judge(spec.name, lease, settings.get("rubric"), settings.get("parse_attempts", 2))
            bound.append(BoundScorer(spec.name, spec.kind, judge=judge, timeout=settings.get("timeout")))
            continue
        fn: Callable[..., Any]
        if spec.kind == "python":
            function = settings["function"]
            fn = load_function(function)
            if workers is not None and isinstance(function, str):
                bound.append(BoundScorer(spec.name, spec.kind, fn=fn, timeout=bound_by, function=function, workers=workers))
                continue
        elif spec.kind == "regex":
            fn = Regex(settings["pattern"], bool(settings.get("fullmatch", False)),
                       timeout=bound_by if bound_by is not None else DEFAULT_TIMEOUT)
        elif spec.kind == "numeric":
            fn = Numeric(settings.get("rel_tol", 1e-6))
        else:
            builtin: dict[str, Callable[[], Callable[..., Any]]] = {"exact": Exact, "includes": Includes, "choice": Choice, "f1": F1}
            fn = builtin[spec.kind]()
        bound.append(BoundScorer(spec.name, spec.kind, fn=fn, timeout=bound_by))
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


async def _call(scorer: BoundScorer, item: ItemLike, result: Any) -> tuple[ScoreRecord, Usage]:
    """Call one scorer within its timeout: its record and the judge's usage.

    Raises:
        trio.TooSlowError: past the timeout. Anything the scorer raised (``USER_ERRORS``).
    """
    if scorer.workers is not None and scorer.function is not None:  # bounded there: not the wait for a worker
        return await scorer.workers.call(scorer.function, item, result, timeout=scorer.timeout), _NO_USAGE
    with trio.fail_after(scorer.timeout if scorer.timeout is not None else math.inf):
        if scorer.judge is not None:
            score, usage = await scorer.judge.grade(item, result)
            return score_record(score, scorer.name), usage
        assert scorer.fn is not None
        if _is_async(scorer.fn):
            value = await scorer.fn(item, result)
        else:  # abandoned at the timeout: the thread is left to finish on its own (unprotected)
            value = await trio.to_thread.run_sync(scorer.fn, item, result, abandon_on_cancel=True)
        if inspect.isawaitable(value):
            value = await value
        return checked_record(value, scorer.name), _NO_USAGE


INLINE_MATCH_SECONDS = 0.001
"""A scorer's regex is first matched on the event loop for at most this long; a slower one is
matched again in a worker thread, bounded by the scorer's timeout."""


async def _regex_record(scorer: Regex, text: str) -> ScoreRecord:
    try:
        value, answer, explanation = scorer.match(text, timeout=INLINE_MATCH_SECONDS)
    except TimeoutError:
        match = functools.partial(scorer.match, text, concurrent=True)
        try:
            value, answer, explanation = await trio.to_thread.run_sync(match, abandon_on_cancel=True)
        except TimeoutError:
            raise TimeoutError(f"pattern {scorer.pattern!r} did not match within {scorer.timeout:g} s") from None
    return {"value": None if value is None else float(value), "answer": answer, "explanation": explanation}


def error_scores(names: Sequence[str], explanation: str | None = "the item ended in error") -> dict[str, ScoreRecord]:
    """Every scorer's key with a null value and ``"error": true`` (an item that ended in error
    is not scored)."""
    return {name: null_record(explanation, error=True) for name in names}


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
                if isinstance(fn, Regex):  # a user's pattern: bounded, off the event loop when slow
                    if text is None:
                        text, targets = _response(result), targets_of(item)
                    records[scorer.name] = await _regex_record(fn, text)
                elif isinstance(fn, _Builtin):
                    if text is None:  # read once for every built-in
                        text, targets = _response(result), targets_of(item)
                    records[scorer.name] = fn.record(text, targets, item)
                else:
                    records[scorer.name] = score_record(fn(item, result), scorer.name)  # type: ignore[misc]
                continue
            record, spent = await _call(scorer, item, result)
            judge_usage = judge_usage + spent
            records[scorer.name] = record
        except trio.TooSlowError:
            message = f"scorer {scorer.name!r} did not finish within {scorer.timeout:g} s"
            log.warning("%s on item %r", message, getattr(item, "id", None))
            records[scorer.name] = null_record(f"TimeoutError: {message}", error=True)
        except USER_ERRORS as exc:  # a scorer's failure is recorded, the run goes on
            if isinstance(exc, JudgeError):
                judge_usage = judge_usage + exc.usage
            error = str(exc) if isinstance(exc, ScorerCallError) else describe_error(exc)
            log.warning("scorer %r failed on item %r: %s", scorer.name, getattr(item, "id", None), error)
            records[scorer.name] = null_record(error, error=True)
    return AttemptScores(records, judge_usage)

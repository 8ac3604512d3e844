"""A run's evaluation settings (``EvalPlan``) and its one running tally (``EvalTally``).

``EvalPlan`` is plain data (it crosses to Ray actors): the scorers, epochs, the epoch reducer,
the group-by field, the seed and the prices. ``EvalTally`` is fed every ``ResultLine`` once and
is what the batch summary, the evaluation's ``scores``, ``groups``, ``usage``, ``cost_usd``,
``judge_usage`` and the budgets read. Pure.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

import attrs

from .._params import Param, ParamValueError, integer
from ._config import ScorerSpec, ScoringError, ScoringFile, resolve_scorers
from ._prompt import DEFAULT_TEMPLATE
from ._metrics import DEFAULT_REDUCER, Reducer, ScoreTally, parse_reducer
from ..results import ResultLine, TallyLine, Usage
from ._usage import Price, Prices
from ._warnings import excluded_warnings, failure_warnings, no_value


_AT_LEAST_ONE = integer(1)
_AT_LEAST_ZERO = integer(0)


def scorer_specs(values: Sequence[str | ScorerSpec | Callable[..., Any]], scoring: ScoringFile | None = None) -> tuple[ScorerSpec, ...]:
    """``ScorerSpec``s of SPEC strings (see ``resolve_scorers``), specs, or Python callables
    (named by their ``__name__``; they must pickle to run on Ray).

    Raises:
        ScoringError: an unknown or repeated scorer.
    """
    out: list[ScorerSpec] = []
    texts = [v for v in values if isinstance(v, str)]
    resolved = iter(resolve_scorers(texts, scoring) if texts else ())
    for value in values:
        if isinstance(value, str):
            out.append(next(resolved))
        elif isinstance(value, ScorerSpec):
            out.append(value)
        elif callable(value):
            out.append(ScorerSpec(getattr(value, "__name__", type(value).__name__), "python", {"function": value}))
        else:
            raise ScoringError(f"a scorer must be a SPEC string, a ScorerSpec or a callable, not {type(value).__name__}")
    names = [s.name for s in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ScoringError(f"scorer name(s) {repeated} given twice; each scorer once")
    return tuple(out)


@attrs.frozen(kw_only=True)
class EvalPlan:
    """How a run is scored: ``scorers``, ``epochs`` (K sessions per item), ``reducer``,
    ``group_by`` (a metadata key), ``seed`` (the bootstrap's), ``prices`` and ``route``
    (``(provider, model)`` of the handshake, for cost), ``prompt_template`` (how an item with
    choices is sent: ``render_prompt``; ``"none"`` as written), ``cluster_by`` (a metadata key:
    the items' clusters for clustered standard errors)."""

    scorers: tuple[ScorerSpec, ...] = ()
    epochs: int = attrs.field(default=1, validator=_AT_LEAST_ONE)
    reducer: Reducer = Reducer(DEFAULT_REDUCER)
    group_by: str | None = None
    seed: int = attrs.field(default=0, validator=_AT_LEAST_ZERO)
    prices: Prices | None = None
    route: tuple[str, str] | None = None
    prompt_template: str = DEFAULT_TEMPLATE
    cluster_by: str | None = None  # a metadata key: clustered stderr and ci95 (docs/evaluation.md)

    def __attrs_post_init__(self) -> None:
        if self.reducer.k is not None and self.reducer.k > self.epochs:
            raise ParamValueError(Param("epoch_reducer", self.reducer.name), f" needs k <= the epochs ({self.epochs}); raise ",
                                  Param("epochs"), " or lower k")
        if self.group_by is not None and (not isinstance(self.group_by, str) or not self.group_by):
            raise ParamValueError(Param("group_by", self.group_by, spelled="group_by"),
                                  f" must be a metadata key (a non-empty string), not {self.group_by!r}")
        if self.cluster_by is not None and (not isinstance(self.cluster_by, str) or not self.cluster_by):
            raise ParamValueError(Param("cluster_by", self.cluster_by, spelled="cluster_by"),
                                  f" must be a metadata key (a non-empty string), not {self.cluster_by!r}")

    @property
    def names(self) -> list[str]:
        """The scorers' names: the keys of ``scores``."""
        return [s.name for s in self.scorers]

    def price(self) -> Price | None:
        """The route's price (None without prices).

        Raises:
            PricesError: the prices file has no table for the route.
        """
        if self.prices is None:
            return None
        provider, model = self.route or ("", "")
        return self.prices.price(provider, model)


def make_plan(
    scorers: Sequence[str | ScorerSpec | Callable[..., Any]] = (), *, scoring: ScoringFile | None = None,
    epochs: int = 1, reducer: str | Reducer = DEFAULT_REDUCER, group_by: str | None = None, seed: int = 0,
    prices: Prices | None = None, route: tuple[str, str] | None = None, cluster_by: str | None = None,
) -> EvalPlan:
    """An ``EvalPlan`` from user-level values (SPEC strings, a reducer name).

    Raises:
        ScoringError: unknown scorers; ValueError: bad epochs, reducer or seed.
    """
    specs = scorer_specs(scorers, scoring) if scorers or scoring is None else resolve_scorers((), scoring)
    _AT_LEAST_ONE.check("epochs", epochs)
    chosen = reducer if isinstance(reducer, Reducer) else parse_reducer(reducer, epochs)
    template = scoring.prompt_template if scoring is not None and scoring.prompt_template is not None else DEFAULT_TEMPLATE
    return EvalPlan(scorers=specs, epochs=epochs, reducer=chosen, group_by=group_by, seed=seed, prices=prices, route=route,
                    prompt_template=template, cluster_by=cluster_by)


def sha256_file(path: str | os.PathLike[str] | None) -> str | None:
    """The hex SHA-256 of a file's bytes (None for no path)."""
    if path is None:
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class EvalTally:
    """The one running tally of a run's result lines: what the batch summary counts (statuses,
    durations for the percentiles, finish reasons, approval outcomes), the evaluation's totals
    (score values, usage, cost, the judges' usage and cost) and what this run spent (the
    budgets' lines, tokens and cost). Each line's tokens and cost are read once.

    Keeps about 8 bytes per line (its duration) plus one float per (item, epoch, scorer).
    """

    def __init__(self, plan: EvalPlan | None = None, *, durations: bool = True) -> None:
        self.plan = plan = plan if plan is not None else EvalPlan()
        self.scores = ScoreTally(plan.names, reducer=plan.reducer, group_by=plan.group_by, seed=plan.seed,
                                 cluster_by=plan.cluster_by) if plan.scorers else None
        self.ok = 0
        self.error = 0
        self.durations = array("d")  # (none kept without ``durations``: score reports no percentiles)
        self._keep_durations = durations
        self.finish_reasons: Counter[str] = Counter()
        self.approval_outcomes: Counter[str] = Counter()
        self._tokens = [0, 0, 0]  # input, output, total: summed as ints, one Usage at the end
        self.judge_usage = Usage()
        self.cost_usd = 0.0
        self.judge_cost_usd = 0.0
        self.run_lines = 0  # written by this run (the budgets count only these)
        self.run_tokens = 0
        self.run_cost = 0.0
        self.failures: dict[str, tuple[int, str | None]] = {}  # scorer -> (lines that ran where it failed, first error)

    @property
    def usage(self) -> Usage:
        """The tokens of every line counted so far."""
        return Usage(*self._tokens)

    def add(self, line: ResultLine | TallyLine, *, this_run: bool = False, item: int | None = None) -> None:
        """Count one result line (and what it spent, when ``this_run`` wrote it); ``item``: the
        number of its item (``ScoreTally.add``)."""
        if line.status == "ok":
            self.ok += 1
        else:
            self.error += 1
        if self._keep_durations:
            self.durations.append(line.duration_s)
        finish = line.finish_reason
        self.finish_reasons[finish if finish is not None else "none"] += 1
        if line.approvals:
            self.approval_outcomes.update(str(a.outcome) for a in line.approvals)
        usage, cost = line.usage, line.cost_usd
        if usage is not None:
            tokens = self._tokens
            tokens[0] += usage.input_tokens
            tokens[1] += usage.output_tokens
            tokens[2] += usage.total_tokens
        if cost is not None:
            self.cost_usd += cost
        if line.judge_usage is not None:
            self.judge_usage = self.judge_usage + line.judge_usage
            self.judge_cost_usd += line.judge_cost_usd or 0.0
        if self.scores is not None:
            self.scores.add(line, item=item)
            if line.status == "ok" and line.scores:
                self._count_failures(line.scores)
        if this_run:
            self.run_lines += 1
            if usage is not None:
                self.run_tokens += usage.total_tokens
            if cost is not None:
                self.run_cost += cost

    def add_line(self, line: Mapping[str, Any]) -> None:
        """Count one result line given as its JSON object."""
        self.add(line if isinstance(line, ResultLine) else ResultLine.from_json(line))

    def _count_failures(self, scores: Any) -> None:
        if not isinstance(scores, Mapping):
            return
        for name, record in scores.items():
            if type(record) is dict and record.get("error") is True:
                count, first = self.failures.get(name, (0, None))
                self.failures[name] = (count + 1, first if first is not None else record.get("explanation"))

    def warnings(self, evaluation: dict[str, Any]) -> list[str]:
        """The summary's warnings about ``evaluation`` (``to_json()``): the items each scorer's
        mean leaves out, the scorers that failed (with the first error)."""
        scores = evaluation.get("scores") or {}
        return excluded_warnings(scores) + failure_warnings(self.failures, scores)

    def scorers_without_value(self, evaluation: dict[str, Any]) -> list[str]:
        """The scorers that failed on every item that ran (the run exits 1)."""
        return no_value(evaluation.get("scores") or {}, self.failures)

    def to_json(self) -> dict[str, Any]:
        """The summary's evaluation fields: ``scores`` and ``groups`` (with scorers),
        ``usage``, ``cost_usd`` (with prices), ``judge_usage`` (with a judge)."""
        out: dict[str, Any] = {}
        if self.scores is not None:
            reduced = self.scores._reduced_arrays()  # (arrays: the lists of reduced() take 40 bytes per item and scorer)
            out["scores"] = self.scores.scores(reduced)
            groups = self.scores.groups(reduced)
            if groups is not None:
                out["groups"] = groups
        out["usage"] = self.usage.to_json()
        if self.plan.prices is not None:
            out["cost_usd"] = self.cost_usd
        if any(s.kind == "judge" for s in self.plan.scorers):
            out["judge_usage"] = self.judge_usage.to_json()
            if self.plan.prices is not None:
                out["judge_cost_usd"] = self.judge_cost_usd
        return out


def evaluated(plan: EvalPlan, usage: Usage, scores: Mapping[str, Any] | None, judge_usage: Usage | None,
              epoch: int, price: Price | None) -> dict[str, Any]:
    """The evaluation fields of an attempt's ``ResultLine`` (keywords of ``ResultLine.of_attempt``),
    in the file's order: ``epoch`` (with epochs > 1), ``scores`` (with scorers), ``usage``,
    ``cost_usd`` (with prices), ``judge_usage`` and ``judge_cost_usd`` (with a judge)."""
    out: dict[str, Any] = {}
    if plan.epochs > 1:
        out["epoch"] = epoch
    if plan.scorers:
        out["scores"] = scores if scores is not None else {}
    out["usage"] = usage
    if price is not None:
        out["cost_usd"] = price.cost(usage)
    if judge_usage is not None and any(s.kind == "judge" for s in plan.scorers):
        out["judge_usage"] = judge_usage
        if price is not None:
            out["judge_cost_usd"] = price.cost(judge_usage)
    return out


def line_fields(plan: EvalPlan, usage: Usage, scores: dict[str, Any] | None, judge_usage: Usage | None,
                epoch: int, price: Price | None) -> dict[str, Any]:
    """The fields an attempt adds to its result line, as JSON: ``scores`` (with scorers),
    ``usage``, ``cost_usd`` (with prices), ``epoch`` (with epochs > 1), ``judge_usage`` (with a
    judge). (``evaluated``, its usages as their JSON objects.)"""
    fields = evaluated(plan, usage, scores, judge_usage, epoch, price)
    fields["usage"] = usage.to_json()
    if "judge_usage" in fields:
        fields["judge_usage"] = fields["judge_usage"].to_json()
    return fields

"""What the run loop adds for evaluations: per-item workspaces, scoring an attempt, budgets and
the summary's ``run`` object.

``BatchEval`` is built once per run from ``BatchOptions`` (``open_batch_eval``): the scoring plan
(``dsh_orchestra.eval``), the route's price, the judges' runtimes, the workspaces. The run
loop calls ``prepare`` before an attempt (a fresh workspace copy) and ``finish`` after the last
one (scores, usage, cost, epoch; the copy removed unless kept).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import logging
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import attrs
import trio

from .._params import Param, rewrap
from .._scratch import scratch_path
from .._version import __version__
from ..eval import (
    BoundScorer, EvalPlan, EvalResult, EvalTally, Lease, Price, PricesError, ScoringError, Usage, bind_scorers,
    check_scorers, error_scores, evaluated, load_prices, load_scoring, make_plan, open_judges, score_attempt,
    sha256_file, turn_usage,
)
from ..runtime import RuntimeSpec
from ..session import TurnResult
from ._dataset import BatchItem, DatasetCheck
from ._options import BatchOptions, BatchUsageError

log = logging.getLogger("dsh_orchestra.batch")


def now_iso() -> str:
    """The current UTC time, ISO 8601 with milliseconds and ``Z``."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plan_of(options: BatchOptions, spec: RuntimeSpec | None) -> EvalPlan:
    """The scoring plan ``options`` describe, for the route of ``spec``.

    Raises:
        BatchUsageError: unknown scorers, a bad scoring or prices file, a route without a
            price, pass@k above the epochs, ``max_total_cost`` without prices.
    """
    try:
        scoring = load_scoring(options.scoring) if options.scoring is not None else None
        prices = options.prices
        if prices is not None and not hasattr(prices, "routes"):
            prices = load_prices(prices)
        route = (spec.provider, spec.model) if spec is not None else _default_route()
        plan = make_plan(
            options.scorers, scoring=scoring, epochs=options.epochs, reducer=options.epoch_reducer,
            group_by=options.group_by, seed=options.seed, prices=prices, route=route, cluster_by=options.cluster_by,
        )
        plan.price()
        check_scorers(plan.scorers)
    except (ScoringError, PricesError, ValueError) as exc:
        raise rewrap(BatchUsageError, exc) from exc
    if options.max_total_cost is not None and not math.isfinite(options.max_total_cost):
        raise BatchUsageError(Param("max_total_cost", options.max_total_cost, spelled="max_total_cost"), f" must be a finite number of USD >= 0, not {options.max_total_cost!r}")
    if options.max_total_cost is not None and plan.prices is None:
        raise BatchUsageError(Param("max_total_cost"), " needs ", Param("prices"), " (a prices file: the cost of a token is unknown without it)")
    return plan


def _default_route() -> tuple[str, str]:
    from ..runtime import DEFAULT_MODEL, DEFAULT_PROVIDER

    return DEFAULT_PROVIDER, DEFAULT_MODEL


_UNSAFE = str.maketrans({c: "_" for c in "/\\:*?\"<>| \t\n"})


def _safe_name(item_id: str, epoch: int) -> str:
    safe = item_id.translate(_UNSAFE)[:60].lstrip(".") or "item"
    digest = hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:8]
    return f"{safe}-{digest}-e{epoch}"


class Workspaces:
    """Fresh copies of a template directory, one per attempt, under ``root``.

    Without ``keep`` the root is a temporary directory removed at ``close()`` (each copy is
    removed as soon as its item is scored); with ``keep`` it is ``RESULTS.workspaces`` and
    the copies stay (their paths are in the result lines' ``workspace``).
    """

    def __init__(self, template: Path, out: Path, *, keep: bool) -> None:
        self.template = template
        self.keep = keep
        if keep:
            self.root = Path(f"{out}.workspaces").absolute()
            self.root.mkdir(exist_ok=True)
        else:
            self.root = scratch_path("workspaces")  # swept by the next run if this one is killed

    async def create(self, item_id: str, epoch: int) -> Path:
        """A fresh copy of the template for one attempt (an earlier attempt's copy is replaced)."""
        path = self.root / _safe_name(item_id, epoch)
        await trio.to_thread.run_sync(self._copy, path)
        return path

    def _copy(self, path: Path) -> None:
        if path.exists():
            shutil.rmtree(path)
        shutil.copytree(self.template, path, symlinks=True)

    async def remove(self, path: Path | None) -> None:
        """Remove one copy (kept with ``keep``)."""
        if path is not None and not self.keep:
            await trio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))

    def close(self) -> None:
        """Remove the temporary root and whatever is left in it (nothing with ``keep``)."""
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def check_workspace_template(options: BatchOptions) -> Path | None:
    """The template directory, checked (None without one).

    Raises:
        BatchUsageError: it is not a directory.
    """
    if options.workspace_template is None:
        if options.keep_workspaces:
            raise BatchUsageError(Param("keep_workspaces", spelled="keep_workspaces=True"), " needs ", Param("workspace_template"), " (a directory)")
        return None
    template = Path(options.workspace_template).absolute()
    if not template.is_dir():
        raise BatchUsageError(Param("workspace_template", str(options.workspace_template)), " is not a directory")
    return template


@attrs.define
class Budget:
    """``max_total_tokens`` / ``max_total_cost`` of one run: reached once this run's items
    spent that much (resumed results do not count: a resumed run continues). Reads the run's
    one tally (what this run spent: ``run_tokens``, ``run_cost``)."""

    max_tokens: int | None
    max_cost: float | None
    tally: EvalTally

    def describe(self) -> str:
        """What was spent against which limit, for the log."""
        parts = []
        if self.max_tokens is not None:
            parts.append(f"{self.tally.run_tokens} of {self.max_tokens} tokens")
        if self.max_cost is not None:
            parts.append(f"{self.tally.run_cost:.6f} of {self.max_cost:g} USD")
        return ", ".join(parts)

    @property
    def reached(self) -> bool:
        """True when a limit is reached: no new item may start."""
        return (self.max_tokens is not None and self.tally.run_tokens >= self.max_tokens) or (
            self.max_cost is not None and self.tally.run_cost >= self.max_cost
        )


@attrs.define
class BatchEval:
    """One run's evaluation: the plan, the bound scorers, the price, the workspaces, the budget."""

    plan: EvalPlan
    scorers: tuple[BoundScorer, ...]
    price: Price | None
    budget: Budget
    workspaces: Workspaces | None = None

    async def prepare(self, item: BatchItem, epoch: int) -> Path | None:
        """Before an attempt: a fresh workspace copy (None without a template)."""
        if self.workspaces is None:
            return None
        return await self.workspaces.create(item.id, epoch)

    async def finish(self, item: BatchItem, epoch: int, status: str, turn: TurnResult | None,
                     workspace: Path | None) -> dict[str, Any]:
        """After the last attempt: the evaluation fields of its ``ResultLine`` (``epoch``,
        ``scores``, ``usage``, ``cost_usd``, ``judge_usage``, ``workspace`` when kept); the
        workspace copy is removed unless kept."""
        try:
            usage = turn_usage(turn) if turn is not None else Usage()
            scores: dict[str, Any] | None = None
            judge_usage: Usage | None = None
            if self.scorers:
                if turn is None or status != "ok":
                    scores = error_scores([s.name for s in self.scorers])
                else:
                    result = EvalResult(
                        final_response=turn.final_response, status=status, finish_reason=turn.finish_reason,
                        events=turn.events, notifications=turn.notifications, subagents=turn.subagents,
                        approvals=turn.approvals, usage=usage, workspace=workspace, epoch=epoch,
                    )
                    scored = await score_attempt(self.scorers, item, result)
                    scores, judge_usage = scored.scores, scored.judge_usage
            fields = evaluated(self.plan, usage, scores, judge_usage if judge_usage is not None else Usage(), epoch, self.price)
            if workspace is not None and self.workspaces is not None and self.workspaces.keep:
                fields["workspace"] = str(workspace)
            return fields
        finally:
            if self.workspaces is not None:
                await self.workspaces.remove(workspace)

    def fields(self, turn: TurnResult | None, epoch: int) -> dict[str, Any]:
        """What ``finish`` gives without scorers and workspaces, without awaiting."""
        return evaluated(self.plan, turn_usage(turn) if turn is not None else Usage(), None, None, epoch, self.price)


@contextlib.asynccontextmanager
async def open_batch_eval(
    options: BatchOptions, plan: EvalPlan, out: Path, *, lease: Lease | None, spec: RuntimeSpec | None,
    tally: EvalTally,
) -> AsyncIterator[BatchEval]:
    """The run's ``BatchEval``: judges on ``lease`` (the local pool; None: a pool on ``spec``,
    or the judges' own runtime), workspaces under a temporary root (or ``RESULTS.workspaces``)."""
    template = check_workspace_template(options)
    workspaces = Workspaces(template, out, keep=options.keep_workspaces) if template is not None else None
    try:
        async with open_judges(
            plan.scorers, lease=lease, fallback=spec, max_sessions_per_runtime=options.max_sessions_per_runtime,
            max_runtime_rss_mib=options.max_runtime_rss_mib,
        ) as judges:
            yield BatchEval(
                plan=plan, scorers=bind_scorers(plan.scorers, judges=judges), price=plan.price(),
                budget=Budget(options.max_total_tokens, options.max_total_cost, tally), workspaces=workspaces,
            )
    finally:
        if workspaces is not None:
            workspaces.close()


def _runtime_kind(spec: RuntimeSpec | None) -> tuple[str, list[str] | None]:
    if spec is None:
        return "sim", None
    if spec.connect is not None:
        return "in-process", None
    if spec.command is None:
        from ..runtime import bundled_dsh_command

        try:
            return "dsh", [*bundled_dsh_command()]
        except FileNotFoundError:
            return "dsh", None
    command = list(spec.command)
    if "dsh_orchestra.testing" in command and "sim" in command:
        return "sim", command
    return "command", command


def _option_after(command: Sequence[str] | None, flag: str) -> str | None:
    if not command:
        return None
    for index, value in enumerate(command[:-1]):
        if value == flag:
            return command[index + 1]
    return None


def _file_sha(value: Any) -> str | None:
    source = getattr(value, "source", value)
    if isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
        return sha256_file(source)
    return None


def run_info(
    *, options: BatchOptions, plan: EvalPlan, spec: RuntimeSpec | None, dataset: DatasetCheck,
    server_version: str | None, started: str, ended: str,
) -> dict[str, Any]:
    """The summary's ``run`` object: what is needed to reproduce the run."""
    kind, command = _runtime_kind(spec)
    secrets = spec.secrets() if spec is not None else ()
    if command is not None:
        command = [_redacted(part, secrets) for part in command]
    scenario = _option_after(command, "--script")
    return {
        "dsh_orchestra_version": __version__,
        "runtime": {"kind": kind, "command": command, "server_version": server_version},
        "provider": spec.provider if spec is not None else _default_route()[0],
        "model": spec.model if spec is not None else _default_route()[1],
        "dataset": {"path": str(dataset.path), "sha256": _dataset_sha(dataset), "items": dataset.items},
        "scenario_sha256": sha256_file(scenario) if scenario is not None and os.path.isfile(scenario) else None,
        "policy_sha256": _file_sha(options.policy),
        "scoring_sha256": sha256_file(options.scoring) if options.scoring is not None else None,
        "scorers": plan.names,
        "epochs": plan.epochs,
        "reducer": plan.reducer.name,
        "seed": plan.seed,
        "group_by": plan.group_by,
        "cluster_by": plan.cluster_by,
        "argv": list(options.argv) if options.argv is not None else list(sys.argv),
        "start_time": started,
        "end_time": ended,
    }


def _dataset_sha(dataset: DatasetCheck) -> str | None:
    if dataset.data is not None:
        return hashlib.sha256(dataset.data).hexdigest()
    try:
        return sha256_file(dataset.path)
    except OSError:
        return None


def _redacted(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text

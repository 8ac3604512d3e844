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
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import attrs

from .._params import Param, rewrap
from .._version import __version__
from ..eval import (
    BoundScorer, EvalPlan, EvalResult, EvalTally, Lease, Price, PricesError, ScoringError, Usage, bind_scorers,
    NO_TEMPLATE, check_scorers, error_scores, evaluated, load_prices, load_scoring, make_plan, needs_workers, open_judges,
    open_scorer_workers, render_prompt, score_attempt, sha256_file, turn_usage,
)
from ..gateway import DEFAULT_GATEWAY, CallBudget
from ..runtime import RuntimeSpec
from ..session import TurnResult
from ._dataset import BatchItem, DatasetCheck
from ._options import BatchOptions, BatchUsageError
from ._workspaces import Workspaces

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
        return CallBudget.spent_text(self.tally.run_tokens, self.max_tokens, self.tally.run_cost, self.max_cost)

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

    def sent_item(self, item: BatchItem) -> BatchItem:
        """``item`` as it is sent: with ``choices``, its prompt rendered by the plan's
        multiple-choice template (``render_prompt``; ``"none"``: as written)."""
        if not item.choices or self.plan.prompt_template == NO_TEMPLATE:
            return item
        return attrs.evolve(item, prompt=render_prompt(self.plan.prompt_template, item.prompt, item.choices))

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
    tally: EvalTally, workspaces: Workspaces | None = None,
) -> AsyncIterator[BatchEval]:
    """The run's ``BatchEval``: judges on ``lease`` (the local pool; None: a pool on ``spec``,
    or the judges' own runtime; through a gateway of its own unless the run has none), the run's
    ``workspaces`` (``open_workspaces``: made before the runtimes start, so that a sandbox can
    let them write there; closed by the run loop)."""
    async with open_judges(
        plan.scorers, lease=lease, fallback=spec, max_sessions_per_runtime=options.max_sessions_per_runtime,
        max_runtime_rss_mib=options.max_runtime_rss_mib, gateway=None if options.gateway is None else DEFAULT_GATEWAY,
    ) as judges, open_scorer_workers(options.scorer_workers if needs_workers(plan.scorers) else 0) as workers:
        scorers = bind_scorers(plan.scorers, judges=judges, workers=workers, timeout=options.scorer_timeout)
        yield BatchEval(
            plan=plan, scorers=scorers, price=plan.price(),
            budget=Budget(options.max_total_tokens, options.max_total_cost, tally), workspaces=workspaces,
        )


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
        # absolute paths: `dsh-orchestra view` and `report` find the run's files from any directory
        "dataset": {"path": os.path.abspath(dataset.path), "sha256": _dataset_sha(dataset), "items": dataset.items},
        "transcripts": os.path.abspath(options.transcripts) if options.transcripts is not None else None,
        "audit": os.path.abspath(options.audit) if options.audit is not None else None,
        "scenario_sha256": sha256_file(scenario) if scenario is not None and os.path.isfile(scenario) else None,
        "policy_sha256": _file_sha(options.policy),
        "scoring_sha256": sha256_file(options.scoring) if options.scoring is not None else None,
        "scorers": plan.names,
        "prompt_template": plan.prompt_template,
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


FINGERPRINT_PARTS = {
    "dataset_sha256": "the dataset", "scenario_sha256": "the scenario (--script)", "policy_sha256": "the policy",
    "scorers": "the scorers", "scoring_sha256": "the scoring file", "provider": "the provider", "model": "the model",
    "prompt_template": "the prompt template",
}
"""What a results file's run was made with (``RESULTS.run.json``): ``resume`` refuses
another. ``epochs`` and the reducer may change (a new epoch is what a resume adds)."""


def fingerprint(*, options: BatchOptions, plan: EvalPlan, spec: RuntimeSpec | None, dataset: DatasetCheck) -> dict[str, Any]:
    """The configuration a run's results depend on (``FINGERPRINT_PARTS``)."""
    _, command = _runtime_kind(spec)
    scenario = _option_after(command, "--script")
    return {
        "dataset_sha256": _dataset_sha(dataset),
        "scenario_sha256": sha256_file(scenario) if scenario is not None and os.path.isfile(scenario) else None,
        "policy_sha256": _file_sha(options.policy),
        "scorers": plan.names,
        "scoring_sha256": sha256_file(options.scoring) if options.scoring is not None else None,
        "provider": spec.provider if spec is not None else _default_route()[0],
        "model": spec.model if spec is not None else _default_route()[1],
        "prompt_template": plan.prompt_template,
    }


def fingerprint_path(out: Path) -> Path:
    """``RESULTS.run.json``: the fingerprint of the run that wrote RESULTS."""
    return out.with_name(out.name + ".run.json")


def check_fingerprint(out: Path, current: dict[str, Any], *, resumed: bool) -> None:
    """Write ``current`` beside a new results file; on a resume, refuse a different one.

    Raises:
        BatchUsageError: ``resumed`` and the recorded fingerprint differs: the message names
            every part that differs.
    """
    path = fingerprint_path(out)
    if resumed and path.is_file():
        try:
            recorded = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise BatchUsageError(f"{path}: cannot read the configuration of the run that wrote {out} ({exc}); "
                                  "remove it to resume anyway") from exc
        differ = [part for part in FINGERPRINT_PARTS if isinstance(recorded, dict) and recorded.get(part) != current.get(part)]
        if differ:
            described = ", ".join(f"{FINGERPRINT_PARTS[p]} ({p})" for p in differ)
            raise BatchUsageError(
                Param("resume", spelled="resume=True"), f": {out} was written by a run with another configuration: "
                f"{described} differ(s) (recorded in {path.name}). Resume with the same configuration, write to another ",
                Param("out"), ", or re-score the results with `dsh-orchestra score`")
        return
    if resumed:
        log.warning("%s: no record of the configuration that wrote it (an earlier version): resuming as asked", out)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(json.dumps(current, indent=2).encode() + b"\n")
    os.replace(temporary, path)

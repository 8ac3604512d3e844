"""run_batch: dataset in, one result line per item out, exactly once, resumable after any crash.

The one run loop, whatever runs the items: validation before work, resume (skip done ids,
repair a torn tail), sharding, the items streamed to ``capacity`` workers, retries with a
capped, jittered backoff for retryable failures, items whose place was lost run again, the
result line, progress, the tally and the summary. Where an attempt runs is the executor's
business (``_executor``): the local pool by default, Ray with ``dsh_orchestra.scale``.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import attrs
import orjson
import trio

from .._redact import Redactor, environment_secrets
from .._params import Param, rewrap
from .._tracing import ITEM_SPAN, observed
from ..gateway import CallBudget, Gateway, gateway_for
from ..pool import Backoff, job_warnings
from ..runtime import RuntimeSpec
from ..session import OK_FINISH_REASONS
from ._control import RunControl, note_control
from ._crashes import ALONE_AFTER, Deaths, crashed_error
from ._cutoff import budgeted, call_budget, cut_short, judged_past_budget, judges_gateway, refused_calls, remote
from ._dataset import BatchItem, DatasetCheck, check_dataset, iter_dataset
from ..eval import EvalPlan, ScoringError, check_plan_inputs
from ..results import ResultLine
from ._evaluation import BatchEval, Budget as BatchBudget, check_fingerprint, fingerprint, fingerprint_path, now_iso, open_batch_eval, plan_of, run_info
from ._executor import (
    Attempt, AttemptRunner, Executor, executor_in_process, runner_extra, runner_lease, runner_server_version,
)
from ._ids import check_ids_hold_no_secret
from ._local import default_executor
from ._options import BatchOptions, BatchUsageError
from ._paths import check_batch_paths
from ._progress import Counters, Progress
from ._resume import read_done
from ._retry import drop_error_lines
from ._results import ResultsLock, ResultsWriter
from ._summary import BatchSummary, Tally
from ._workspaces import check_workspace_template
from ._confine import confine_run
from ._ramp import RAMP_FIRST, StartRamp, grow_on_ready

log = logging.getLogger("dsh_orchestra.batch")

PLACE_LOST = "ActorLostError"
"""``error.type`` of an item that lost its place ``max_lost`` times (it is not run again)."""


@attrs.define
class _Run:
    runner: AttemptRunner
    writer: ResultsWriter
    options: BatchOptions
    counters: Counters
    progress: Progress
    tally: Tally
    backoff: Backoff
    evaluation: BatchEval
    redactor: Redactor = attrs.field(factory=Redactor)
    gateway: Gateway | None = None  # the run's model gateway (local pool, real dsh)
    tag: Callable[..., None] | None = None  # tag(session_id, epoch=N): the cache key's epoch (gateway or runner)
    control: RunControl | None = None
    cut: int = 0  # items cut short by the gateway's budget (no line written)
    deaths: Deaths = attrs.field(factory=Deaths)
    ramp: StartRamp | None = None  # workers start a few at a time (with a gateway: ``_ramp``)
    # trio's clock (``trio.current_time()`` is its ``current_time()``, three calls deeper)
    clock: trio.abc.Clock = attrs.field(factory=trio.lowlevel.current_clock)
    _token: str = attrs.field(factory=lambda: uuid.uuid4().hex[:12], init=False)
    _serial: Iterator[int] = attrs.field(factory=itertools.count, init=False)

    def new_session_id(self) -> str:
        """``item-<24 hex>``: a random token of this run, then a counter (unique in the store)."""
        return f"item-{self._token}{next(self._serial):012x}"


def _turn_error(attempt: Attempt) -> dict[str, str] | None:
    turn = attempt.turn
    if turn is None or turn.finish_reason in OK_FINISH_REASONS:
        return attempt.error
    detail = turn.error
    message = f"{detail.code}: {detail.message}" if detail is not None else f"turn ended {turn.finish_reason!r}"
    return {"type": "TurnFailed", "message": message}


@observed(ITEM_SPAN, lambda run, item, epoch: {"item": item.id})
async def _run_item(run: _Run, item: BatchItem, epoch: int) -> None:
    """Attempts at ``item`` (its ``epoch``) until one settles, retries are spent, or its place
    was lost too often; then its result line, scored, written and counted.

    A runtime dying under the item costs it no retry until it was in flight at ``ALONE_AFTER``
    deaths; from then on it runs alone, and each further death is its own doing (``_crashes``).
    """
    options = run.options
    evaluation = run.evaluation
    clock = run.clock
    started = clock.current_time()
    attempts = retried = lost = crashes = crashes_alone = 0
    workspace = None
    sent = evaluation.sent_item(item)  # with choices: the multiple-choice prompt
    while True:
        attempts += 1
        if evaluation.workspaces is not None:
            workspace = await evaluation.prepare(item, epoch)  # a fresh copy for every attempt
        session_id = item.session_id or run.new_session_id()
        if run.tag is not None:
            run.tag(session_id, epoch=epoch)  # the epoch is part of its calls' cache key
        # with epochs the executor sees "<id>#<epoch>": each epoch keeps a transcript of its own
        unit = attrs.evolve(sent, id=f"{item.id}#{epoch}") if options.epochs > 1 else sent
        alone = crashes >= ALONE_AFTER
        if workspace is None and not alone:  # the common attempt: no keyword dict to unpack
            attempt = await run.runner.attempt(unit, session_id)
        else:
            extra: dict[str, Any] = {} if workspace is None else {"workspace": str(workspace)}
            if alone:  # only then: runners that predate ``alone`` keep working for everything else
                extra["alone"] = True
            attempt = await run.runner.attempt(unit, session_id, **extra)
        crash = attempt.crash
        if attempt.cut or cut_short(run.gateway, attempt.session_id):
            break
        if attempt.lost:
            lost += 1
            reason = (attempt.error or {}).get("message", "")
            if lost >= run.runner.max_lost:
                attempt = attrs.evolve(attempt, error={"type": PLACE_LOST, "message": (
                    f"the place running item {item.id!r} was lost {lost} times (last: {reason}); not run again")})
                break
            log.info("item %r runs again: its place was lost (%s)", item.id, reason)
        elif crash is not None and attempt.turn is None:
            crashes += 1
            run.deaths.note(item.id, crash, alone=alone)
            if alone:  # nothing else ran there: this item killed it
                crashes_alone += 1
                if retried >= options.retries:
                    attempt = attrs.evolve(attempt, error=crashed_error(item.id, crashes, crashes_alone, crash))
                    break
                log.info("retrying item %r alone after it crashed its runtime (attempt %d)", item.id, attempts)
                await run.backoff.sleep(retried)
                retried += 1
        elif attempt.error is None or not attempt.retryable or retried >= options.retries:
            break
        else:
            log.info("retrying item %r after %s (attempt %d)", item.id, attempt.error["type"], attempts)
            await run.backoff.sleep(retried)
            retried += 1
        run.counters.retries += 1
    if attempt.cut or cut_short(run.gateway, attempt.session_id):
        if evaluation.workspaces is not None:
            await evaluation.workspaces.remove(workspace)
        _cut(run, item, attempt.session_id)
        return
    turn = attempt.turn
    ok = turn is not None and turn.finish_reason in OK_FINISH_REASONS
    status = "ok" if ok else "error"
    duration = clock.current_time() - started
    if evaluation.scorers or evaluation.workspaces is not None:
        refused = refused_calls(judges_gateway(run.gateway, run.runner))
        fields = await evaluation.finish(item, epoch, status, turn, workspace)
        if judged_past_budget(judges_gateway(run.gateway, run.runner), refused, fields):
            _cut(run, item, attempt.session_id)
            return
    else:  # nothing to score or remove: the same fields, without a coroutine
        fields = evaluation.fields(turn, epoch)
    line = ResultLine.of_attempt(
        item.id,
        status=status,
        session_id=attempt.session_id,
        turn=turn,
        attempts=attempts,
        duration_s=duration,
        error=None if ok else _turn_error(attempt),
        metadata=item.metadata,
        **fields,
    )
    if run.gateway is not None:  # the item's model calls (its subagents' included) through the gateway
        await run.gateway.settled(attempt.session_id)
        line = attrs.evolve(line, extra={**line.extra, "model": run.gateway.take(attempt.session_id).to_json()})
    elif attempt.model is not None:  # counted by a gateway elsewhere (Ray: the node's)
        line = attrs.evolve(line, extra={**line.extra, "model": attempt.model})
    _write(run, line)


def _cut(run: _Run, item: BatchItem, session_id: str) -> None:
    """The budget cut ``item`` short: no result line (a resumed run runs it again)."""
    if run.gateway is not None:
        run.gateway.take(session_id)
    run.cut += 1
    log.info("item %r was cut short by the budget: no result line (run again to resume)", item.id)


def _write(run: _Run, line: ResultLine) -> None:
    """Write one result line (redacted: a runtime may echo a secret anywhere) and count it."""
    data = line.to_json()
    redacted, encoded = run.redactor.value_json(data)
    run.writer.write_json(encoded)
    if redacted is not data:  # a secret was cut out: count the line as written
        line = ResultLine.from_json(redacted)
    run.tally.add(line, this_run=True)
    counters = run.counters
    counters.done += 1
    if line.status != "ok":
        counters.failed += 1
    run.progress.update()


async def _worker(run: _Run, units: _Units, index: int = 0) -> None:
    ramp = run.ramp
    if ramp is not None and not ramp.open:  # worker ``index`` starts once the ramp lets it (``_ramp``)
        await ramp.wait(index)
        while not ramp.open:  # meanwhile each item that ends lets more workers start
            if not await _ramped_item(run, units):
                ramp.open_all()  # no item left: the workers still waiting find none and end
                return
            ramp.progress()
    # Each worker takes the next unit itself when it is free: no feeder task, no channel
    # rendezvous per item (two task steps each). ``next`` never waits, so the workers
    # cannot interleave inside it. The item's coroutine is awaited directly: every level between
    # a worker and the session is resumed at each of the turn's wake-ups.
    control = run.control
    if control is None:
        for item, epoch in units:
            await _run_item(run, item, epoch)
        return
    me, iterator = object(), iter(units)
    while True:  # with a control socket: a place under its limit (and not paused) before each item
        await control.acquire(me)
        try:
            unit = next(iterator, None)
            if unit is None:
                return
            control.in_flight[me] = f"{unit[0].id}#{unit[1]}" if run.options.epochs > 1 else unit[0].id
            await _run_item(run, *unit)
        finally:
            control.release(me)


async def _ramped_item(run: _Run, units: _Units) -> bool:
    """One item of a worker started while the ramp is not open (False: none was left)."""
    control = run.control
    me = object()
    if control is not None:
        await control.acquire(me)
    try:
        unit = next(iter(units), None)
        if unit is None:
            return False
        if control is not None:
            control.in_flight[me] = f"{unit[0].id}#{unit[1]}" if run.options.epochs > 1 else unit[0].id
        await _run_item(run, *unit)
        return True
    finally:
        if control is not None:
            control.release(me)


def _check_paths(out: Path, options: BatchOptions) -> None:
    """Refuse, before anything runs, outputs that could not be written at the end."""
    for name, value in (("out", out), ("summary", options.summary), ("audit", options.audit)):
        if value is None:
            continue
        path = Path(value)
        if path.is_dir():
            raise BatchUsageError(Param(name, str(path)), " is a directory; give a file path")
        if not path.parent.is_dir():
            raise BatchUsageError(Param(name, str(path)), f": directory {str(path.parent)!r} does not exist; create it first")
    if options.transcripts is not None and Path(options.transcripts).exists() and not Path(options.transcripts).is_dir():
        raise BatchUsageError(Param("transcripts", str(options.transcripts)), " is a file, not a directory; give a directory")
    if out.exists() and out.stat().st_size and not options.resume:
        raise BatchUsageError(
            f"results file {str(out)!r} already has results; pass ", Param("resume", spelled="resume=True"),
            " to finish it, or choose another ", Param("out"),
        )


def _prepare_resume(
    dataset: str | os.PathLike[str], out: Path, options: BatchOptions, lock: ResultsLock, tally: Tally,
    secrets: Sequence[str] = (),
) -> tuple[DatasetCheck, set[tuple[str, int]]]:
    """Validate the dataset (nothing runs on a bad one), check the output paths, take ``lock``
    and read the results already in ``out`` (repairing a torn tail) into ``tally``: the check
    and the (id, epoch) pairs already done (epochs above ``options.epochs`` are not counted).
    An id holding one of ``secrets`` is refused (``check_ids_hold_no_secret``)."""
    check_batch_paths(dataset, out, options)  # before anything is read, repaired or written
    check = check_dataset(dataset, options.shard)
    if check.unknown:
        log.warning("dataset keys %s are not part of the contract and are ignored (use metadata)", list(check.unknown))
    if options.epochs > 1 and check.session_ids:
        raise BatchUsageError(
            Param("epochs", options.epochs), f" runs each item in {options.epochs} sessions of their own, but "
            f"{check.session_ids} dataset item(s) name a session_id; drop session_id or use ", Param("epochs", 1)
        )
    check_ids_hold_no_secret(check, secrets)
    _check_paths(out, options)
    lock.acquire()  # before the results are read or repaired; held for the run
    if options.retry_errors:
        dropped = drop_error_lines(out, lock)
        if dropped:
            log.warning("retry_errors: %d error line(s) removed from %s; their items run again", dropped, out)
    done, torn = read_done(out, check.ids, options.epochs, tally)
    if torn:
        log.warning("repaired %s: cut a torn last line of %d bytes", out, torn)
    return check, done


def _backoff(options: BatchOptions) -> Backoff:
    cap = options.retry_backoff_max
    return Backoff(min(options.retry_backoff, cap), cap, options.retry_jitter)


async def run_batch(
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    spec: RuntimeSpec | None = None,
    options: BatchOptions | None = None,
    *,
    executor: Executor | None = None,
    **kwargs: Any,
) -> BatchSummary:
    """Run every dataset item (of this shard) in its own session; write one result line each.

    ``executor`` runs the attempts: by default a local pool (``PoolExecutor``: ``options.runtimes``
    runtimes, ``options.in_flight`` items in flight); ``dsh_orchestra.scale.RayExecutor`` runs
    them on Ray actors with the same results. With no spec the simulator runs (as processes,
    in a temporary DSH_HOME). ``kwargs`` are BatchOptions fields, when no ``options`` is given.

    Raises:
        DatasetError: the dataset is malformed (nothing ran).
        BatchUsageError: results exist without ``resume``, they are corrupt, or an output
            cannot be written (nothing ran); another batch holds the results file
            (``ResultsLockedError``, naming it); or the executor cannot run as asked.
        RuntimeStartError: no runtime could be started (raised bare; nothing ran).
        ExceptionGroup: the batch stopped part-way (every runtime kept failing to start, a
            write failed, the dataset changed underneath); the results so far are kept.
    """
    options = options or BatchOptions(**kwargs)
    executor = executor if executor is not None else default_executor()
    backoff = _backoff(options)
    # Validate the whole file first (nothing runs on a bad dataset), keeping only the ids; the
    # items are streamed from the file again as places free up: memory stays flat in size.
    out = Path(out)
    plan = plan_of(options, spec)
    check_workspace_template(options, out)  # before anything runs
    existed = out.exists()
    lock = ResultsLock(out)
    try:
        return await _run_locked(dataset, out, spec, options, executor, backoff, lock, plan)
    except BaseException:
        if not existed and out.exists() and out.stat().st_size == 0:
            out.unlink()  # nothing was written (e.g. no runtime started): leave no empty results file
            fingerprint_path(out).unlink(missing_ok=True)
        raise
    finally:
        lock.release()


async def _run_locked(
    dataset: str | os.PathLike[str], out: Path, spec: RuntimeSpec | None, options: BatchOptions,
    executor: Executor, backoff: Backoff, lock: ResultsLock, plan: EvalPlan,
) -> BatchSummary:
    started_at = now_iso()
    tally = Tally(plan)
    secrets = spec.secrets() if spec is not None else environment_secrets(os.environ)
    check, done = _prepare_resume(dataset, out, options, lock, tally, secrets=secrets)
    check_fingerprint(out, fingerprint(options=options, plan=plan, spec=spec, dataset=check), resumed=out.stat().st_size > 0)  # noqa: ASYNC240 - one stat
    redactor = Redactor(spec.secrets() if spec is not None else ())
    epochs = options.epochs
    total = len(check.ids) * epochs
    resumed = len(done)
    todo = total - resumed
    counters = Counters(total=total, done=resumed, resumed=resumed)
    progress = Progress(counters, mode=options.progress, clock=trio.current_time)
    started = trio.current_time()
    stopped: str | None = None
    model_totals: dict[str, Any] | None = None
    server_version: str | None = None
    processed = cut = 0
    if spec is not None and options.approval_relay is not None:
        spec = spec.evolve(approval_relay=options.approval_relay)
    try:
        plan_warnings = check_plan_inputs(plan, where=str(check.path), items=check.items, targets=check.targets,
                                          metadata_keys=check.metadata_keys)
    except ScoringError as exc:
        raise rewrap(BatchUsageError, exc) from exc
    for line in plan_warnings:
        log.warning("%s", line)
    failed = True  # until the run ends well: a run that fails before any item prints no final progress line
    try:  # warnings once for the batch, not once per runtime
        with job_warnings(spec, approvals=options.policy is not None, answerer=options.answerer is not None) as warnings, \
                ResultsWriter(out) as writer:
            local = executor_in_process(executor)  # Ray actors open their own (scale.RayExecutor)
            if todo:
                # the workspaces' root made before the runtimes start: a sandbox lets them write there
                async with confine_run(spec, out, options) as (spec, workspaces), \
                        gateway_for(spec if local else None, budgeted(options, plan)) as (gateway, routed), \
                        executor.open(routed if local else spec, options if local else remote(options, plan)) as runner:
                    server_version = runner_server_version(runner)
                    lease = runner_lease(runner)
                    async with open_batch_eval(options, plan, out, lease=lease, spec=spec, tally=tally,
                                               workspaces=workspaces) as batch_eval:
                        counters.pending_approvals = runner.pending_approvals
                        workers = min(max(1, runner.capacity), todo)
                        # ctl concurrency sets its limit too (Ray: the quota coordinator's total)
                        model = gateway.limiter if gateway is not None else runner_extra(runner, "model")
                        control = RunControl(workers, workers, counters, out, model=model) if options.control else None
                        # with a gateway, workers start a few at a time: the runtimes' first model calls come sooner
                        ramp = StartRamp(workers) if gateway is not None and workers > RAMP_FIRST else None
                        run = _Run(runner, writer, options, counters, progress, tally, backoff, batch_eval, redactor,
                                   gateway=gateway, control=control, ramp=ramp,
                                   tag=gateway.tag if gateway is not None else runner_extra(runner, "tag"))
                        units = _Units(check, done, epochs, batch_eval,
                                       call_budget(gateway) or runner_extra(runner, "call_budget"))
                        async with trio.open_nursery() as outer:
                            outer.start_soon(progress.run)
                            if control is not None:
                                note_control(out, await outer.start(control.serve))
                            if ramp is not None and gateway is not None:
                                gateway.limiter.on_call = ramp.progress  # a new model call: more may start
                                outer.start_soon(grow_on_ready, ramp, runner)  # so does each further runtime ready
                            try:
                                async with trio.open_nursery() as nursery:
                                    for index in range(workers):
                                        nursery.start_soon(_worker, run, units, index)
                            finally:
                                if gateway is not None:
                                    gateway.limiter.on_call = None
                            stopped = units.stopped or ("budget" if run.cut else None)
                            outer.cancel_scope.cancel(reason="every item finished")
                        processed, cut = tally.run_lines, run.cut
                model_totals = gateway.summary() if gateway is not None else runner_extra(runner, "model_totals")
                if model_totals is not None:
                    if model_totals["budget"] is not None:
                        model_totals["budget"]["cut_items"] = cut
            writer.check()  # the runtimes are closed: nothing of this run may have changed it since
        failed = False
    finally:
        progress.close(final=not failed or tally.run_lines > 0)
    duration = trio.current_time() - started
    summary = tally.summary(
        total=total, resumed=resumed, processed=processed if stopped else todo, duration_s=duration,
        retries=counters.retries,
    )
    info = run_info(options=options, plan=plan, spec=spec, dataset=check, server_version=server_version,
                    started=started_at, ended=now_iso())
    scored = tally.to_json()
    warnings = [*warnings, *plan_warnings, *tally.warnings(scored)]
    summary = attrs.evolve(summary, evaluation=scored, run=redactor.value(info), stopped=stopped,
                           results=os.path.abspath(out),  # noqa: ASYNC240 - a string op
                           warnings=tuple(warnings), model=model_totals,
                           scorers_without_value=tuple(tally.scorers_without_value(scored)))
    if options.summary is not None:
        data = redactor.value(summary.to_json())
        await trio.Path(options.summary).write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    return summary


class _Units:
    """Every (item, epoch) not done yet, in file order, epochs together, taken by the workers
    as they free up; it stops early (``stopped = "budget"``) once the run's budget is reached,
    checked as each item would start."""

    def __init__(self, check: DatasetCheck, done: set[tuple[str, int]], epochs: int, batch_eval: BatchEval,
                 per_call: CallBudget | None = None) -> None:
        self.stopped: str | None = None
        self._units = self._generate(check, done, epochs, batch_eval, per_call)

    def __iter__(self) -> Iterator[tuple[BatchItem, int]]:
        return self._units

    def _generate(
        self, check: DatasetCheck, done: set[tuple[str, int]], epochs: int, batch_eval: BatchEval,
        per_call: CallBudget | None,
    ) -> Iterator[tuple[BatchItem, int]]:
        skip = {item_id for item_id, _ in done if all((item_id, e) in done for e in range(1, epochs + 1))}
        budget: BatchBudget | CallBudget = per_call if per_call is not None else batch_eval.budget  # the gateway's counts per call
        for item in iter_dataset(check, skip=skip):
            for epoch in range(1, epochs + 1):
                if done and (item.id, epoch) in done:
                    continue
                if budget.reached:
                    log.warning("the budget is reached (%s): no new item starts; run again to resume and continue",
                                budget.describe())
                    self.stopped = "budget"
                    return
                yield item, epoch

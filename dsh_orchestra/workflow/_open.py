"""run_workflow and open_workflow: open what a run needs (runtimes, the checkpoint), run the
engine, assemble the WorkflowResult; a run's live events; checkpoint inspection.

Must not know about datasets or the CLI.
"""

from __future__ import annotations

import os
from contextlib import ExitStack, asynccontextmanager
from typing import Any, AsyncIterator

import attrs
import trio

from .._params import Check, Param, ParamValueError, integer
from ..pool import RuntimePool, open_places
from ..session import Runtime
from ._engine import RunState, Statistics, _Engine
from ._events import EventChannel, EventHub
from ._fingerprint import digest, fingerprint
from ._graph import Workflow
from ._interrupts import Escalation, Interrupts
from ._journal import CheckpointError, Journal
from ._options import WorkflowOptions, resolve
from ._result import Interrupt, WorkflowResult

DEFAULT_EVENTS = 10_000
"""Events a reader may fall behind before its channel fails (``events(capacity=...)``)."""


def _check_options(workflow: Workflow, options: WorkflowOptions) -> None:
    workflow.validate()
    Check(lambda v: v in ("fail-fast", "collect"), "'fail-fast' or 'collect'").check("failure", options.failure)
    for name, value in (("concurrency", options.concurrency), ("runtime_limit", options.runtime_limit)):
        if value is not None:
            integer(1, "an integer >= 1 or None").check(name, value)
    integer(1).check("runtimes", options.runtimes)


def _escalations(target: Runtime | RuntimePool) -> list[Escalation]:
    """The escalate() policies of the runtimes the workflow runs on."""
    policy = getattr(target, "approvals", None)
    policy = getattr(policy, "policy", policy)  # a Runtime holds an ApprovalService, a pool the policy
    return [policy] if isinstance(policy, Escalation) else []


async def _execute(
    workflow: Workflow, target: Runtime | RuntimePool | None, options: WorkflowOptions, events: EventHub,
) -> WorkflowResult:
    spec, runtimes, approvals, answerer, audit = (
        options.spec, options.runtimes, options.approvals, options.answerer, options.audit)
    approval_relay, checkpoint, resume, inputs = options.approval_relay, options.checkpoint, options.resume, options.inputs
    concurrency, runtime_limit, failure = options.concurrency, options.runtime_limit, options.failure
    _check_options(workflow, options)
    if resume and checkpoint is None:
        raise CheckpointError("resuming needs the checkpoint to resume from", parameter="checkpoint")
    given = [n for n, v in (("spec", spec), ("approvals", approvals), ("answerer", answerer), ("audit", audit),
                            ("approval_relay", approval_relay)) if v is not None]
    if target is not None and (given or runtimes != 1):
        named = [Param(n, spelled=n) for n in given or ["runtimes"]]
        raise ParamValueError(
            *[part for i, p in enumerate(named) for part in ((", " if i else ""), p)],
            " only apply when run_workflow opens the runtimes itself; "
            "pass them to open_runtime/open_pool instead, or drop the target",
        )
    if target is None and runtimes > 1 and spec is None:
        raise ParamValueError(Param("runtimes", runtimes, spelled=f"runtimes={runtimes}"), " needs a ",
                              Param("spec", spelled="spec"), " to start them from")
    inputs = dict(inputs or {})
    with ExitStack() as stack:
        journal: Journal | None = None
        if checkpoint is not None:
            journal = Journal.open(checkpoint, workflow=workflow.name, inputs_digest=digest(inputs), resume=resume)
            stack.callback(journal.close)
        interrupts = Interrupts(journal, options.answers, events)
        state: dict[str, Any] = dict(
            concurrency=concurrency, runtime_limit=runtime_limit, failure=failure,
            stats=options.statistics if options.statistics is not None else Statistics(), journal=journal,
            interrupts=interrupts, events=events,
        )
        if target is not None:
            return await _run_engine(workflow, RunState(target, **state), inputs)
        async with open_places(spec, runtimes, pooled=runtimes > 1, approvals=approvals, answerer=answerer,
                               audit=audit, approval_relay=approval_relay, gateway=options.gateway) as places:
            return await _run_engine(workflow, RunState(places.target, **state), inputs)


async def _run_engine(workflow: Workflow, run: RunState, inputs: dict[str, Any]) -> WorkflowResult:
    engine = _Engine(workflow, run, inputs=inputs)
    if run.journal is not None:
        run.journal.put_definition(engine.fingerprints)
    escalations = _escalations(run.target)
    for escalation in escalations:
        escalation.owners.append(run.owner)
    run.start = run.events.start = trio.current_time()
    try:
        top = await engine.run_all()
    finally:
        for escalation in escalations:
            escalation.owners.remove(run.owner)
    steps = {**top, **run.children}
    statuses = {s.status for s in steps.values()}
    pending = tuple(sorted(run.interrupts.pending.values(), key=lambda i: i.id))
    status: Any = (
        "failed" if "failed" in statuses
        else "cancelled" if "cancelled" in statuses
        else "interrupted" if pending or "interrupted" in statuses
        else "ok"
    )
    result = WorkflowResult(
        name=workflow.name,
        status=status,
        steps=steps,
        edges=engine.edges(),
        duration_s=trio.current_time() - run.start,
        failure_policy=run.failure,
        first_failure=run.first_failure,
        pending=pending,
    )
    if run.journal is not None:
        final = result.to_json()
        final.pop("steps")
        final["paths"] = list(steps)
        run.journal.put_final(final)
    return result


async def run_workflow(
    workflow: Workflow,
    target: Runtime | RuntimePool | WorkflowOptions | None = None,
    options: WorkflowOptions | None = None,
    **keywords: Any,
) -> WorkflowResult:
    """Run ``workflow`` on a runtime or pool (``target``), or on runtimes it opens from
    ``options.spec``: ``run_workflow(workflow, WorkflowOptions(...))``, or
    ``run_workflow(workflow, runtime, WorkflowOptions(...))``. The options' fields as keywords
    (``run_workflow(workflow, concurrency=2)``) still work, deprecated (DeprecationWarning).

    With no ``target`` it opens one runtime from ``spec`` (the simulator process when None),
    or a pool of ``runtimes`` (``spec`` required), with ``approvals`` (a policy), ``answerer``
    and ``audit`` applied to every session, and ``approval_relay`` (``auto``, ``on``, ``off``;
    None: the spec's, ``auto`` by default; see docs/approvals.md); close them on return. With a ``target`` those
    belong to the runtime or pool already (``open_runtime``/``open_pool`` take them).

    ``concurrency`` bounds sessions in flight in the workflow; ``runtime_limit`` per runtime;
    ``Step.concurrency`` per step. ``failure``: "fail-fast" cancels the rest at the first
    failure; "collect" finishes what can finish. A failed step's dependents are skipped.

    ``checkpoint``: a file that journals the run as its work completes (created; it must not
    exist unless ``resume=True``, which continues it: completed, unchanged steps and items
    are reused, the rest runs). ``answers``: the answers to interrupts, a mapping of interrupt
    id to answer or a callable asked for each (returning None leaves it pending).

    Raises:
        WorkflowDefinitionError: the graph is malformed (before anything runs).
        CheckpointError: the checkpoint cannot be created or resumed (``.parameter`` names
            the argument to fix).
        ValueError: contradictory arguments.
        RuntimeStartError: the runtime it opened did not start.

    Cancellation: every step is cancelled (their sessions are abandoned); a runtime or pool
    it opened is closed (no process is left). Nothing is returned; what completed before is
    in the checkpoint.
    """
    where, chosen = resolve("run_workflow", target, options, keywords)
    _check_options(workflow, chosen)
    return await _execute(workflow, where, chosen, EventHub())


class WorkflowRun:
    """A running workflow (from ``open_workflow``): ``events()`` and ``await result()``."""

    def __init__(self, hub: EventHub) -> None:
        self._hub = hub
        self._done = trio.Event()
        self._result: WorkflowResult | None = None
        self._error: BaseException | None = None
        self._taken = False

    def events(self, *, capacity: int = DEFAULT_EVENTS) -> EventChannel:
        """A bounded channel of this run's events from now on (``async for event in ...``); it
        ends when the run ends. Call it before the first ``await`` in the block to see them
        all. A reader that falls ``capacity`` behind gets SubscriberOverflowError."""
        return self._hub.subscribe(capacity)

    @property
    def done(self) -> bool:
        """True once the run ended."""
        return self._done.is_set()

    async def result(self) -> WorkflowResult:
        """Wait for the run to end and return its result (or raise what it raised)."""
        await self._done.wait()
        self._taken = True
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def _drive(self, workflow: Workflow, target: Any, options: WorkflowOptions) -> None:
        try:
            self._result = await _execute(workflow, target, options, self._hub)
        except Exception as exc:  # noqa: BLE001 (handed to result())
            self._error = exc
        finally:
            self._hub.end()
            self._done.set()


@asynccontextmanager
async def open_workflow(
    workflow: Workflow,
    target: Runtime | RuntimePool | WorkflowOptions | None = None,
    options: WorkflowOptions | None = None,
    *,
    turn_events: bool = False,
    **keywords: Any,
) -> AsyncIterator[WorkflowRun]:
    """Start ``workflow`` (the arguments of ``run_workflow``) and yield its WorkflowRun.

    ``turn_events=True`` adds the sessions' notifications as ``turn`` events. Leaving the
    block waits for the run to end; an exception in the block cancels it. An error of the
    run is raised by ``result()`` (or on leaving the block, if nobody asked).

    Raises:
        WorkflowDefinitionError, ValueError: as run_workflow, before anything starts.
    """
    where, chosen = resolve("open_workflow", target, options, keywords)
    _check_options(workflow, chosen)
    run = WorkflowRun(EventHub(turn_events=turn_events))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run._drive, workflow, where, chosen)
        yield run
        await run._done.wait()
    if run._error is not None and not run._taken:
        raise run._error


@attrs.frozen(kw_only=True)
class CheckpointChanges:
    """How a workflow differs from the run in a checkpoint, step by step path.

    ``changed``: steps whose definition changed (they run again, and so do their dependents);
    ``added``: steps the checkpoint has no record of; ``removed``: records of steps the
    workflow no longer has (ignored); ``reusable``: completed steps that will be reused
    unless something they depend on runs again.
    """

    changed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    reusable: tuple[str, ...] = ()
    pending: tuple[Interrupt, ...] = ()


def checkpoint_changes(workflow: Workflow, checkpoint: str | os.PathLike[str], *, inputs: dict[str, Any] | None = None) -> CheckpointChanges:
    """Compare ``workflow`` with the run recorded in ``checkpoint`` (nothing runs, nothing is written).

    Raises:
        CheckpointError: no such checkpoint, another workflow's, or other inputs.
    """
    workflow.validate()
    journal = Journal.open(checkpoint, workflow=workflow.name, inputs_digest=digest(dict(inputs or {})), resume=True)
    try:
        recorded: dict[str, str] = dict(journal.definition)
        recorded.update((path, row.fingerprint) for path, row in journal.steps.items())
        for path, rows in journal.items.items():
            recorded.setdefault(path, next(iter(rows.values()))[0])
        ok = {path for path, row in journal.steps.items() if row.status == "ok"}
        pending = tuple(Interrupt(id=i, question=q, choices=c) for i, q, c in journal.pending())
    finally:
        journal.close()
    current: dict[str, str] = {}

    def walk(wf: Workflow, prefix: str) -> None:
        for name, step in wf.steps.items():
            current[prefix + name] = fingerprint(wf, name)
            if step.subworkflow is not None:
                for path in recorded:  # the runs of the subworkflow the checkpoint knows
                    head = prefix + name
                    if path.startswith((f"{head}/", f"{head}[")):
                        item_prefix = path[: path.index("/", len(head)) + 1]
                        if item_prefix not in seen:
                            seen.add(item_prefix)
                            walk(step.subworkflow, item_prefix)

    seen: set[str] = set()
    walk(workflow, "")
    changed = tuple(p for p in current if p in recorded and recorded[p] != current[p])
    return CheckpointChanges(
        changed=changed,
        added=tuple(p for p in current if p not in recorded),
        removed=tuple(p for p in recorded if p not in current),
        reusable=tuple(p for p in current if p in ok and recorded.get(p) == current[p]),
        pending=pending,
    )

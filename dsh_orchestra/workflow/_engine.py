"""run_workflow: every step in one nursery, limits that bound, retries, timeouts, fail-fast/collect.

Owns: scheduling steps as their dependencies settle, fan-out and ordered joins, routes,
sessions (fresh or named), typed outputs with re-prompting, the WorkflowResult.
Must not know about datasets or the CLI.
"""

from __future__ import annotations

import logging
import os
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, nullcontext
from typing import Any, AsyncIterator, Literal, Sequence

import attrs
import trio

from .._tracing import STEP_SPAN, observed
from ..approvals import AuditLog
from ..pool import PoolClosedError, RuntimePool, open_pool
from ..protocol import JsonRpcResponseError, OrchestraError, SdkProtocolError, TransportClosedError
from ..runtime import RuntimeSpec
from ..session import Runtime, Session, TurnResult, open_runtime
from ._graph import Step, Workflow
from ._output import OutputParseError, parse_output, repair_prompt
from ._result import ApprovalNote, ItemResult, StepError, StepFailedError as StepFailedError, StepResult, WorkflowResult

log = logging.getLogger("dsh_orchestra.workflow")

FailurePolicy = Literal["fail-fast", "collect"]
OK_FINISH = frozenset({"completed", "max-tokens"})
MAX_BACKOFF = 30.0
"""Seconds: the longest pause between two attempts, however many retries a step allows."""


class TurnFailedError(OrchestraError):
    """The model turn ended in error (finish reason ``error`` or another non-completion)."""


class SessionLostError(OrchestraError):
    """A named session cannot be used again: its runtime went away or a cancelled run abandoned it."""


def retryable(exc: BaseException) -> bool:
    """Runtime lost or timed out: retry; protocol rejections, model errors, the user's errors: do not.

    A group is retryable when every error in it is.
    """
    if isinstance(exc, BaseExceptionGroup):
        return all(retryable(e) for e in exc.exceptions)
    if isinstance(exc, (JsonRpcResponseError, SdkProtocolError, PoolClosedError)):
        return False
    return isinstance(exc, (TransportClosedError, trio.TooSlowError))


@attrs.define
class Statistics:
    """Live counters of a run (pass one to ``run_workflow`` to watch limits bound).

    ``in_flight``/``max_in_flight``: sessions holding a concurrency slot now / at most.
    ``prompts``: prompts sent (re-prompts included); ``reprompts``: repair prompts;
    ``retries``: attempts after a retryable failure.
    """

    in_flight: int = 0
    max_in_flight: int = 0
    prompts: int = 0
    reprompts: int = 0
    retries: int = 0


class StepContext:
    """What a function step receives.

    Attributes:
        step: the step's name.
        inputs: each dependency's output (route sources included), by step name.
        results: each dependency's StepResult (items, subagents, typed subagent outputs).
        workflow_inputs: the ``inputs`` given to run_workflow.
        item, index: the fan-out item and its position (None without fan-out).
        attempt: 1 for the first attempt, 2 for the first retry, ...
        turns: every TurnResult this attempt's prompts produced, in order.
        reprompts: how many of them were repair prompts for a typed output.
    """

    def __init__(
        self, engine: _Engine, step: Step, inputs: dict[str, Any], item: Any, index: int | None, attempt: int
    ) -> None:
        self._engine = engine
        self._step = step
        self.step = step.name
        self.inputs = inputs
        self.results = {name: engine.results[name] for name in inputs}
        self.workflow_inputs = engine.inputs
        self.item = item
        self.index = index
        self.attempt = attempt
        self.turns: list[TurnResult] = []
        self.reprompts = 0

    async def prompt(self, text: str, *, output: type | None = None, session: str | None = None) -> Any:
        """Run ``text`` in a session (a fresh one, or the named one) within the workflow's limits.

        Returns the parsed ``output`` when given (re-prompting up to the step's
        ``parse_attempts``), else the final response text. The turns are in ``turns``.

        Raises:
            TurnFailedError: the turn ended in error. OutputParseError: still unparsable.
            TransportClosedError: the runtime went away (the step may retry).
        """
        return await self._engine.prompt_once(
            self.step, text, output=output, session_name=session, parse_attempts=self._step.parse_attempts,
            timeout=None, record=self,
        )


class _Engine:
    def __init__(
        self,
        workflow: Workflow,
        target: Runtime | RuntimePool,
        *,
        concurrency: int | None,
        runtime_limit: int | None,
        failure: FailurePolicy,
        inputs: dict[str, Any],
        stats: Statistics,
    ) -> None:
        self.workflow = workflow
        self.order = workflow.validate()
        self.target = target
        self.failure = failure
        self.inputs = inputs
        self.stats = stats
        self.limit = trio.CapacityLimiter(concurrency) if concurrency else None
        self.step_limits = {n: trio.CapacityLimiter(s.concurrency) for n, s in workflow.steps.items() if s.concurrency}
        self.runtime_limit = runtime_limit
        self.runtime_limits: dict[int, trio.CapacityLimiter] = {}
        self.named: dict[str, tuple[Runtime, Session]] = {}
        self.named_locks: dict[str, trio.Lock] = {}
        self.results: dict[str, StepResult] = {}
        self.started: dict[str, float] = {}
        self.done = {name: trio.Event() for name in workflow.steps}
        self.chosen: dict[str, set[str]] = {}
        self.start = 0.0
        self.first_failure: str | None = None
        self.cancel_all: trio.CancelScope | None = None

    # ---- sessions and prompts ----------------------------------------------------------

    @asynccontextmanager
    async def _lease(self, step: str, pinned: Runtime | None) -> AsyncIterator[Runtime]:
        """A slot under every limit (workflow, step, runtime) on a runtime, for one session's work."""
        async with AsyncExitStack() as stack:
            if self.limit is not None:
                await stack.enter_async_context(self.limit)
            if step in self.step_limits:
                await stack.enter_async_context(self.step_limits[step])
            if isinstance(self.target, RuntimePool):
                runtime = await stack.enter_async_context(self.target.lease(pinned))
            else:
                runtime = self.target
            if self.runtime_limit:
                limiter = self.runtime_limits.setdefault(id(runtime), trio.CapacityLimiter(self.runtime_limit))
                await stack.enter_async_context(limiter)
            self.stats.in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
            try:
                yield runtime
            finally:
                self.stats.in_flight -= 1

    def _named_session(self, name: str) -> tuple[Runtime, Session] | None:
        held = self.named.get(name)
        if held is None:
            return None
        runtime, session = held
        if not runtime.alive or session.abandoned:
            why = "its runtime went away" if not runtime.alive else "a cancelled run abandoned it"
            raise SessionLostError(f"named session {name!r} ({session.id}) cannot be used again: {why}")
        return held

    async def prompt_once(
        self,
        step: str,
        text: str,
        *,
        output: type | None,
        session_name: str | None,
        parse_attempts: int,
        timeout: float | None,
        record: StepContext,
    ) -> Any:
        """One prompt (plus re-prompts for a typed output) in one session; turns go to ``record``.

        ``timeout`` starts once every limit let the prompt through.
        """
        lock = self.named_locks.setdefault(session_name, trio.Lock()) if session_name else None
        async with lock if lock is not None else nullcontext():
            held = self._named_session(session_name) if session_name else None
            async with self._lease(step, held[0] if held else None) as runtime:
                if session_name and held is None:
                    held = self.named[session_name] = (runtime, runtime.session(f"wf-{session_name}-{id(self):x}"))
                session = held[1] if held is not None else runtime.session()
                with trio.fail_after(timeout) if timeout else nullcontext():
                    turn = await self._run(session, text, record)
                    if output is None:
                        return turn.final_response
                    for attempt in range(parse_attempts + 1):
                        try:
                            return parse_output(turn.final_response, output)
                        except OutputParseError as exc:
                            if attempt == parse_attempts:
                                raise
                            log.info("step %r: re-prompting session %s to fix its output: %s", step, session.id, exc)
                            self.stats.reprompts += 1
                            record.reprompts += 1
                            turn = await self._run(session, repair_prompt(exc, output), record)
        raise AssertionError("unreachable")

    async def _run(self, session: Session, text: str, record: StepContext) -> TurnResult:
        self.stats.prompts += 1
        turn = await session.run(text)
        record.turns.append(turn)
        _check_turn(turn)
        return turn

    # ---- one item ----------------------------------------------------------------------

    async def run_item(self, step: Step, inputs: dict[str, Any], item: Any, index: int | None) -> ItemResult:
        started = trio.current_time()
        attempts = 0
        while True:
            attempts += 1
            ctx = StepContext(self, step, inputs, item, index, attempts)
            try:
                if step.prompts:
                    values = {**self.inputs, **inputs, "item": item, "index": index, "attempt": attempts}
                    text = step.render(values)
                    output = await self.prompt_once(
                        step.name, text, output=step.output, session_name=step.session,
                        parse_attempts=step.parse_attempts, timeout=step.timeout, record=ctx,
                    )
                else:
                    assert step.fn is not None
                    with trio.fail_after(step.timeout) if step.timeout else nullcontext():
                        output = await step.fn(ctx)
                typed = self._subagent_outputs(step, ctx.turns)
                return self._item(step, "ok", index, ctx, attempts, started, output=output, typed=typed)
            except Exception as exc:  # noqa: BLE001 (recorded on the result; retried when retryable)
                if retryable(exc) and attempts <= step.retries:
                    delay = min(step.backoff * 2 ** (attempts - 1), MAX_BACKOFF)
                    log.info("step %r item %s: attempt %d failed (%r); retrying in %g s", step.name, index, attempts, exc, delay)
                    self.stats.retries += 1
                    await trio.sleep(delay)
                    continue
                if isinstance(exc, trio.TooSlowError):
                    what = "the prompt of step" if step.prompts else "step"
                    exc = TimeoutError(f"{what} {step.name!r} did not finish within {step.timeout:g} s")
                return self._item(step, "failed", index, ctx, attempts, started, error=StepError.of(exc))

    def _subagent_outputs(self, step: Step, turns: list[TurnResult]) -> tuple[Any, ...]:
        if step.subagent_output is None:
            return ()
        typed: list[Any] = []
        for subagent in (s for t in turns for s in t.subagents):
            try:
                typed.append(parse_output(subagent.text, step.subagent_output))
            except OutputParseError as exc:
                raise OutputParseError(
                    exc.type_name, f"subagent {subagent.child_session_id} ({subagent.status}): {exc.problem}"
                ) from exc
        return tuple(typed)

    def _item(
        self, step: Step, status: Any, index: int | None, ctx: StepContext, attempts: int, started: float,
        *, output: Any = None, typed: tuple[Any, ...] = (), error: StepError | None = None,
    ) -> ItemResult:
        turns = ctx.turns
        last = turns[-1] if turns else None
        approvals = tuple(
            ApprovalNote(session_id=d.session_id, tool_name=d.tool_name, call_id=d.call_id, outcome=d.outcome, rule=d.rule)
            for t in turns for d in t.approvals
        )
        return ItemResult(
            index=index, status=status, output=output, attempts=attempts, reprompts=ctx.reprompts,
            session_id=last.session_id if last else None,
            final_response=last.final_response if last else None,
            finish_reason=last.finish_reason if last else None,
            subagents=tuple(s for t in turns for s in t.subagents), subagent_outputs=typed,
            approvals=approvals, error=error,
            started_s=started - self.start, duration_s=trio.current_time() - started,
        )

    # ---- one step ----------------------------------------------------------------------

    @observed(STEP_SPAN, lambda self, step: {"workflow": self.workflow.name, "step": step.name})
    async def run_step(self, step: Step) -> None:
        try:
            deps = self.workflow.dependencies(step.name)
            for dep in deps:
                await self.done[dep].wait()
            blocked = self._blocked(step, deps)
            if blocked is not None:
                self.results[step.name] = StepResult(name=step.name, status="skipped", reason=blocked)
                return
            inputs = {dep: self.results[dep].output for dep in deps}
            started = self.started[step.name] = trio.current_time()
            if step.fan_out is None:
                items = [await self.run_item(step, inputs, None, None)]
            else:
                source = self.results[step.fan_out].output
                if not isinstance(source, (list, tuple)):
                    error = StepError(
                        type="TypeError",
                        message=f"fan-out source {step.fan_out!r} returned {type(source).__name__}, not a list",
                    )
                    self.results[step.name] = StepResult(
                        name=step.name, status="failed", errors=(error,), started_s=started - self.start,
                        reason="its fan-out source is not a list",
                    )
                    self._failed(step.name)
                    return
                items = await self._fan_out(step, inputs, list(source))
            self.results[step.name] = self._step_result(step, items, started)
            if self.results[step.name].status == "failed":
                self._failed(step.name)
            elif step.name in self.workflow.routes:
                self._route(step.name)
        finally:
            if step.name not in self.results:
                begun = self.started.get(step.name)
                self.results[step.name] = StepResult(
                    name=step.name, status="cancelled", reason=self._cancel_reason(),
                    started_s=None if begun is None else begun - self.start,
                    duration_s=0.0 if begun is None else trio.current_time() - begun,
                )
            self.done[step.name].set()

    def _cancel_reason(self) -> str:
        if self.first_failure is not None:
            return f"cancelled after step {self.first_failure!r} failed (fail-fast)"
        return "the workflow was cancelled"

    async def _fan_out(self, step: Step, inputs: dict[str, Any], items: list[Any]) -> list[ItemResult]:
        results: list[ItemResult | None] = [None] * len(items)

        async def one(index: int, item: Any, scope: trio.CancelScope) -> None:
            result = await self.run_item(step, inputs, item, index)
            results[index] = result
            if result.status == "failed" and self.failure == "fail-fast":
                scope.cancel(reason=f"item {index} of step {step.name!r} failed")

        async with trio.open_nursery() as nursery:
            for index, item in enumerate(items):
                nursery.start_soon(one, index, item, nursery.cancel_scope)
        return [
            r if r is not None else ItemResult(index=i, status="cancelled", error=None)
            for i, r in enumerate(results)
        ]

    def _step_result(self, step: Step, items: list[ItemResult], started: float) -> StepResult:
        failed = [i for i in items if i.status == "failed"]
        cancelled = [i for i in items if i.status == "cancelled"]
        status: Any = "failed" if failed else ("cancelled" if cancelled else "ok")
        output = items[0].output if step.fan_out is None else [i.output for i in items]
        reason = None
        if failed:
            reason = f"{len(failed)} of {len(items)} run(s) failed"
            if cancelled:
                reason += f", {len(cancelled)} cancelled (fail-fast)"
        return StepResult(
            name=step.name,
            status=status,
            output=output if status == "ok" else None,
            attempts=max((i.attempts for i in items), default=0),
            started_s=started - self.start,
            duration_s=trio.current_time() - started,
            items=tuple(items),
            approvals=tuple(a for i in items for a in i.approvals),
            subagents=tuple(s for i in items for s in i.subagents),
            subagent_outputs=tuple(o for i in items for o in i.subagent_outputs),
            errors=tuple(i.error for i in failed if i.error is not None),
            reason=reason,
        )

    def _blocked(self, step: Step, deps: Sequence[str]) -> str | None:
        for dep in deps:
            result = self.results[dep]
            if result.status != "ok":
                return f"dependency {dep!r} {result.status}"
        for source, route in self.workflow.routes.items():
            if step.name in route.targets and step.name not in self.chosen.get(source, set()):
                return f"not chosen by the route from {source!r}"
        return None

    def _route(self, source: str) -> None:
        route = self.workflow.routes[source]
        try:
            chosen = route.choose(self.results[source].output)
            names = {chosen} if isinstance(chosen, str) else set(chosen or ())
            unknown = names - set(route.targets)
            if unknown:
                raise ValueError(f"route from {source!r} chose {sorted(unknown)}, not among its targets {list(route.targets)}")
        except Exception as exc:  # noqa: BLE001 (the source step is marked failed)
            self.results[source] = attrs.evolve(
                self.results[source], status="failed", output=None, errors=(StepError.of(exc),), reason="its route failed"
            )
            self._failed(source)
            names = set()
        self.chosen[source] = names

    def _failed(self, step: str) -> None:
        if self.first_failure is None:
            self.first_failure = step
        if self.failure == "fail-fast" and self.cancel_all is not None:
            self.cancel_all.cancel(reason=f"step {step!r} failed (fail-fast)")

    def settle(self) -> dict[str, StepResult]:
        """Every step's final result: a step cancelled before it began, while one of its
        dependencies failed or was skipped, is reported skipped (it never could have run)."""
        for name in self.order:
            result = self.results[name]
            if result.status != "cancelled" or result.started_s is not None:
                continue
            for dep in self.workflow.dependencies(name):
                status = self.results[dep].status
                if status in ("failed", "skipped"):
                    self.results[name] = StepResult(name=name, status="skipped", reason=f"dependency {dep!r} {status}")
                    break
        return {name: self.results[name] for name in self.workflow.steps}

    def edges(self) -> tuple[tuple[str, str, str], ...]:
        out = []
        for name, step in self.workflow.steps.items():
            for dep in step.depends_on:
                out.append((dep, name, "fan-out" if dep == step.fan_out else "dep"))
        for source, route in self.workflow.routes.items():
            for target in route.targets:
                out.append((source, target, "route"))
        return tuple(out)


def _check_turn(turn: TurnResult) -> None:
    if turn.finish_reason not in OK_FINISH:
        detail = f"{turn.error.code}: {turn.error.message}" if turn.error is not None else f"finish reason {turn.finish_reason!r}"
        raise TurnFailedError(f"the turn in session {turn.session_id!r} ended in error ({detail})")


async def run_workflow(
    workflow: Workflow,
    target: Runtime | RuntimePool | None = None,
    *,
    spec: RuntimeSpec | None = None,
    runtimes: int = 1,
    approvals: Any = None,
    answerer: Any = None,
    audit: AuditLog | str | os.PathLike[str] | None = None,
    inputs: dict[str, Any] | None = None,
    concurrency: int | None = None,
    runtime_limit: int | None = None,
    failure: FailurePolicy = "fail-fast",
    statistics: Statistics | None = None,
) -> WorkflowResult:
    """Run ``workflow`` on a runtime or pool, or on runtimes it opens from ``spec``.

    With no ``target`` it opens one runtime from ``spec`` (the simulator process when None),
    or a pool of ``runtimes`` (``spec`` required), with ``approvals`` (a policy), ``answerer``
    and ``audit`` applied to every session; close them on return. With a ``target`` those
    belong to the runtime or pool already (``open_runtime``/``open_pool`` take them).

    ``concurrency`` bounds sessions in flight in the workflow; ``runtime_limit`` per runtime;
    ``Step.concurrency`` per step. ``failure``: "fail-fast" cancels the rest at the first
    failure; "collect" finishes what can finish. A failed step's dependents are skipped.

    Raises:
        WorkflowDefinitionError: the graph is malformed (before anything runs).
        ValueError: contradictory arguments.
        RuntimeStartError: the runtime it opened did not start.

    Cancellation: every step is cancelled (their sessions are abandoned); a runtime or pool
    it opened is closed (no process is left). Nothing is returned.
    """
    workflow.validate()
    if failure not in ("fail-fast", "collect"):
        raise ValueError(f"failure must be 'fail-fast' or 'collect', not {failure!r}")
    for name, value in (("concurrency", concurrency), ("runtime_limit", runtime_limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an integer >= 1 or None, not {value!r}")
    if isinstance(runtimes, bool) or not isinstance(runtimes, int) or runtimes < 1:
        raise ValueError(f"runtimes must be an integer >= 1, not {runtimes!r}")
    options: dict[str, Any] = dict(
        inputs=inputs, concurrency=concurrency, runtime_limit=runtime_limit, failure=failure, statistics=statistics
    )
    if target is None:
        if runtimes == 1:
            async with open_runtime(spec, approvals=approvals, answerer=answerer, audit=audit) as runtime:
                return await run_workflow(workflow, runtime, **options)
        if spec is None:
            raise ValueError(f"runtimes={runtimes} needs a spec to start them from")
        with ExitStack() as stack:
            log_: AuditLog | None = None
            if audit is not None:
                log_ = audit if isinstance(audit, AuditLog) else stack.enter_context(AuditLog(audit, secrets=spec.secrets()))
            async with open_pool(spec, runtimes, approvals=approvals, answerer=answerer, audit=log_) as pool:
                return await run_workflow(workflow, pool, **options)
    given = [n for n, v in (("spec", spec), ("approvals", approvals), ("answerer", answerer), ("audit", audit)) if v is not None]
    if given or runtimes != 1:
        raise ValueError(
            f"{', '.join(given) or 'runtimes'} only apply when run_workflow opens the runtimes itself; "
            "pass them to open_runtime/open_pool instead, or drop the target"
        )
    engine = _Engine(
        workflow, target, concurrency=concurrency, runtime_limit=runtime_limit, failure=failure,
        inputs=dict(inputs or {}), stats=statistics if statistics is not None else Statistics(),
    )
    engine.start = trio.current_time()
    with trio.CancelScope() as scope:
        engine.cancel_all = scope
        async with trio.open_nursery() as nursery:
            for step in workflow.steps.values():
                nursery.start_soon(engine.run_step, step)
    steps = engine.settle()
    statuses = {s.status for s in steps.values()}
    status: Any = "failed" if "failed" in statuses else "cancelled" if "cancelled" in statuses else "ok"
    return WorkflowResult(
        name=workflow.name,
        status=status,
        steps=steps,
        edges=engine.edges(),
        duration_s=trio.current_time() - engine.start,
        failure_policy=failure,
        first_failure=engine.first_failure,
    )

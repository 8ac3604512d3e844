"""run_workflow: every step in one nursery, limits that bound, retries, timeouts, fail-fast/collect.

Owns: scheduling steps as their dependencies settle, fan-out and ordered joins, routes,
sessions (fresh or named), typed outputs with re-prompting, the WorkflowResult.
Must not know about datasets or the CLI.
"""

from __future__ import annotations

import logging
import math
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, AsyncIterator, Literal, Sequence

import attrs
import trio

from ..pool import RuntimePool
from ..protocol import JsonRpcResponseError, OrchestraError, SdkProtocolError, TransportClosedError
from ..runtime import RuntimeSpec
from ..session import Runtime, Session, TurnResult, open_runtime
from ._graph import Step, Workflow
from ._output import OutputParseError, parse_output, repair_prompt
from ._result import ApprovalNote, ItemResult, StepError, StepResult, WorkflowResult

log = logging.getLogger("dsh_orchestra.workflow")

FailurePolicy = Literal["fail-fast", "collect"]
OK_FINISH = frozenset({"completed", "max-tokens"})


class StepFailedError(OrchestraError):
    """A step failed; ``errors`` holds every error of its items."""

    def __init__(self, step: str, errors: Sequence[StepError]) -> None:
        first = errors[0] if errors else StepError(type="Error", message="unknown")
        super().__init__(f"step {step!r} failed: {first.type}: {first.message}")
        self.step = step
        self.errors = tuple(errors)


class TurnFailedError(OrchestraError):
    """The model turn ended in error (finish reason ``error`` or another non-completion)."""


def retryable(exc: BaseException) -> bool:
    """Runtime lost or timed out: retry; protocol rejections and the user's errors: do not."""
    if isinstance(exc, (JsonRpcResponseError, SdkProtocolError)):
        return False
    return isinstance(exc, (TransportClosedError, trio.TooSlowError))


@attrs.define
class Statistics:
    """Prompts in flight now and at most (for checking that limits bound)."""

    in_flight: int = 0
    max_in_flight: int = 0
    prompts: int = 0


class StepContext:
    """What a function step receives: its inputs, its fan-out item, and a way to prompt."""

    def __init__(self, engine: _Engine, step: Step, inputs: dict[str, Any], item: Any, index: int | None, attempt: int) -> None:
        self._engine = engine
        self.step = step.name
        self.inputs = inputs
        self.item = item
        self.index = index
        self.attempt = attempt
        self.turns: list[TurnResult] = []

    async def prompt(self, text: str, *, output: type | None = None, session: str | None = None) -> Any:
        """Run ``text`` in a session (a fresh one, or the named one) within the workflow's limits.

        Returns the parsed ``output`` when given, else the TurnResult.
        """
        turn, parsed = await self._engine.prompt_once(self.step, text, output=output, session_name=session, parse_attempts=2)
        self.turns.append(turn)
        return parsed if output is not None else turn


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
    ) -> None:
        self.workflow = workflow
        self.target = target
        self.failure = failure
        self.inputs = inputs
        self.stats = Statistics()
        self.limit = trio.CapacityLimiter(concurrency if concurrency else math.inf)
        self.step_limits = {n: trio.CapacityLimiter(s.concurrency) for n, s in workflow.steps.items() if s.concurrency}
        self.runtime_limit = runtime_limit
        self.runtime_limits: dict[int, trio.CapacityLimiter] = {}
        self.named: dict[str, tuple[Runtime, Session]] = {}
        self.named_locks: dict[str, trio.Lock] = {}
        self.results: dict[str, StepResult] = {}
        self.done = {name: trio.Event() for name in workflow.steps}
        self.chosen: dict[str, set[str]] = {}
        self.start = 0.0
        self.cancel_all: trio.CancelScope | None = None

    # ---- sessions and prompts ----------------------------------------------------------

    @asynccontextmanager
    async def _lease(self, step: str, pinned: Runtime | None) -> AsyncIterator[Runtime]:
        async with AsyncExitStack() as stack:
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
            self.stats.prompts += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
            try:
                yield runtime
            finally:
                self.stats.in_flight -= 1

    async def prompt_once(
        self, step: str, text: str, *, output: type | None, session_name: str | None, parse_attempts: int
    ) -> tuple[TurnResult, Any]:
        """One prompt (plus re-prompts for a typed output) in one session."""
        lock = self.named_locks.setdefault(session_name, trio.Lock()) if session_name else None
        async with lock if lock is not None else _nothing():
            pinned = self.named[session_name][0] if session_name and session_name in self.named else None
            async with self._lease(step, pinned) as runtime:
                if session_name:
                    if session_name not in self.named:
                        self.named[session_name] = (runtime, runtime.session(f"wf-{session_name}-{id(self):x}"))
                    session = self.named[session_name][1]
                else:
                    session = runtime.session()
                turn = await session.run(text)
                _check_turn(turn)
                if output is None:
                    return turn, turn.final_response
                for attempt in range(parse_attempts + 1):
                    try:
                        return turn, parse_output(turn.final_response, output)
                    except OutputParseError as exc:
                        if attempt == parse_attempts:
                            raise
                        log.info("step %r: re-prompting session %s to fix its output: %s", step, session.id, exc)
                        turn = await session.run(repair_prompt(exc, output))
                        _check_turn(turn)
        raise AssertionError("unreachable")

    # ---- one item ----------------------------------------------------------------------

    async def run_item(self, step: Step, inputs: dict[str, Any], item: Any, index: int | None) -> ItemResult:
        started = trio.current_time()
        attempts = 0
        while True:
            attempts += 1
            ctx = StepContext(self, step, inputs, item, index, attempts)
            turn: TurnResult | None = None
            try:
                with trio.fail_after(step.timeout) if step.timeout else _no_scope():
                    if step.prompts:
                        values = {**self.inputs, **inputs, "item": item, "index": index}
                        text = step.render(values)
                        turn, output = await self.prompt_once(
                            step.name, text, output=step.output, session_name=step.session, parse_attempts=step.parse_attempts
                        )
                    else:
                        assert step.fn is not None
                        output = await step.fn(ctx)
                        turn = ctx.turns[-1] if ctx.turns else None
                return self._item_ok(step, index, output, attempts, turn, ctx, trio.current_time() - started)
            except Exception as exc:  # noqa: BLE001 (recorded on the result; retried when retryable)
                if retryable(exc) and attempts <= step.retries:
                    log.info("step %r item %s: retrying after %r", step.name, index, exc)
                    await trio.sleep(step.backoff * 2 ** (attempts - 1))
                    continue
                if isinstance(exc, trio.TooSlowError):
                    exc = TimeoutError(f"step {step.name!r} did not finish within {step.timeout:g} s")
                return ItemResult(
                    index=index, status="failed", attempts=attempts, error=StepError.of(exc),
                    duration_s=trio.current_time() - started,
                )

    def _item_ok(self, step: Step, index: int | None, output: Any, attempts: int, turn: TurnResult | None, ctx: StepContext, duration: float) -> ItemResult:
        turns = ctx.turns if ctx.turns else ([turn] if turn is not None else [])
        subagents = tuple(s for t in turns for s in t.subagents)
        approvals = tuple(
            ApprovalNote(session_id=d.session_id, tool_name=d.tool_name, call_id=d.call_id, outcome=d.outcome, rule=d.rule)
            for t in turns for d in t.approvals
        )
        typed: tuple[Any, ...] = ()
        if step.subagent_output is not None:
            typed = tuple(parse_output(s.text, step.subagent_output) for s in subagents)
        return ItemResult(
            index=index, status="ok", output=output, attempts=attempts,
            session_id=turn.session_id if turn else None,
            final_response=turn.final_response if turn else None,
            finish_reason=turn.finish_reason if turn else None,
            subagents=subagents, subagent_outputs=typed, approvals=approvals, duration_s=duration,
        )

    # ---- one step ----------------------------------------------------------------------

    async def run_step(self, step: Step) -> None:
        try:
            deps = self.workflow.dependencies(step.name)
            for dep in deps:
                await self.done[dep].wait()
            blocked = self._blocked(step, deps)
            if blocked is not None:
                self.results[step.name] = StepResult(name=step.name, status="skipped", reason=blocked)
                return
            inputs = {dep: self.results[dep].output for dep in step.depends_on}
            started = trio.current_time()
            if step.fan_out is None:
                items = [await self.run_item(step, inputs, None, None)]
            else:
                source = self.results[step.fan_out].output
                if not isinstance(source, (list, tuple)):
                    error = StepError(type="TypeError", message=f"fan-out source {step.fan_out!r} returned {type(source).__name__}, not a list")
                    self.results[step.name] = StepResult(name=step.name, status="failed", errors=(error,), started_s=started - self.start)
                    self._failed()
                    return
                items = await self._fan_out(step, inputs, list(source))
            self.results[step.name] = self._step_result(step, items, started)
            if self.results[step.name].status == "failed":
                self._failed()
            elif step.name in self.workflow.routes:
                self._route(step.name)
        finally:
            if step.name not in self.results:
                self.results[step.name] = StepResult(name=step.name, status="cancelled", reason="the workflow was cancelled")
            self.done[step.name].set()

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
        return [r if r is not None else ItemResult(index=i, status="cancelled") for i, r in enumerate(results)]

    def _step_result(self, step: Step, items: list[ItemResult], started: float) -> StepResult:
        failed = [i for i in items if i.status == "failed"]
        status: Any = "failed" if failed else ("cancelled" if any(i.status == "cancelled" for i in items) else "ok")
        output = items[0].output if step.fan_out is None else [i.output for i in items]
        return StepResult(
            name=step.name,
            status=status,
            output=output if status == "ok" else None,
            attempts=max((i.attempts for i in items), default=0),
            started_s=started - self.start,
            duration_s=trio.current_time() - started,
            items=tuple(items) if step.fan_out is not None else (),
            approvals=tuple(a for i in items for a in i.approvals),
            subagents=tuple(s for i in items for s in i.subagents),
            errors=tuple(i.error for i in failed if i.error is not None),
            reason=None if not failed else f"{len(failed)} of {len(items)} run(s) failed",
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
            self.results[source] = attrs.evolve(self.results[source], status="failed", output=None, errors=(StepError.of(exc),), reason="its route failed")
            self._failed()
            names = set()
        self.chosen[source] = names

    def _failed(self) -> None:
        if self.failure == "fail-fast" and self.cancel_all is not None:
            self.cancel_all.cancel(reason="a step failed (fail-fast)")

    def edges(self) -> tuple[tuple[str, str, str], ...]:
        out = []
        for name, step in self.workflow.steps.items():
            for dep in step.depends_on:
                out.append((dep, name, "fan-out" if dep == step.fan_out else "dep"))
        for source, route in self.workflow.routes.items():
            for target in route.targets:
                out.append((source, target, "route"))
        return tuple(out)


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def _no_scope() -> trio.CancelScope:
    return trio.CancelScope()


def _check_turn(turn: TurnResult) -> None:
    if turn.finish_reason not in OK_FINISH:
        detail = f"{turn.error.code}: {turn.error.message}" if turn.error is not None else f"finish reason {turn.finish_reason!r}"
        raise TurnFailedError(f"the turn in session {turn.session_id!r} ended in error ({detail})")


async def run_workflow(
    workflow: Workflow,
    target: Runtime | RuntimePool | None = None,
    *,
    spec: RuntimeSpec | None = None,
    approvals: Any = None,
    answerer: Any = None,
    audit: Any = None,
    inputs: dict[str, Any] | None = None,
    concurrency: int | None = None,
    runtime_limit: int | None = None,
    failure: FailurePolicy = "fail-fast",
    statistics: Statistics | None = None,
) -> WorkflowResult:
    """Run ``workflow`` on a runtime or pool (or on a fresh runtime from ``spec``, the simulator by default).

    ``concurrency`` bounds prompts in flight in the workflow; ``runtime_limit`` per runtime;
    ``Step.concurrency`` per step. ``failure``: "fail-fast" cancels the rest at the first
    failure; "collect" finishes what can finish. A failed step's dependents are skipped.
    ``approvals``/``answerer``/``audit`` apply only when the workflow opens its own runtime.

    Raises:
        WorkflowDefinitionError: the graph is malformed (before anything runs).
        RuntimeStartError: the runtime it opened did not start.

    Cancellation: every step is cancelled; the runtime it opened is closed (no process is left).
    """
    workflow.validate()
    if failure not in ("fail-fast", "collect"):
        raise ValueError(f"failure must be 'fail-fast' or 'collect', not {failure!r}")
    if target is None:
        async with open_runtime(spec, approvals=approvals, answerer=answerer, audit=audit) as runtime:
            return await run_workflow(
                workflow, runtime, inputs=inputs, concurrency=concurrency, runtime_limit=runtime_limit,
                failure=failure, statistics=statistics,
            )
    engine = _Engine(workflow, target, concurrency=concurrency, runtime_limit=runtime_limit, failure=failure, inputs=dict(inputs or {}))
    if statistics is not None:
        engine.stats = statistics
    engine.start = trio.current_time()
    with trio.CancelScope() as scope:
        engine.cancel_all = scope
        async with trio.open_nursery() as nursery:
            for step in workflow.steps.values():
                nursery.start_soon(engine.run_step, step)
    steps = {name: engine.results[name] for name in workflow.steps}
    statuses = {s.status for s in steps.values()}
    status: Any = "failed" if "failed" in statuses else "cancelled" if "cancelled" in statuses else "ok"
    return WorkflowResult(
        name=workflow.name,
        status=status,
        steps=steps,
        edges=engine.edges(),
        duration_s=trio.current_time() - engine.start,
        failure_policy=failure,
    )

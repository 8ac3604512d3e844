"""The engine: every step in one nursery, limits that bound, retries, timeouts, fail-fast/collect.

Owns: scheduling steps as their dependencies settle, fan-out and ordered joins, routes,
sessions (fresh, named, resumed from a checkpoint), typed outputs with re-prompting,
journaling and reuse of completed work, interrupts, subworkflows (a child engine per run of
the step, sharing the run's state), events. ``run_workflow`` and ``open_workflow`` (``_open``)
drive it. Must not know about datasets or the CLI.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from typing import Any, AsyncIterator, Literal, Sequence

import attrs
import trio

from .._params import Param, ParamValueError, positive
from .._tracing import STEP_SPAN, observed
from ..approvals import ApprovalRequest, Decision, reject
from ..pool import Backoff, RuntimePool, retryable as retryable
from ..protocol import OrchestraError, SessionNotFoundError
from ..session import OK_FINISH_REASONS, Runtime, Session, TurnResult
from ._events import EventHub
from ._fingerprint import declared_output, fingerprint
from ._graph import Step, Workflow
from ._answers import step_type, typed_answer
from ._interrupts import APPROVE, InterruptPending, Interrupts, decision_of
from ._journal import PLAIN, Journal, encode, expand_item
from ._output import OUTPUT_CONVERTER, OutputParseError, parse_output, repair_prompt
from ._result import RESULT_CONVERTER, ApprovalNote, Interrupt, ItemResult, StepError, StepFailedError as StepFailedError, StepResult

log = logging.getLogger("dsh_orchestra.workflow")

_SECONDS = positive("a positive number of seconds")

FailurePolicy = Literal["fail-fast", "collect"]
MAX_BACKOFF = 30.0
"""Seconds: the longest pause between two attempts, however many retries a step allows."""


class TurnFailedError(OrchestraError):
    """The model turn ended in error (finish reason ``error`` or another non-completion)."""


class SessionLostError(OrchestraError):
    """A named session cannot be used again: its runtime went away or a cancelled run abandoned it."""


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
        step: the step's name; path: its path in the run (``sub[1]/review``).
        inputs: each dependency's output (route sources included), by step name.
        results: each dependency's StepResult (items, subagents, typed subagent outputs).
        workflow_inputs: the ``inputs`` given to run_workflow (a subworkflow's: see there).
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
        self.path = engine.prefix + step.name
        self.inputs = inputs
        self.results = {name: engine.results[name] for name in inputs}
        self.workflow_inputs = engine.inputs
        self.item = item
        self.index = index
        self.attempt = attempt
        self.turns: list[TurnResult] = []
        self.reprompts = 0
        self.paused: list[Interrupt] = []
        self._asked = 0

    @property
    def item_path(self) -> str:
        """The path of this run of the step: ``review[2]`` for a fan-out item, else the step path."""
        return self.path if self.index is None else f"{self.path}[{self.index}]"

    def _next_id(self) -> str:
        n, self._asked = self._asked, self._asked + 1
        return f"{self.item_path}:{n}"

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

    async def interrupt(self, question: str, *, choices: Sequence[str] | None = None, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - public API; the answerer's time only
        """Ask a person ``question`` and return the answer (one of ``choices`` when given).

        The answer is text, except in a step annotated ``-> int``, ``-> float`` or ``-> bool``
        asking without ``choices``: the answer must read as that type (``42``; ``4.5``;
        ``yes``/``no``, ``true``/``false``) and is returned as one.

        This branch waits; the rest of the workflow goes on. The id is ``item_path:N`` (N: the
        interrupts this attempt asked before). With no answer to be had in this run the
        branch ends ``interrupted`` and a resume with the answer runs it again (this call then
        returns the answer at once).

        Raises:
            TimeoutError: the answerer gave no answer within ``timeout`` seconds.
            InterruptPending: no answer in this run (let it propagate).
            ValueError: an answer outside ``choices`` or not of the step's type; empty
                ``choices``; a bad timeout.
        """
        if not isinstance(question, str) or not question:
            raise ParamValueError("an interrupt needs a non-empty ", Param("question", question, spelled="question"), f", not {question!r}")
        if choices is not None:
            if isinstance(choices, str) or not choices or not all(isinstance(c, str) and c for c in choices):
                raise ParamValueError(Param("choices", choices, spelled="choices"), f" must be a non-empty list of non-empty strings, not {choices!r}")
        if timeout is not None:
            _SECONDS.check("timeout", timeout)
        interrupt = Interrupt(id=self._next_id(), question=question, choices=tuple(choices or ()))
        kind = step_type(self._step, interrupt.choices)
        answer = await self._engine.run.interrupts.ask(interrupt, timeout, kind)
        if answer is None:
            self.paused.append(interrupt)
            raise InterruptPending(interrupt)
        return typed_answer(interrupt.id, kind, answer)

    async def escalated(self, request: ApprovalRequest, timeout: float) -> Decision:  # noqa: ASYNC109 - running out is a rejection
        """Decide an approval the policy left undecided by an interrupt of this step."""
        reason = f" ({request.reason})" if request.reason else ""
        interrupt = Interrupt(id=self._next_id(), question=f"allow tool {request.tool_name}{reason}?", choices=APPROVE)
        try:
            answer = await self._engine.run.interrupts.ask(interrupt, timeout)
        except TimeoutError:
            return reject("escalate", f"no answer to {interrupt.id} within {timeout:g} s")
        except ValueError as exc:
            return reject("escalate", str(exc))
        if answer is None:
            self.paused.append(interrupt)
        return decision_of(interrupt, answer, pending=answer is None)


class RunState:
    """What every engine of one run shares (a subworkflow's engine included)."""

    def __init__(
        self,
        target: Runtime | RuntimePool,
        *,
        concurrency: int | None,
        runtime_limit: int | None,
        failure: FailurePolicy,
        stats: Statistics,
        journal: Journal | None,
        interrupts: Interrupts,
        events: EventHub,
    ) -> None:
        self.target = target
        self.failure = failure
        self.stats = stats
        self.journal = journal
        self.interrupts = interrupts
        self.events = events
        self.limit = trio.CapacityLimiter(concurrency) if concurrency else None
        self.runtime_limit = runtime_limit
        self.runtime_limits: dict[int, trio.CapacityLimiter] = {}
        self.named: dict[str, tuple[Runtime, Session]] = {}
        self.named_locks: dict[str, trio.Lock] = {}
        self.owners: dict[str, StepContext] = {}
        self.runtimes: list[Runtime] = []
        self.reran: dict[str, bool] = {}
        self.children: dict[str, StepResult] = {}
        self.start = 0.0
        self.first_failure: str | None = None
        self.cancel_all: trio.CancelScope | None = None

    def owner(self, request: ApprovalRequest) -> Any:
        """The escalation asker of the step whose session (or session tree) raised ``request``."""
        ctx = self.owners.get(request.session_id)
        if ctx is None:
            for runtime in self.runtimes:
                ctx = self.owners.get(runtime.router.root_of(request.session_id))
                if ctx is not None:
                    break
        return None if ctx is None else ctx.escalated


class _Engine:
    def __init__(
        self, workflow: Workflow, run: RunState, *, inputs: dict[str, Any], prefix: str = "", dirty: bool = False
    ) -> None:
        self.workflow = workflow
        self.order = workflow.validate()
        self.run = run
        self.inputs = inputs
        self.prefix = prefix
        self.dirty = dirty  # a parent subworkflow step's inputs changed: nothing here is reused
        self.fingerprints = {name: fingerprint(workflow, name) for name in workflow.steps}
        self.step_limits = {n: trio.CapacityLimiter(s.concurrency) for n, s in workflow.steps.items() if s.concurrency}
        self.results: dict[str, StepResult] = {}
        self.started: dict[str, float] = {}
        self.done = {name: trio.Event() for name in workflow.steps}
        self.chosen: dict[str, set[str]] = {}
        self.cancel_all: trio.CancelScope | None = None

    @property
    def stats(self) -> Statistics:
        return self.run.stats

    @property
    def failure(self) -> FailurePolicy:
        return self.run.failure

    # ---- sessions and prompts ----------------------------------------------------------

    @asynccontextmanager
    async def _lease(self, step: str, pinned: Runtime | None) -> AsyncIterator[Runtime]:
        """A slot under every limit (workflow, step, runtime) on a runtime, for one session's work."""
        run = self.run
        async with AsyncExitStack() as stack:
            if run.limit is not None:
                await stack.enter_async_context(run.limit)
            if step in self.step_limits:
                await stack.enter_async_context(self.step_limits[step])
            if isinstance(run.target, RuntimePool):
                runtime = await stack.enter_async_context(run.target.lease(pinned))
            else:
                runtime = run.target
            if runtime not in run.runtimes:
                run.runtimes.append(runtime)
            if run.runtime_limit:
                limiter = run.runtime_limits.setdefault(id(runtime), trio.CapacityLimiter(run.runtime_limit))
                await stack.enter_async_context(limiter)
            self.stats.in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
            try:
                yield runtime
            finally:
                self.stats.in_flight -= 1

    def _named_session(self, key: str) -> tuple[Runtime, Session] | None:
        held = self.run.named.get(key)
        if held is None:
            return None
        runtime, session = held
        if not runtime.alive or session.abandoned:
            why = "its runtime went away" if not runtime.alive else "a cancelled run abandoned it"
            raise SessionLostError(f"named session {key!r} ({session.id}) cannot be used again: {why}")
        return held

    async def _open_named(self, runtime: Runtime, key: str) -> Session:
        """The named session: resumed from the runtime's store when the checkpoint knows its id
        (a persisted session keeps its conversation), else a fresh one (recorded)."""
        journal = self.run.journal
        known = journal.sessions.get(key) if journal is not None else None
        if known is not None:
            try:
                session = await runtime.resume(known)
                log.info("named session %r: resumed %s from the runtime's store", key, known)
                return session
            except SessionNotFoundError:
                log.warning("named session %r: %s is not in the runtime's store; starting a fresh session", key, known)
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in key)
        session = runtime.session(f"wf-{safe}-{uuid.uuid4().hex[:12]}")
        if journal is not None:
            journal.put_session(key, session.id)
        return session

    async def prompt_once(
        self,
        step: str,
        text: str,
        *,
        output: type | None,
        session_name: str | None,
        parse_attempts: int,
        timeout: float | None,  # noqa: ASYNC109 - starts after the limits and the lease, not at the call
        record: StepContext,
    ) -> Any:
        """One prompt (plus re-prompts for a typed output) in one session; turns go to ``record``.

        ``timeout`` starts once every limit let the prompt through.
        """
        key = self.prefix + session_name if session_name else None
        lock = self.run.named_locks.setdefault(key, trio.Lock()) if key else None
        async with lock if lock is not None else nullcontext():
            held = self._named_session(key) if key else None
            async with self._lease(step, held[0] if held else None) as runtime:
                if key and held is None:
                    held = self.run.named[key] = (runtime, await self._open_named(runtime, key))
                session = held[1] if held is not None else runtime.session()
                self.run.owners[session.id] = record
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
        events = self.run.events
        if events.turn_events and events.listening:
            turn = await self._run_watched(session, text, record)
        else:
            turn = await session.run(text)
        record.turns.append(turn)
        _check_turn(turn)
        return turn

    async def _run_watched(self, session: Session, text: str, record: StepContext) -> TurnResult:
        """``session.run`` with the session tree's notifications forwarded as ``turn`` events."""
        events = self.run.events

        def emit(note: Any) -> None:
            events.emit("turn", record.path, index=record.index, session_id=session.id, notification=note)

        with session.events() as feed:

            async def forward() -> None:
                try:
                    while True:
                        emit(await feed.receive())
                except (trio.EndOfChannel, trio.ClosedResourceError, OrchestraError):
                    return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(forward)
                try:
                    return await session.run(text)
                finally:
                    nursery.cancel_scope.cancel()
                    while True:  # what the reader delivered before the run returned
                        try:
                            emit(feed.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError, OrchestraError):
                            break
        raise AssertionError("unreachable")

    # ---- one item ----------------------------------------------------------------------

    def _reused_item(self, step: Step, index: int | None) -> ItemResult | None:
        journal = self.run.journal
        if journal is None:
            return None
        path = self.prefix + step.name
        row = journal.items.get(path, {}).get(PLAIN if index is None else index)
        if row is None or row[0] != self.fingerprints[step.name]:
            return None
        return self._restore_item(step, row[1])

    def _restore_item(self, step: Step, raw: dict[str, Any]) -> ItemResult | None:
        """A journaled item, its output structured back into the step's declared type."""
        try:
            item = RESULT_CONVERTER.structure(expand_item(raw), ItemResult)
            kind = declared_output(step)
            output = item.output
            if kind is not None and kind is not Any and kind is not type(None):
                output = OUTPUT_CONVERTER.structure(output, kind)
            typed = item.subagent_outputs
            if step.subagent_output is not None:
                typed = tuple(OUTPUT_CONVERTER.structure(o, step.subagent_output) for o in typed)
        except Exception as exc:  # noqa: BLE001 (the item runs again)
            log.warning("step %r: the checkpointed output does not fit its declared type (%s); running it again", step.name, exc)
            return None
        return attrs.evolve(item, output=output, subagent_outputs=typed)

    async def run_item(
        self, step: Step, inputs: dict[str, Any], item: Any, index: int | None, *, reuse: bool
    ) -> ItemResult:
        path = self.prefix + step.name
        if reuse:
            reused = self._reused_item(step, index)
            if reused is not None:
                if index is not None:
                    self.run.events.emit("resumed", path, index=index)
                return reused
        if step.subworkflow is None:  # a subworkflow step reran when one of its steps did
            self.run.reran[path] = True
        started = trio.current_time()
        attempts = 0
        while True:
            attempts += 1
            ctx = StepContext(self, step, inputs, item, index, attempts)
            try:
                if step.subworkflow is not None:
                    output = await self._run_child(step, ctx, inputs, item, index, reuse=reuse)
                elif step.prompts:
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
                if ctx.paused:
                    return self._item(step, "interrupted", index, ctx, attempts, started)
                typed = self._subagent_outputs(step, ctx.turns)
                result = self._item(step, "ok", index, ctx, attempts, started, output=output, typed=typed)
                return self._journal_item(step, result, ctx, attempts, started)
            except Exception as exc:  # noqa: BLE001 (recorded on the result; retried when retryable)
                if ctx.paused or _pending(exc):
                    return self._item(step, "interrupted", index, ctx, attempts, started)
                if retryable(exc) and attempts <= step.retries:
                    delay = Backoff(min(step.backoff, MAX_BACKOFF), MAX_BACKOFF, jitter=0.0).delay(attempts - 1)
                    log.info("step %r item %s: attempt %d failed (%r); retrying in %g s", step.name, index, attempts, exc, delay)
                    self.stats.retries += 1
                    await trio.sleep(delay)
                    continue
                if isinstance(exc, trio.TooSlowError):
                    what = "the prompt of step" if step.prompts else "step"
                    exc = TimeoutError(f"{what} {step.name!r} did not finish within {step.timeout:g} s")
                return self._item(step, "failed", index, ctx, attempts, started, error=StepError.of(exc))

    def _journal_item(self, step: Step, result: ItemResult, ctx: StepContext, attempts: int, started: float) -> ItemResult:
        journal = self.run.journal
        if journal is None or step.subworkflow is not None:  # a subworkflow's steps are journaled themselves
            return result
        try:
            record = encode(_slim(RESULT_CONVERTER.unstructure(result)))
        except TypeError as exc:
            error = StepError(
                type="TypeError",
                message=f"the output of step {step.name!r} cannot be stored in the checkpoint (JSON): {exc}",
            )
            return self._item(step, "failed", result.index, ctx, attempts, started, error=error)
        journal.put_item(self.prefix + step.name, result.index, self.fingerprints[step.name], record)
        return result

    async def _run_child(
        self, step: Step, ctx: StepContext, inputs: dict[str, Any], item: Any, index: int | None, *, reuse: bool
    ) -> Any:
        """Run the subworkflow in place: a child engine whose step paths sit under this item's."""
        assert step.subworkflow is not None
        child_inputs = {**self.inputs, **inputs, "item": item, "index": index}
        child = _Engine(step.subworkflow, self.run, inputs=child_inputs, prefix=f"{ctx.item_path}/", dirty=not reuse)
        steps = await child.run_all()
        if any(self.run.reran.get(child.prefix + name, True) for name in steps):
            self.run.reran[self.prefix + step.name] = True
        pending = [s for s in steps.values() if s.status == "interrupted"]
        failed = [(n, s) for n, s in steps.items() if s.status in ("failed", "cancelled")]
        if failed:
            name, first = failed[0]
            raise StepFailedError(child.prefix + name, first.errors, first.reason)
        if pending:
            ctx.paused.extend(i for i in self.run.interrupts.pending.values() if i.id.startswith(child.prefix))
            if not ctx.paused:  # answered meanwhile by nobody: still marks the branch
                ctx.paused.append(Interrupt(id=f"{child.prefix}:pending", question="a child step waits"))
            return None
        return {name: s.output for name, s in steps.items()}

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
            started_s=started - self.run.start, duration_s=trio.current_time() - started,
        )

    # ---- one step ----------------------------------------------------------------------

    def _dirty(self, step: Step, deps: Sequence[str]) -> bool:
        """True when nothing of the step can be reused: its definition changed, or something
        it depends on ran again (so its inputs may differ)."""
        journal = self.run.journal
        if journal is None or self.dirty:
            return True
        if any(self.run.reran.get(self.prefix + dep, True) for dep in deps):
            return True
        path = self.prefix + step.name
        row = journal.steps.get(path)
        recorded = row.fingerprint if row is not None else None
        if recorded is None and journal.items.get(path):
            recorded = next(iter(journal.items[path].values()))[0]
        return recorded is not None and recorded != self.fingerprints[step.name]

    def _reused_step(self, step: Step) -> StepResult | None:
        journal = self.run.journal
        assert journal is not None
        path = self.prefix + step.name
        row = journal.steps.get(path)
        if row is None or row.status != "ok" or step.subworkflow is not None:
            return None
        rows = journal.items.get(path, {})
        items = [self._restore_item(step, rows[i][1]) for i in sorted(rows)]
        if any(i is None for i in items) or (step.fan_out is None and len(items) != 1):
            return None
        result = self._step_result(step, [i for i in items if i is not None], 0.0)
        return attrs.evolve(
            result, started_s=row.record.get("started_s"), duration_s=row.record.get("duration_s", 0.0)
        )

    @observed(STEP_SPAN, lambda self, step: {"workflow": self.workflow.name, "step": step.name})
    async def run_step(self, step: Step) -> None:
        path = self.prefix + step.name
        events = self.run.events
        try:
            deps = self.workflow.dependencies(step.name)
            for dep in deps:
                await self.done[dep].wait()
            blocked = self._blocked(step, deps)
            if blocked is not None:
                self.results[step.name] = StepResult(name=step.name, status="skipped", reason=blocked)
                self.run.reran[path] = True
                events.emit("skipped", path, reason=blocked)
                return
            inputs = {dep: self.results[dep].output for dep in deps}
            dirty = self._dirty(step, deps)
            journal = self.run.journal
            if journal is not None and not dirty:
                reused = self._reused_step(step)
                if reused is not None:
                    self.results[step.name] = reused
                    self.run.reran[path] = False
                    events.emit("resumed", path)
                    if step.name in self.workflow.routes:
                        self._route(step.name)
                    return
            elif journal is not None and (path in journal.steps or path in journal.items):
                log.info("step %r changed (or an input did): running it again", path)
                journal.discard(path)
            self.run.reran.setdefault(path, False)
            started = self.started[step.name] = trio.current_time()
            events.emit("started", path)
            if step.fan_out is None:
                items = [await self.run_item(step, inputs, None, None, reuse=not dirty)]
            else:
                source = self.results[step.fan_out].output
                if not isinstance(source, (list, tuple)):
                    error = StepError(
                        type="TypeError",
                        message=f"fan-out source {step.fan_out!r} returned {type(source).__name__}, not a list",
                    )
                    self.results[step.name] = StepResult(
                        name=step.name, status="failed", errors=(error,), started_s=started - self.run.start,
                        reason="its fan-out source is not a list",
                    )
                    self._failed(step.name)
                    return
                items = await self._fan_out(step, inputs, list(source), reuse=not dirty)
            result = self.results[step.name] = self._step_result(step, items, started)
            if result.status == "failed":
                self._failed(step.name)
            elif result.status == "ok" and step.name in self.workflow.routes:
                self._route(step.name)
        finally:
            if step.name not in self.results:
                begun = self.started.get(step.name)
                self.results[step.name] = StepResult(
                    name=step.name, status="cancelled", reason=self._cancel_reason(),
                    started_s=None if begun is None else begun - self.run.start,
                    duration_s=0.0 if begun is None else trio.current_time() - begun,
                )
            self._settled(step)
            self.done[step.name].set()

    def _settled(self, step: Step) -> None:
        """Journal the step's final row and tell the listeners."""
        path = self.prefix + step.name
        result = self.results[step.name]
        journal = self.run.journal
        if journal is not None and result.status in ("ok", "failed", "interrupted") and self.run.reran.get(path, True):
            record: dict[str, Any] = {
                "name": result.name, "attempts": result.attempts, "started_s": result.started_s, "duration_s": result.duration_s,
                "reason": result.reason, "errors": RESULT_CONVERTER.unstructure(result.errors),
            }
            if result.status != "ok":
                try:
                    record["items"] = orjson_safe(RESULT_CONVERTER.unstructure(result.items))
                except TypeError:
                    record["items"] = []
            journal.put_step(path, self.fingerprints[step.name], result.status, record)
        if self.prefix:
            self.run.children[path] = result
        kind = {"ok": "finished", "failed": "failed", "interrupted": "interrupted", "cancelled": "cancelled"}
        if result.status in kind and self.run.reran.get(path, True) and result.status != "interrupted":
            error = result.errors[0] if result.errors else None
            self.run.events.emit(kind[result.status], path, error=error, reason=result.reason)  # type: ignore[arg-type]

    def _cancel_reason(self) -> str:
        if self.run.first_failure is not None:
            return f"cancelled after step {self.run.first_failure!r} failed (fail-fast)"
        return "the workflow was cancelled"

    async def _fan_out(self, step: Step, inputs: dict[str, Any], items: list[Any], *, reuse: bool) -> list[ItemResult]:
        results: list[ItemResult | None] = [None] * len(items)

        async def one(index: int, item: Any, scope: trio.CancelScope) -> None:
            result = await self.run_item(step, inputs, item, index, reuse=reuse)
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
        waiting = [i for i in items if i.status == "interrupted"]
        status: Any = "failed" if failed else ("cancelled" if cancelled else ("interrupted" if waiting else "ok"))
        output = items[0].output if step.fan_out is None else [i.output for i in items]
        reason = None
        if failed:
            reason = f"{len(failed)} of {len(items)} run(s) failed"
            if cancelled:
                reason += f", {len(cancelled)} cancelled (fail-fast)"
        elif waiting and not cancelled:
            reason = f"{len(waiting)} of {len(items)} run(s) wait for an answer"
        return StepResult(
            name=step.name,
            status=status,
            output=output if status == "ok" else None,
            attempts=max((i.attempts for i in items), default=0),
            started_s=started - self.run.start,
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
        if self.run.first_failure is None:
            self.run.first_failure = self.prefix + step
        if self.failure == "fail-fast":
            scope = self.run.cancel_all if not self.prefix else self.cancel_all
            if scope is not None:
                scope.cancel(reason=f"step {self.prefix + step!r} failed (fail-fast)")

    async def run_all(self) -> dict[str, StepResult]:
        """Run every step (in one nursery) and return their settled results."""
        with trio.CancelScope() as scope:
            self.cancel_all = scope
            if not self.prefix:
                self.run.cancel_all = scope
            async with trio.open_nursery() as nursery:
                for step in self.workflow.steps.values():
                    nursery.start_soon(self.run_step, step)
        return self.settle()

    def settle(self) -> dict[str, StepResult]:
        """Every step's final result: a step cancelled before it began, while one of its
        dependencies failed or was skipped, is reported skipped (it never could have run)."""
        for name in self.order:
            result = self.results[name]
            if result.status != "cancelled" or result.started_s is not None:
                continue
            for dep in self.workflow.dependencies(name):
                status = self.results[dep].status
                if status in ("failed", "skipped", "interrupted"):
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


def _pending(exc: BaseException) -> bool:
    """True for an InterruptPending, alone or grouped (a step's own nursery)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_pending(e) for e in exc.exceptions)
    return isinstance(exc, InterruptPending)


def _slim(record: dict[str, Any]) -> dict[str, Any]:
    """An item's journal row: the output stored once (an untyped prompt step's final response
    is its output), empty and default fields left out (structuring puts them back)."""
    if record.get("final_response") is not None and record.get("final_response") == record.get("output"):
        record["final_response"] = None
        record["final_response_is_output"] = True
    return {k: v for k, v in record.items() if k in ("index", "output") or v not in (None, [], (), 0)}


def orjson_safe(value: Any) -> Any:
    """``value`` if it encodes as JSON (raises TypeError otherwise)."""
    encode(value)
    return value


def _check_turn(turn: TurnResult) -> None:
    if turn.finish_reason not in OK_FINISH_REASONS:
        detail = f"{turn.error.code}: {turn.error.message}" if turn.error is not None else f"finish reason {turn.finish_reason!r}"
        raise TurnFailedError(f"the turn in session {turn.session_id!r} ended in error ({detail})")

"""Workflow definitions: steps (async functions or prompt templates), dependencies, fan-out, routes.

Pure: no trio, no I/O. ``Workflow.validate()`` checks the graph (unknown names, cycles).
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Iterable, Sequence

import attrs

Inputs = dict[str, Any]
Template = str | Callable[[Inputs], str]


class WorkflowDefinitionError(ValueError):
    """The workflow graph is malformed; the message names the step and what to fix."""


def _names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@attrs.frozen(kw_only=True)
class Step:
    """One node of the graph.

    Exactly one of ``fn`` (``async def fn(ctx) -> output``) and ``template`` (a prompt:
    a ``str.format`` template, or a function, of the values: each dependency's output by
    step name, the workflow inputs, ``item``, ``index`` and ``attempt``).
    ``fan_out`` names an upstream step whose output is a list: the step runs once per item
    (one session each) and its output is the list of their outputs, in input order.
    ``timeout`` bounds one attempt of one item: for a prompt step from the moment its prompt
    is sent (waiting for a concurrency slot does not count), for a function step the call.
    """

    name: str
    fn: Callable[[Any], Awaitable[Any]] | None = None
    template: Template | None = None
    depends_on: tuple[str, ...] = ()
    fan_out: str | None = None
    output: type | None = None
    subagent_output: type | None = None
    session: str | None = None
    timeout: float | None = None
    retries: int = 0
    backoff: float = 0.5
    concurrency: int | None = None
    parse_attempts: int = 2
    subworkflow: Workflow | None = None

    @property
    def prompts(self) -> bool:
        """True for a prompt-template step."""
        return self.template is not None

    def render(self, inputs: Inputs) -> str:
        """The prompt text for ``inputs`` (dependency outputs, workflow inputs, ``item``,
        ``index`` and ``attempt``).

        Raises:
            WorkflowDefinitionError: the template names a value that does not exist.
        """
        assert self.template is not None
        if callable(self.template):
            return str(self.template(inputs))
        try:
            return self.template.format_map(inputs)
        except KeyError as exc:
            raise WorkflowDefinitionError(
                f"the template of step {self.name!r} names {{{exc.args[0]}}}, which is neither a dependency "
                f"nor a workflow input (it can use: {', '.join(sorted(inputs))}); write literal braces as {{{{ }}}}"
            ) from None


@attrs.frozen(kw_only=True)
class Route:
    """A conditional edge: after ``source`` succeeds, ``choose(output)`` names the targets to run."""

    source: str
    choose: Callable[[Any], str | Sequence[str] | None]
    targets: tuple[str, ...]


class Workflow:
    """A graph of steps. Build it with ``step`` (decorator), ``prompt`` and ``route``."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise WorkflowDefinitionError(f"a workflow needs a non-empty name, not {name!r}")
        self.name = name
        self.steps: dict[str, Step] = {}
        self.routes: dict[str, Route] = {}

    def _add(self, step: Step) -> Step:
        if not step.name or not isinstance(step.name, str):
            raise WorkflowDefinitionError(f"a step needs a non-empty name, not {step.name!r}")
        if step.name in self.steps:
            raise WorkflowDefinitionError(f"workflow {self.name!r} already has a step named {step.name!r}")
        if step.retries < 0 or step.parse_attempts < 0:
            raise WorkflowDefinitionError(f"step {step.name!r}: retries and parse_attempts must be >= 0")
        if step.backoff < 0:
            raise WorkflowDefinitionError(f"step {step.name!r}: backoff must be >= 0 seconds, not {step.backoff!r}")
        if step.output is not None and step.template is None:
            raise WorkflowDefinitionError(f"step {step.name!r}: output= is for prompt steps; a function step returns its output")
        if step.timeout is not None and step.timeout <= 0:
            raise WorkflowDefinitionError(f"step {step.name!r}: timeout must be a positive number of seconds")
        if step.concurrency is not None and step.concurrency < 1:
            raise WorkflowDefinitionError(f"step {step.name!r}: concurrency must be >= 1")
        if step.fan_out is not None and step.session is not None:
            raise WorkflowDefinitionError(
                f"step {step.name!r}: a fan-out step gets one fresh session per item; drop session={step.session!r}"
            )
        deps = step.depends_on
        if step.fan_out is not None and step.fan_out not in deps:
            deps = (*deps, step.fan_out)
        step = attrs.evolve(step, depends_on=deps)
        self.steps[step.name] = step
        return step

    def step(
        self,
        name: str | None = None,
        *,
        depends_on: str | Iterable[str] | None = None,
        fan_out: str | None = None,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.5,
        concurrency: int | None = None,
    ) -> Callable[[Callable[[Any], Awaitable[Any]]], Callable[[Any], Awaitable[Any]]]:
        """Decorate ``async def fn(ctx: StepContext)``: a step whose output is what it returns.

        The name defaults to the function's. ``timeout`` bounds one call; ``retries`` retry a
        retryable failure (lost runtime, timeout); ``concurrency`` bounds its ``ctx.prompt``
        sessions in flight.
        """

        def decorate(fn: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
            if not inspect.iscoroutinefunction(fn):
                raise WorkflowDefinitionError(f"step {name or fn.__name__!r} must be an async function")
            self._add(
                Step(
                    name=name or fn.__name__,
                    fn=fn,
                    depends_on=_names(depends_on),
                    fan_out=fan_out,
                    timeout=timeout,
                    retries=retries,
                    backoff=backoff,
                    concurrency=concurrency,
                )
            )
            return fn

        return decorate

    def prompt(
        self,
        name: str,
        template: Template,
        *,
        depends_on: str | Iterable[str] | None = None,
        fan_out: str | None = None,
        output: type | None = None,
        subagent_output: type | None = None,
        session: str | None = None,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.5,
        concurrency: int | None = None,
        parse_attempts: int = 2,
    ) -> Step:
        """Add a prompt step: render ``template``, run it in a session, wait, return the result.

        ``template``: a ``str.format`` template (or a function) of the dependencies' outputs by
        step name, the workflow inputs, ``item``, ``index`` and ``attempt``. ``output`` (an attrs
        class): the final response is parsed into it; a parse failure re-prompts the same
        session up to ``parse_attempts`` times. ``subagent_output``: the type of each subagent's
        closing message. ``session``: a name shared by the steps that should reuse one session
        (default: a fresh session per run). ``timeout`` bounds one attempt from the moment the
        prompt is sent; ``retries`` retry a lost runtime or a timeout after ``backoff`` seconds,
        doubling; ``concurrency`` bounds this step's sessions in flight.

        Raises:
            WorkflowDefinitionError: a duplicate name or an invalid value.
        """
        return self._add(
            Step(
                name=name,
                template=template,
                depends_on=_names(depends_on),
                fan_out=fan_out,
                output=output,
                subagent_output=subagent_output,
                session=session,
                timeout=timeout,
                retries=retries,
                backoff=backoff,
                concurrency=concurrency,
                parse_attempts=parse_attempts,
            )
        )

    def subworkflow(
        self,
        name: str,
        workflow: Workflow,
        *,
        depends_on: str | Iterable[str] | None = None,
        fan_out: str | None = None,
        concurrency: int | None = None,
    ) -> Step:
        """Add a step that runs ``workflow`` (once, or once per item with ``fan_out``).

        The child sees the parent's workflow inputs, each dependency's output by step name,
        and ``item``/``index``, as its own inputs. Its steps run under the parent's limits and
        journal (as ``name/step``, or ``name[i]/step`` per item); its output is a dict of its
        steps' outputs (a list of them with ``fan_out``). A child step that fails fails the
        step; one that waits for an answer makes it wait.

        Raises:
            WorkflowDefinitionError: ``workflow`` is not a Workflow, or contains this one.
        """
        if not isinstance(workflow, Workflow):
            raise WorkflowDefinitionError(f"subworkflow {name!r} needs a Workflow, not {type(workflow).__name__}")
        if workflow is self or self in workflow.descendants():
            raise WorkflowDefinitionError(f"subworkflow {name!r}: workflow {workflow.name!r} contains {self.name!r}")
        return self._add(
            Step(
                name=name, subworkflow=workflow, depends_on=_names(depends_on), fan_out=fan_out,
                concurrency=concurrency,
            )
        )

    def descendants(self) -> list[Workflow]:
        """Every workflow this one runs as a subworkflow, nested ones included."""
        out: list[Workflow] = []
        for step in self.steps.values():
            if step.subworkflow is not None and step.subworkflow not in out:
                out.append(step.subworkflow)
                out += [w for w in step.subworkflow.descendants() if w not in out]
        return out

    def route(self, source: str, choose: Callable[[Any], str | Sequence[str] | None], targets: Iterable[str]) -> None:
        """After ``source`` succeeds, run only the targets ``choose(output)`` names; skip the rest."""
        targets = tuple(targets)
        if source in self.routes:
            raise WorkflowDefinitionError(f"step {source!r} already has a route")
        if not targets:
            raise WorkflowDefinitionError(f"the route from {source!r} needs at least one target")
        self.routes[source] = Route(source=source, choose=choose, targets=targets)

    def dependencies(self, name: str) -> tuple[str, ...]:
        """The steps ``name`` waits for (its declared dependencies and its route sources)."""
        deps = list(self.steps[name].depends_on)
        deps += [r.source for r in self.routes.values() if name in r.targets and r.source not in deps]
        return tuple(deps)

    def validate(self) -> list[str]:
        """Check the graph and return the steps in a topological order.

        Raises:
            WorkflowDefinitionError: an unknown step name, or a cycle.
        """
        if not self.steps:
            raise WorkflowDefinitionError(f"workflow {self.name!r} has no steps")
        for route in self.routes.values():
            for name in (route.source, *route.targets):
                if name not in self.steps:
                    raise WorkflowDefinitionError(f"route from {route.source!r} names unknown step {name!r}")
        for step in self.steps.values():
            for dep in step.depends_on:
                if dep not in self.steps:
                    raise WorkflowDefinitionError(f"step {step.name!r} depends on unknown step {dep!r}")
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(name: str, path: tuple[str, ...]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = " -> ".join((*path[path.index(name):], name))
                raise WorkflowDefinitionError(f"workflow {self.name!r} has a cycle: {cycle}")
            state[name] = 1
            for dep in self.dependencies(name):
                visit(dep, (*path, name))
            state[name] = 2
            order.append(name)

        for name in self.steps:
            visit(name, ())
        for child in self.descendants():
            child.validate()
        return order

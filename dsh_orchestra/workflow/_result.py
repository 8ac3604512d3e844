"""Workflow results: per-step status, timing, attempts, outputs, approvals, errors; JSON; Mermaid.

Pure: no trio, no I/O. ``WorkflowResult.to_json()`` gives plain JSON (typed outputs become
objects); ``WorkflowResult.from_json()`` reads it back (outputs stay plain JSON values), so
``from_json(json.loads(json.dumps(r.to_json()))).to_json() == r.to_json()``.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Sequence

import attrs
import cattrs

from .. import _display
from ..protocol import CONVERTER as WIRE_CONVERTER, ContentBlock, OrchestraError, unstructure as wire_unstructure
from ..session import SubagentResult

StepStatus = Literal["ok", "failed", "skipped", "cancelled", "interrupted"]
WorkflowStatus = Literal["ok", "failed", "cancelled", "interrupted"]


@attrs.frozen(kw_only=True)
class StepError:
    """Why a step (or one of its items) failed."""

    type: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> StepError:
        """The error as recorded: its class name and message (a lone grouped error unwrapped)."""
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        return cls(type=type(exc).__name__, message=str(exc))


class StepFailedError(OrchestraError):
    """A step failed (raised by ``WorkflowResult.raise_for_status``); ``errors`` holds its errors."""

    def __init__(self, step: str, errors: Sequence[StepError], reason: str | None = None) -> None:
        first = f"{errors[0].type}: {errors[0].message}" if errors else (reason or "no error recorded")
        super().__init__(f"step {step!r} failed: {first}")
        self.step = step
        self.errors = tuple(errors)


@attrs.frozen(kw_only=True)
class Interrupt:
    """A question a step asked: ``id`` is stable across runs (``step:0``, ``review[2]:1``,
    ``sub[1]/ask:0``: the step path, the fan-out item, the interrupt's index in that item)."""

    id: str
    question: str
    choices: tuple[str, ...] = ()

    @property
    def step(self) -> str:
        """The path of the item that asked (``review[2]``)."""
        return self.id.rpartition(":")[0]


@attrs.frozen(kw_only=True)
class ApprovalNote:
    """One approval decided during a step (from the runtime's approval service)."""

    session_id: str
    tool_name: str
    call_id: str | None
    outcome: str
    rule: str


@attrs.frozen(kw_only=True)
class ItemResult:
    """One run of a step: the whole step (``index`` None), or one fan-out item.

    ``subagent_outputs`` pairs with ``subagents`` (same order: completion order) when the
    step declared ``subagent_output``. ``reprompts`` counts the repair prompts a typed output
    needed. A failed item keeps the session and final response of its last turn, if any.
    """

    index: int | None
    status: StepStatus
    output: Any = None
    attempts: int = 0
    reprompts: int = 0
    session_id: str | None = None
    final_response: str | None = None
    finish_reason: str | None = None
    subagents: tuple[SubagentResult, ...] = ()
    subagent_outputs: tuple[Any, ...] = ()
    approvals: tuple[ApprovalNote, ...] = ()
    error: StepError | None = None
    started_s: float | None = None
    duration_s: float = 0.0


@attrs.frozen(kw_only=True)
class StepResult:
    """What one step did.

    ``items`` holds one ItemResult per run (one for a plain step, one per item, in input
    order, for a fan-out). ``started_s`` is seconds after the workflow started (None: it never
    started); ``attempts`` the most any item needed; ``reason`` says why a step was skipped,
    cancelled or failed.
    """

    name: str
    status: StepStatus
    output: Any = None
    attempts: int = 0
    started_s: float | None = None
    duration_s: float = 0.0
    items: tuple[ItemResult, ...] = ()
    approvals: tuple[ApprovalNote, ...] = ()
    subagents: tuple[SubagentResult, ...] = ()
    subagent_outputs: tuple[Any, ...] = ()
    errors: tuple[StepError, ...] = ()
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """True when the step succeeded."""
        return self.status == "ok"


@attrs.frozen(kw_only=True)
class WorkflowResult:
    """The whole run: each step's result, in definition order, and the edges for export.

    ``status`` is ``failed`` when a step failed, ``cancelled`` when a step was cancelled
    without one failing, ``interrupted`` when steps wait for answers (``pending`` lists the
    interrupts), else ``ok`` (steps skipped by a route do not fail a workflow).
    ``first_failure`` names the step that failed first (under fail-fast, the one that
    cancelled the rest). A subworkflow's steps follow the workflow's own, by path
    (``sub/step``, ``sub[1]/step``).
    """

    name: str
    status: WorkflowStatus
    steps: dict[str, StepResult]
    edges: tuple[tuple[str, str, str], ...] = ()  # (from, to, kind: "dep" | "fan-out" | "route")
    duration_s: float = 0.0
    failure_policy: str = "fail-fast"
    first_failure: str | None = None
    pending: tuple[Interrupt, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the workflow succeeded."""
        return self.status == "ok"

    def output(self, step: str) -> Any:
        """The output of ``step``.

        Raises:
            KeyError: no such step. ValueError: the step did not succeed.
        """
        result = self.steps[step]
        if result.status != "ok":
            raise ValueError(f"step {step!r} is {result.status}: {result.reason or result.errors}")
        return result.output

    def raise_for_status(self) -> None:
        """Raise for the step that failed first; nothing when none failed.

        Raises:
            StepFailedError: a step failed.
        """
        failed = [name for name, step in self.steps.items() if step.status == "failed"]
        if failed:
            name = self.first_failure if self.first_failure in failed else failed[0]
            raise StepFailedError(name, self.steps[name].errors, self.steps[name].reason)

    def errors(self) -> dict[str, tuple[StepError, ...]]:
        """The errors of every failed step."""
        return {name: s.errors for name, s in self.steps.items() if s.errors}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (outputs of attrs classes become objects).

        Outputs that are neither attrs classes nor JSON-compatible values stay as they are
        (``json.dumps`` then needs a ``default=``).
        """
        data: dict[str, Any] = RESULT_CONVERTER.unstructure(self)
        data["edges"] = [{"from": a, "to": b, "kind": k} for a, b, k in self.edges]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkflowResult:
        """Read back what ``to_json`` wrote; outputs stay plain JSON values.

        Raises:
            ValueError: ``data`` is not a workflow result (the message lists the problems).
        """
        if not isinstance(data, dict):
            raise ValueError(f"a workflow result is a JSON object, not {type(data).__name__}")
        raw = dict(data)
        edges = raw.get("edges", [])
        try:
            raw["edges"] = [(e["from"], e["to"], e["kind"]) for e in edges]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"edges must be objects with from, to and kind: {exc!r}") from exc
        try:
            return RESULT_CONVERTER.structure(raw, cls)
        except cattrs.BaseValidationError as exc:
            problems = "; ".join(cattrs.transform_error(exc, path="$"))
            raise ValueError(f"not a workflow result: {problems}") from exc

    def mermaid(self) -> str:
        """A Mermaid flowchart of the graph, each node annotated with its status and time."""
        return to_mermaid(self)

    def summary(self) -> str:
        """A few readable lines: the workflow's status, then one line per step."""
        return format_summary(self)

    def __repr__(self) -> str:
        return _display.workflow_text(self)

    def _repr_html_(self) -> str:
        return _display.workflow_html(self)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()

    # Subagent messages hold content blocks: keep them in their wire form so they read back.
    def unstructure_subagent(value: SubagentResult) -> dict[str, Any]:
        return {
            "provider": value.provider,
            "agent_id": value.agent_id,
            "parent_session_id": value.parent_session_id,
            "child_session_id": value.child_session_id,
            "status": value.status,
            "stop_reason": value.stop_reason,
            "last_assistant_message": [wire_unstructure(block) for block in value.last_assistant_message],
            "text": value.text,
        }

    def structure_subagent(raw: Any, _: type) -> SubagentResult:
        if not isinstance(raw, dict):
            raise TypeError(f"a subagent result is an object, not {type(raw).__name__}")
        blocks: tuple[ContentBlock, ...] = tuple(
            WIRE_CONVERTER.structure(b, ContentBlock)  # type: ignore[arg-type]  # a union: the hook dispatches on "type"
            for b in raw.get("last_assistant_message", ())
        )
        return SubagentResult(
            provider=raw["provider"],
            agent_id=raw["agent_id"],
            parent_session_id=raw["parent_session_id"],
            child_session_id=raw["child_session_id"],
            status=raw["status"],
            stop_reason=raw["stop_reason"],
            last_assistant_message=blocks,
            text=raw.get("text", ""),
        )

    conv.register_unstructure_hook(SubagentResult, unstructure_subagent)
    conv.register_structure_hook(SubagentResult, structure_subagent)
    return conv


RESULT_CONVERTER = _make_converter()

_STYLE = {
    "ok": "fill:#d7f5dd,stroke:#2e7d32",
    "failed": "fill:#fbd5d5,stroke:#c62828",
    "skipped": "fill:#eeeeee,stroke:#9e9e9e,stroke-dasharray:4",
    "cancelled": "fill:#fff3cd,stroke:#b26a00",
    "interrupted": "fill:#dbe9ff,stroke:#1f5fbf",
}


def _node_id(name: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


def _label(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def _fanned(step: StepResult) -> bool:
    return any(item.index is not None for item in step.items)


def to_mermaid(result: WorkflowResult) -> str:
    """Mermaid ``flowchart TD`` text for ``result``: fan-out edges thick, route edges dotted,
    each node coloured and labelled with its status, time, items and attempts."""
    lines = ["flowchart TD"]
    top = {key: step for key, step in result.steps.items() if key == step.name}  # subworkflow steps are by path
    for name, step in top.items():
        detail = f"{step.status}, {step.duration_s:.2f} s"
        if _fanned(step):
            done = sum(1 for i in step.items if i.status == "ok")
            detail += f", {done}/{len(step.items)} items"
        if step.attempts > 1:
            detail += f", {step.attempts} attempts"
        lines.append(f'    {_node_id(name)}["{_label(name)}<br/>{_label(detail)}"]')
    arrows = {"dep": "-->", "fan-out": "==>", "route": "-.->"}
    for source, target, kind in result.edges:
        label = "|fan-out|" if kind == "fan-out" else "|route|" if kind == "route" else ""
        lines.append(f"    {_node_id(source)} {arrows[kind]}{label} {_node_id(target)}")
    for status, style in _STYLE.items():
        names = [_node_id(n) for n, s in top.items() if s.status == status]
        if names:
            lines.append(f"    classDef {status} {style}")
            lines.append(f"    class {','.join(names)} {status}")
    return "\n".join(lines) + "\n"


def _preview(value: Any, width: int = 100) -> str:
    if attrs.has(type(value)) or isinstance(value, (list, tuple, dict)):
        value = RESULT_CONVERTER.unstructure(value)
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_summary(result: WorkflowResult) -> str:
    """The readable summary ``dsh-orchestra run`` prints."""
    first = f", first failure: {result.first_failure!r}" if result.first_failure else ""
    lines = [f"workflow {result.name!r}: {result.status} in {result.duration_s:.2f} s ({result.failure_policy}{first})"]
    width = max(len(name) for name in result.steps) if result.steps else 0
    for name, step in result.steps.items():
        parts = [f"{step.status:<11}", f"{step.duration_s:7.2f} s"]
        if _fanned(step):
            done = sum(1 for i in step.items if i.status == "ok")
            parts.append(f"{done}/{len(step.items)} items")
        if step.attempts > 1:
            parts.append(f"{step.attempts} attempts")
        reprompts = sum(i.reprompts for i in step.items)
        if reprompts:
            parts.append(f"{reprompts} re-prompt{'s' if reprompts != 1 else ''}")
        if step.subagents:
            parts.append(f"{len(step.subagents)} subagent{'s' if len(step.subagents) != 1 else ''}")
        if step.approvals:
            outcomes = ", ".join(f"{a.tool_name} {a.outcome}" for a in step.approvals)
            parts.append(f"approvals: {outcomes}")
        lines.append(f"  {name:<{width}}  " + "  ".join(parts))
        if step.status == "ok" and step.output is not None:
            lines.append(f"  {'':<{width}}  -> {_preview(step.output)}")
        for error in step.errors:
            lines.append(f"  {'':<{width}}  !! {error.type}: {_preview(error.message, 200)}")
        if step.reason and step.status != "ok" and not step.errors:
            lines.append(f"  {'':<{width}}  .. {step.reason}")
    for interrupt in result.pending:
        choices = f" [{'/'.join(interrupt.choices)}]" if interrupt.choices else ""
        lines.append(f"  pending {interrupt.id}: {interrupt.question}{choices}")
    return "\n".join(lines) + "\n"

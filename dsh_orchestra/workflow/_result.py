"""Workflow results: per-step status, timing, attempts, outputs, approvals, errors; JSON; Mermaid.

Pure: no trio, no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import attrs
import cattrs

from ..session import SubagentResult

StepStatus = Literal["ok", "failed", "skipped", "cancelled"]


@attrs.frozen(kw_only=True)
class StepError:
    """Why a step (or one of its items) failed."""

    type: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> StepError:
        return cls(type=type(exc).__name__, message=str(exc))


@attrs.frozen(kw_only=True)
class ApprovalNote:
    """One approval decided during a step."""

    session_id: str
    tool_name: str
    call_id: str | None
    outcome: str
    rule: str


@attrs.frozen(kw_only=True)
class ItemResult:
    """One run of a step (the whole step, or one fan-out item)."""

    index: int | None
    status: StepStatus
    output: Any = None
    attempts: int = 0
    session_id: str | None = None
    final_response: str | None = None
    finish_reason: str | None = None
    subagents: tuple[SubagentResult, ...] = ()
    subagent_outputs: tuple[Any, ...] = ()
    approvals: tuple[ApprovalNote, ...] = ()
    error: StepError | None = None
    duration_s: float = 0.0


@attrs.frozen(kw_only=True)
class StepResult:
    """What one step did."""

    name: str
    status: StepStatus
    output: Any = None
    attempts: int = 0
    started_s: float | None = None
    duration_s: float = 0.0
    items: tuple[ItemResult, ...] = ()
    approvals: tuple[ApprovalNote, ...] = ()
    subagents: tuple[SubagentResult, ...] = ()
    errors: tuple[StepError, ...] = ()
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@attrs.frozen(kw_only=True)
class WorkflowResult:
    """The whole run: each step's result, in definition order, and the edges for export."""

    name: str
    status: Literal["ok", "failed", "cancelled"]
    steps: dict[str, StepResult]
    edges: tuple[tuple[str, str, str], ...] = ()  # (from, to, kind: "dep" | "fan-out" | "route")
    duration_s: float = 0.0
    failure_policy: str = "fail-fast"

    @property
    def ok(self) -> bool:
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

    def errors(self) -> dict[str, tuple[StepError, ...]]:
        """The errors of every failed step."""
        return {name: s.errors for name, s in self.steps.items() if s.errors}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (outputs of attrs classes become objects)."""
        data: dict[str, Any] = RESULT_CONVERTER.unstructure(self)
        data["edges"] = [{"from": a, "to": b, "kind": k} for a, b, k in self.edges]
        return data

    def mermaid(self) -> str:
        """A Mermaid flowchart of the graph, each node annotated with its status and time."""
        return to_mermaid(self)


RESULT_CONVERTER = cattrs.Converter()

_STYLE = {
    "ok": "fill:#d7f5dd,stroke:#2e7d32",
    "failed": "fill:#fbd5d5,stroke:#c62828",
    "skipped": "fill:#eeeeee,stroke:#9e9e9e,stroke-dasharray:4",
    "cancelled": "fill:#fff3cd,stroke:#b26a00",
}


def _node_id(name: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


def _label(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def to_mermaid(result: WorkflowResult) -> str:
    """Mermaid ``flowchart TD`` text for ``result``."""
    lines = ["flowchart TD"]
    for name, step in result.steps.items():
        detail = f"{step.status}, {step.duration_s:.2f} s"
        if step.items:
            detail += f", {len(step.items)} items"
        if step.attempts > 1:
            detail += f", {step.attempts} attempts"
        lines.append(f'    {_node_id(name)}["{_label(name)}<br/>{_label(detail)}"]')
    arrows = {"dep": "-->", "fan-out": "==>", "route": "-.->"}
    for source, target, kind in result.edges:
        label = "|fan-out|" if kind == "fan-out" else "|route|" if kind == "route" else ""
        lines.append(f"    {_node_id(source)} {arrows[kind]}{label} {_node_id(target)}")
    for status, style in _STYLE.items():
        names = [_node_id(n) for n, s in result.steps.items() if s.status == status]
        if names:
            lines.append(f"    classDef {status} {style}")
            lines.append(f"    class {','.join(names)} {status}")
    return "\n".join(lines) + "\n"

"""The type an interrupt's answer must have, derived from the Python side: the return
annotation of the step that asks (``-> int``, ``-> float``, ``-> bool``) when the interrupt
offers no choices. Neither the wire nor the checkpoint records a type, so a command line
checks an answer against the workflow's code, as the engine checks any answer."""

from __future__ import annotations

import math
import re
from typing import Any

from ._fingerprint import declared_output
from ._graph import Step, Workflow
from ._result import Interrupt

ANSWER_TYPES: dict[type, str] = {bool: "true or false (also yes/no)", int: "an integer", float: "a number"}
"""The annotations that type an answer, and how a message names each."""

_TRUE = frozenset({"true", "yes", "y", "1"})
_FALSE = frozenset({"false", "no", "n", "0"})
_INTEGER = re.compile(r"[+-]?\d+")


def step_type(step: Step | None, choices: tuple[str, ...] | list[str] | None) -> type | None:
    """The type the answers of ``step``'s interrupts must have (None: any text): its return
    annotation when it is ``int``, ``float`` or ``bool`` and the interrupt has no choices."""
    if step is None or choices:
        return None
    kind = declared_output(step)
    return kind if kind in ANSWER_TYPES else None


def step_at(workflow: Workflow, path: str) -> Step | None:
    """The step an interrupt's path names (``review[2]`` → ``review``; ``sub[1]/ask`` → the
    step ``ask`` of the subworkflow ``sub``); None when the workflow has none."""
    current: Workflow | None = workflow
    step: Step | None = None
    for part in path.split("/"):
        if current is None:
            return None
        step = current.steps.get(re.sub(r"\[\d+\]\Z", "", part))
        if step is None:
            return None
        current = step.subworkflow
    return step


def answer_type(workflow: Workflow, interrupt: Interrupt) -> type | None:
    """The type ``interrupt``'s answer must have in ``workflow`` (None: any text)."""
    return step_type(step_at(workflow, interrupt.step), interrupt.choices)


def typed_answer(interrupt_id: str, kind: type | None, answer: str) -> Any:
    """``answer`` read as ``kind`` (``answer`` itself when ``kind`` is None).

    Raises:
        ValueError: naming the interrupt, the answer and the type expected.
    """
    if kind is None:
        return answer
    text = answer.strip()
    value: Any = None
    if kind is bool:
        value = True if text.lower() in _TRUE else False if text.lower() in _FALSE else None
    elif kind is int and _INTEGER.fullmatch(text):
        value = int(text)
    elif kind is float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is not None and not math.isfinite(value):
            value = None
    if value is None:
        raise ValueError(f"the answer {answer!r} to interrupt {interrupt_id!r} must be {ANSWER_TYPES[kind]}: its step "
                         f"is annotated -> {kind.__name__}")
    return value

"""Step fingerprints: a digest of a step's definition, to tell a changed step on resume.

Covers what the step is (its kind, template or function source, dependencies, fan-out source,
declared types, named session, the route it decides) and not how it runs (timeouts, retries,
backoff, concurrency, parse attempts). Function source comes from ``inspect.getsource``; where
there is none (a function built at run time) the code object's bytecode and constants stand in.
A global a template reads is not covered: changing it is not seen as a change. Pure.
"""

from __future__ import annotations

import hashlib
import inspect
import typing
from typing import Any, Callable

import attrs
import orjson

from ._graph import Step, Workflow


def source_of(fn: Callable[..., Any]) -> str:
    """The source text of ``fn`` (the bytecode and constants when it has no source file)."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        if code is None:
            return repr(fn)
        return f"{code.co_code.hex()}:{code.co_consts!r}:{code.co_names!r}"


def describe_type(kind: Any, depth: int = 0) -> str:
    """A type's name and, for attrs classes, its fields with their types (nested ones too)."""
    if kind is None:
        return "None"
    name = getattr(kind, "__qualname__", None) or repr(kind)
    if isinstance(kind, type) and attrs.has(kind) and depth < 4:
        try:
            hints = typing.get_type_hints(kind)
        except Exception:  # noqa: BLE001 (unresolvable annotations: their text stands in)
            hints = {}
        fields = ", ".join(
            f"{f.name}: {describe_type(hints.get(f.name, f.type), depth + 1)}" for f in attrs.fields(kind)
        )
        return f"{name}({fields})"
    args = typing.get_args(kind)
    if args:
        origin = typing.get_origin(kind)
        return f"{getattr(origin, '__qualname__', repr(origin))}[{', '.join(describe_type(a, depth + 1) for a in args)}]"
    return str(name)


def declared_output(step: Step) -> Any:
    """The type a step's (or each item's) output has: ``output=``, a function's return annotation,
    ``str`` for an untyped prompt step; None when undeclared."""
    if step.subworkflow is not None:
        return None
    if step.prompts:
        return step.output if step.output is not None else str
    if step.fn is None:
        return None
    try:
        return typing.get_type_hints(step.fn).get("return")
    except Exception:  # noqa: BLE001 (unresolvable annotation: undeclared)
        return None


def fingerprint(workflow: Workflow, name: str) -> str:
    """The hex digest of step ``name``'s definition in ``workflow``."""
    step = workflow.steps[name]
    parts: dict[str, Any] = {
        "name": step.name,
        "depends_on": list(workflow.dependencies(name)),
        "fan_out": step.fan_out,
        "session": step.session,
        "subagent_output": describe_type(step.subagent_output),
    }
    child = step.subworkflow
    if child is not None:
        parts["kind"] = "subworkflow"
        parts["workflow"] = child.name
    elif step.prompts:
        parts["kind"] = "prompt"
        parts["template"] = step.template if isinstance(step.template, str) else source_of(step.template)  # type: ignore[arg-type]
        parts["output"] = describe_type(step.output)
    else:
        assert step.fn is not None
        parts["kind"] = "function"
        parts["source"] = source_of(step.fn)
        parts["output"] = describe_type(declared_output(step))
    route = workflow.routes.get(name)
    if route is not None:
        parts["route"] = {"targets": list(route.targets), "choose": source_of(route.choose)}
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def digest(value: Any) -> str:
    """A short digest of a JSON value (the workflow inputs); ``default=repr`` for the rest."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=repr)).hexdigest()[:32]

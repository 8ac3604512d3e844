"""Typed outputs: find the JSON in a final response and structure it into an attrs class.

Pure: no trio, no I/O. The JSON is the last fenced ```json block (or any fenced block holding
JSON), else the whole text.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import attrs
import cattrs
import orjson

T = TypeVar("T")

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
OUTPUT_CONVERTER = cattrs.Converter(forbid_extra_keys=False)


class OutputParseError(ValueError):
    """A final response did not hold valid JSON for the declared output type."""

    def __init__(self, type_name: str, problem: str) -> None:
        super().__init__(f"the response is not a valid {type_name}: {problem}")
        self.type_name = type_name
        self.problem = problem


def extract_json(text: str) -> Any:
    """The JSON value in ``text``: a fenced block first (the last one that parses), else the text.

    Raises:
        OutputParseError: no JSON found.
    """
    for block in reversed(_FENCE.findall(text)):
        try:
            return orjson.loads(block.strip())
        except orjson.JSONDecodeError:
            continue
    stripped = text.strip()
    try:
        return orjson.loads(stripped)
    except orjson.JSONDecodeError as exc:
        raise OutputParseError("JSON document", f"no JSON found (a ```json fenced block or a bare JSON text): {exc}") from exc


def parse_output(text: str, cls: type[T]) -> T:
    """Structure the JSON of ``text`` into ``cls`` (an attrs class or any cattrs-known type).

    Raises:
        OutputParseError: no JSON, or it does not fit ``cls`` (the message lists the problems).
    """
    name = getattr(cls, "__name__", repr(cls))
    try:
        value = extract_json(text)
    except OutputParseError as exc:
        raise OutputParseError(name, exc.problem) from exc
    if attrs.has(cls) and not isinstance(value, dict):
        raise OutputParseError(name, f"expected a JSON object, not {type(value).__name__}")
    try:
        return OUTPUT_CONVERTER.structure(value, cls)
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(cattrs.transform_error(exc, path="$"))
        raise OutputParseError(name, problems) from exc
    except (TypeError, ValueError) as exc:
        raise OutputParseError(name, str(exc)) from exc


def repair_prompt(error: OutputParseError, cls: type) -> str:
    """The message that asks the same session to fix its answer."""
    fields = ""
    if attrs.has(cls):
        fields = ", ".join(f"{f.name}: {getattr(f.type, '__name__', f.type)}" for f in attrs.fields(cls))
        fields = f" with the fields {{{fields}}}"
    return (
        f"Your previous answer could not be used: {error}. Reply again with only a JSON object{fields}, "
        "in a ```json fenced block."
    )

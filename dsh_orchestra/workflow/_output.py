"""Typed outputs: find the JSON in a final response and structure it into an attrs class.

Pure: no trio, no I/O. The JSON is the last fenced ```json block (or any fenced block holding
JSON), else the whole text.
"""

from __future__ import annotations

import re
from collections import abc
from typing import Any, Callable, TypeVar, get_args, get_origin

import attrs
import cattrs
import orjson
from cattrs.errors import IterableValidationError, IterableValidationNote
from cattrs.v import format_exception

from ..protocol import strict_scalars

T = TypeVar("T")

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


_COLLECTIONS = (list, tuple, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Set, abc.MutableSet)


def _make_converter() -> cattrs.Converter:
    """A strict converter: a model's ``"false"`` is not ``True``, ``"none"`` is not a list of letters.

    Scalars must have their JSON type (an integer is accepted for a float), and collections
    must be JSON arrays; extra keys are ignored.
    """
    conv = cattrs.Converter(forbid_extra_keys=False)
    strict_scalars(conv)

    def collection(target: Any) -> Callable[[Any, Any], Any]:
        origin = get_origin(target) or target
        args = get_args(target)
        fixed = origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis)
        item: Any = args[0] if args else Any

        def structure(raw: Any, _: Any) -> Any:
            if not isinstance(raw, list):
                raise TypeError(f"expected a JSON array, not {type(raw).__name__} {raw!r}"[:200])
            if fixed and len(raw) != len(args):
                raise TypeError(f"expected an array of {len(args)} values, not {len(raw)}")
            out, errors = [], []
            for index, value in enumerate(raw):
                try:
                    out.append(conv.structure(value, args[index] if fixed else item))
                except Exception as exc:  # noqa: BLE001 (collected into the group below)
                    exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(f"@ index {index}", index, item)]
                    errors.append(exc)
            if errors:
                raise IterableValidationError("while structuring an array", errors, target)
            if origin in (set, frozenset, abc.Set, abc.MutableSet):
                return (frozenset if origin is frozenset else set)(out)
            return tuple(out) if origin is tuple else out

        return structure

    def is_collection(target: Any) -> bool:
        origin: Any = get_origin(target) or target
        return origin in _COLLECTIONS

    conv.register_structure_hook_factory(is_collection, collection)
    return conv


OUTPUT_CONVERTER = _make_converter()


def _describe(exc: BaseException, target: Any) -> str:
    """Our own type errors say what was found; cattrs' say what was expected."""
    text = str(exc)
    if isinstance(exc, TypeError) and text.startswith("expected"):
        return text
    return format_exception(exc, target)


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
        problems = "; ".join(cattrs.transform_error(exc, path="$", format_exception=_describe))
        raise OutputParseError(name, problems) from exc
    except (TypeError, ValueError) as exc:
        raise OutputParseError(name, str(exc)) from exc


def _type_name(kind: Any) -> str:
    if isinstance(kind, str):  # postponed annotations
        return kind
    if isinstance(kind, type) and not get_args(kind):
        return kind.__name__
    return repr(kind).replace("typing.", "")


REPAIR_PREFIX = "Your previous answer could not be used"
"""How every repair prompt starts (scenario scripts can match it)."""


def repair_prompt(error: OutputParseError, cls: type) -> str:
    """The message that asks the same session to fix its answer (starts with REPAIR_PREFIX)."""
    fields = ""
    if attrs.has(cls):
        fields = ", ".join(f"{f.name}: {_type_name(f.type)}" for f in attrs.fields(cls))
        fields = f" with the fields {{{fields}}}"
    return (
        f"{REPAIR_PREFIX}: {error}. Reply again with only a JSON object{fields}, "
        "in a ```json fenced block."
    )

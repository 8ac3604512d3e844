"""The one cattrs converter that maps wire classes to exact wire JSON and back.

Pure: no trio, no I/O. snake_case attributes become camelCase wire names; an optional left at
its default is omitted, never sent as null; scalars are strict (no silent ``1 -> "1"``).
Inbound data that breaks the protocol raises SdkProtocolError naming the method and path.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Literal, TypeVar, get_origin

import attrs
import cattrs
from cattrs.errors import IterableValidationError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ._content import (
    AttachedImageBlock,
    ContentBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    UnknownBlock,
)
from ._errors import SdkProtocolError
from ._events import EVENT_CLASSES, SessionEvent, UnknownEvent

T = TypeVar("T")


def camel(name: str) -> str:
    """``session_id`` -> ``sessionId``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _exactly(kind: type) -> Callable[[Any, type], Any]:
    def check(value: Any, _: type) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, not {type(value).__name__} {value!r}")
        return value

    return check


def _float(value: Any, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, not {type(value).__name__} {value!r}")
    return float(value)


def strict_scalars(conv: cattrs.Converter) -> None:
    """Make ``conv``'s str, int and bool exact and its float any number but a bool (register
    before the class hooks, which capture these); also the typed outputs' converter."""
    for kind in (str, int, bool):
        conv.register_structure_hook(kind, _exactly(kind))
    conv.register_structure_hook(float, _float)


def _block_hooks(conv: cattrs.Converter) -> None:
    def structure_block(raw: Any, _: Any) -> ContentBlock:
        if not isinstance(raw, dict):
            raise TypeError(f"a content block must be an object, not {type(raw).__name__}")
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise TypeError("a content block needs a string 'type'")
        if kind == "text":
            return conv.structure(raw, TextBlock)
        if kind == "reasoning":
            return conv.structure(raw, ReasoningBlock)
        if kind == "tool-call":
            return conv.structure(raw, ToolCallBlock)
        if kind == "image":
            if "attachment" in raw:
                return conv.structure(raw, AttachedImageBlock)
            return conv.structure(raw, ImageBlock)
        return UnknownBlock(type=kind, raw=dict(raw))

    def structure_unknown(raw: Any, _: Any) -> UnknownBlock:  # the twin of the hook below
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            raise TypeError("a content block must be an object with a string 'type'")
        return UnknownBlock(type=raw["type"], raw=dict(raw))

    conv.register_structure_hook_func(lambda t: t == ContentBlock, structure_block)
    conv.register_structure_hook(UnknownBlock, structure_unknown)
    conv.register_unstructure_hook(UnknownBlock, lambda block: dict(block.raw))

    def unstructure_block(block: Any) -> Any:
        # A block already in wire form (the session layer's validated dicts) is sent as it
        # is; cattrs' default union hook would walk it key by key (10 us a prompt).
        return block if type(block) is dict else conv.unstructure(block)

    conv.register_unstructure_hook_func(lambda t: t == ContentBlock, unstructure_block)


def _event_hooks(conv: cattrs.Converter) -> None:
    def structure_event(raw: Any, _: Any) -> SessionEvent:
        if not isinstance(raw, dict):
            raise TypeError(f"a session event must be an object, not {type(raw).__name__}")
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise TypeError("a session event needs a string 'type'")
        cls = EVENT_CLASSES.get(kind, UnknownEvent)
        result: Any = conv.structure(raw, cls)  # one member of the SessionEvent union
        return result  # type: ignore[no-any-return]

    conv.register_structure_hook_func(lambda t: t == SessionEvent, structure_event)


def make_converter(*, forbid_extra_keys: bool = False) -> cattrs.Converter:
    """Build the wire converter; tests use the strict twin (``forbid_extra_keys=True``)."""
    conv = cattrs.Converter()
    strict_scalars(conv)

    def list_factory(target: Any) -> Any:
        (item,) = getattr(target, "__args__", (Any,))
        def structure_list(raw: Any, _: Any) -> list[Any]:
            if not isinstance(raw, list):
                raise TypeError(f"expected a list, not {type(raw).__name__}")
            out, errors = [], []
            for index, value in enumerate(raw):
                try:
                    out.append(conv.structure(value, item))
                except Exception as exc:  # noqa: BLE001 (collected into the group below)
                    note = IterableValidationNote(f"@ index {index}", index, item)
                    exc.__notes__ = [*getattr(exc, "__notes__", []), note]
                    errors.append(exc)
            if errors:
                raise IterableValidationError("while structuring a list", errors, target)
            return out
        return structure_list

    def is_list(target: Any) -> bool:
        origin: Any = get_origin(target)
        return origin is list

    conv.register_structure_hook_factory(is_list, list_factory)

    def renames(cls: type, *, unstructure: bool) -> dict[str, Any]:
        out = {}
        for field in attrs.fields(cls):
            keep = unstructure and field.name == "type"  # a block's type is always sent
            out[field.name] = override(
                rename=camel(field.name), omit_if_default=False if keep else None
            )
        return out

    def unstructure_factory(cls: type) -> Any:
        return make_dict_unstructure_fn(
            cls, conv, _cattrs_omit_if_default=True, **renames(cls, unstructure=True)
        )

    def structure_factory(cls: type) -> Any:
        generated: Callable[[Any, Any], Any] = make_dict_structure_fn(
            cls,
            conv,
            _cattrs_forbid_extra_keys=forbid_extra_keys,
            **renames(cls, unstructure=False),
        )

        def structure_object(raw: Any, target: Any) -> Any:
            if not isinstance(raw, dict):  # else cattrs fails with "string indices must be..."
                raise TypeError(f"expected an object, not {type(raw).__name__}")
            return generated(raw, target)

        return structure_object

    conv.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    conv.register_structure_hook_factory(attrs.has, structure_factory)
    _block_hooks(conv)
    _event_hooks(conv)
    return conv


CONVERTER = make_converter()


_WIRE_PATH = re.compile(r"\.([a-z][a-z0-9_]*)")


def _describe(exc: BaseException, target: Any) -> str:
    """One problem in words: our hooks' messages verbatim, cattrs' defaults otherwise."""
    if isinstance(exc, KeyError):
        return "required field missing"
    args = getattr(target, "__args__", None)
    if getattr(target, "__origin__", None) is Literal and args:
        return f"expected one of {', '.join(map(repr, args))}"
    if isinstance(exc, (TypeError, ValueError)) and str(exc):
        return str(exc)
    name = getattr(target, "__name__", None) or repr(target)
    return f"invalid value, expected {name}"


_UNSTRUCTURE_HOOKS: dict[type, Callable[[Any], Any]] = {}


def unstructure(value: Any) -> Any:
    """Wire JSON of a wire class instance (or of plain JSON, unchanged).

    The same as ``CONVERTER.unstructure(value)``, with each class's hook looked up once:
    cattrs' dispatch costs more than the generated hook itself (3.8 against 0.3 us for
    ``SessionIdParams``), on every request the session layer sends.
    """
    cls = type(value)
    hook = _UNSTRUCTURE_HOOKS.get(cls)
    if hook is None:
        hook = _UNSTRUCTURE_HOOKS[cls] = CONVERTER.get_unstructure_hook(cls)
    return hook(value)


def structure(raw: Any, cls: type[T], *, method: str, what: str = "params") -> T:
    """Structure inbound ``raw`` as ``cls``, raising SdkProtocolError naming method and path."""
    if attrs.has(cls) and not isinstance(raw, dict):
        raise SdkProtocolError(
            f"{what} of {method!r} must be an object, not {type(raw).__name__}",
            method=method,
            path=what,
        )
    try:
        return CONVERTER.structure(raw, cls)
    except cattrs.BaseValidationError as exc:
        problems = [
            _WIRE_PATH.sub(lambda m: "." + camel(m.group(1)), problem)
            for problem in cattrs.transform_error(exc, path=what, format_exception=_describe)
        ]
        first_path = problems[0].split("@ ", 1)[-1] if problems else what
        raise SdkProtocolError(
            f"invalid {what} for {method!r}: {'; '.join(problems)}",
            method=method,
            path=first_path,
        ) from exc
    except (TypeError, ValueError) as exc:
        raise SdkProtocolError(
            f"invalid {what} for {method!r}: {exc} @ {what}", method=method, path=what
        ) from exc

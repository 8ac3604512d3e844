"""Hypothesis strategies for every wire class, built from its attrs fields (no trio).

``WIRE_CLASSES`` is every attrs class the protocol package defines; ``instances(cls)`` draws
valid instances of one of them. Event envelopes get the ``type`` their class is registered
under (so they also survive the ``SessionEvent`` union), ``UnknownEvent`` / ``UnknownBlock``
get a type nobody models, and an ``UnknownBlock``'s ``raw`` carries its own ``type``.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import attrs
from hypothesis import strategies as st

from dsh_orchestra.protocol import (
    EVENT_CLASSES,
    ContentBlock,
    SessionEvent,
    UnknownBlock,
    UnknownEvent,
    _content,
    _events,
    _jsonrpc,
    _wire,
)

WIRE_CLASSES: list[type] = sorted(
    {
        value
        for module in (_content, _events, _wire, _jsonrpc)
        for name, value in vars(module).items()
        if isinstance(value, type) and attrs.has(value) and value.__module__.startswith("dsh_orchestra")
        and not name.startswith("_")  # defined in the protocol (its __module__ is the public path)
    },
    key=lambda cls: cls.__name__,
)

EVENT_TYPE_OF = {cls: kind for kind, cls in EVENT_CLASSES.items() if list(EVENT_CLASSES.values()).count(cls) == 1}
KNOWN_BLOCK_TYPES = {"text", "reasoning", "tool-call", "image"}

SAFE_INT = st.integers(-(2**53), 2**53)
json_scalars = st.one_of(
    st.none(), st.booleans(), SAFE_INT, st.text(max_size=6), st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6,
)
json_objects = st.dictionaries(st.text(max_size=5), json_values, max_size=3)


def of_type(tp: Any) -> st.SearchStrategy[Any]:
    """Values of annotation ``tp``."""
    if tp is Any:
        return json_values
    if tp is str:
        return st.text(max_size=8)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return SAFE_INT
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if tp is type(None):
        return st.none()
    if tp == ContentBlock:
        return st.one_of([instances(cls) for cls in get_args(ContentBlock)])
    if tp == SessionEvent:
        return st.one_of([instances(cls) for cls in get_args(SessionEvent)])
    origin = get_origin(tp)
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if origin is list:
        (item,) = get_args(tp)
        return st.lists(of_type(item), max_size=3)
    if origin is dict:
        return json_objects
    if origin in (Union, types.UnionType):
        return st.one_of([of_type(arg) for arg in get_args(tp)])
    if attrs.has(tp):
        return instances(tp)
    raise NotImplementedError(f"no strategy for {tp!r}")


@st.composite
def _unknown_block(draw: st.DrawFn) -> UnknownBlock:
    kind = draw(st.text(min_size=1, max_size=8).filter(lambda t: t not in KNOWN_BLOCK_TYPES))
    raw = draw(json_objects)
    return UnknownBlock(type=kind, raw={**raw, "type": kind})


_cache: dict[type, st.SearchStrategy[Any]] = {}


def instances(cls: type) -> st.SearchStrategy[Any]:
    """Valid instances of the wire class ``cls``."""
    if cls in _cache:
        return _cache[cls]
    if cls is UnknownBlock:
        strategy: st.SearchStrategy[Any] = _unknown_block()
    else:
        hints = typing.get_type_hints(cls)
        fields: dict[str, st.SearchStrategy[Any]] = {}
        for field in attrs.fields(cls):
            if field.name == "type" and cls in EVENT_TYPE_OF:
                fields["type"] = st.just(EVENT_TYPE_OF[cls])
            elif field.name == "type" and cls is UnknownEvent:
                fields["type"] = st.text(max_size=12).filter(lambda t: t not in EVENT_CLASSES)
            else:
                fields[field.name] = of_type(hints[field.name])
        strategy = st.builds(cls, **fields)
    _cache[cls] = strategy
    return strategy

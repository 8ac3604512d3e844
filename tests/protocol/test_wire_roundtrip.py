"""Every wire class round-trips through the converter and looks exactly right on the wire. No trio.

Properties, for every attrs class of the protocol package (strategies built from its fields):

* ``structure(unstructure(x)) == x``, with the lenient converter and with the strict twin
  (``forbid_extra_keys=True``), also after an orjson encode/decode (what the wire does);
* the unstructured dict has exactly the camelCase names of the fields that are set: an
  optional left at its default is omitted, never sent as null.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import WIRE_CLASSES, instances

from dsh_orchestra.protocol import (
    CONVERTER,
    NOTIFICATIONS,
    REQUESTS,
    UnknownBlock,
    camel,
    make_converter,
    unstructure,
)

STRICT = make_converter(forbid_extra_keys=True)


def assert_wire_shape(value: Any, raw: Any, where: str = "$") -> None:
    """``raw`` is exactly the wire form of ``value``: camelCase keys, no null for omitted optionals."""
    if isinstance(value, UnknownBlock):
        assert raw == value.raw, where
        return
    if isinstance(value, list):
        assert isinstance(raw, list) and len(raw) == len(value), where
        for index, (item, raw_item) in enumerate(zip(value, raw, strict=True)):
            assert_wire_shape(item, raw_item, f"{where}[{index}]")
        return
    if not attrs.has(type(value)):
        assert raw == value, where
        return
    assert isinstance(raw, dict), where
    expected_keys = set()
    for field in attrs.fields(type(value)):
        key = camel(field.name)
        assert "_" not in key, f"{where}.{key} is not camelCase"
        item = getattr(value, field.name)
        omitted = field.default is not attrs.NOTHING and item == field.default and field.name != "type"
        if omitted:
            assert key not in raw, f"{where}.{key}: an optional left at its default must be omitted"
            continue
        expected_keys.add(key)
        assert key in raw, f"{where}.{key} missing"
        assert_wire_shape(item, raw[key], f"{where}.{key}")
    assert set(raw) == expected_keys, where
    assert None not in (raw[key] for key in raw if _optional(type(value), key)), where


def _optional(cls: type, key: str) -> bool:
    return any(camel(f.name) == key and f.default is None for f in attrs.fields(cls))


def test_there_is_a_strategy_for_every_params_and_result_class() -> None:
    classes = set(WIRE_CLASSES)
    for params, result in REQUESTS.values():
        assert params in classes and result in classes
    assert set(NOTIFICATIONS.values()) <= classes
    assert len(WIRE_CLASSES) > 80


@pytest.mark.parametrize("cls", WIRE_CLASSES, ids=lambda cls: cls.__name__)
@given(data=st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_round_trip(cls: type, data: st.DataObject) -> None:
    """structure(unstructure(x)) == x, on the lenient and the strict converter, through JSON."""
    value = data.draw(instances(cls))
    for field in attrs.fields(cls)[:1]:  # and every wire class is frozen
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(value, field.name, getattr(value, field.name))
    raw = unstructure(value)
    assert_wire_shape(value, raw)
    assert CONVERTER.structure(raw, cls) == value
    assert STRICT.structure(raw, cls) == value
    assert CONVERTER.structure(orjson.loads(orjson.dumps(raw)), cls) == value

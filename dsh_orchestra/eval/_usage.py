"""Token usage over a session tree, the prices file and cost.

Usage is summed over every ``assistant/message`` (one per successful model step) of a turn's
root events and of its descendants' (subagents') ``session.event`` notifications. Pure apart
from ``load_prices`` reading one file.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs
import orjson

from .._params import Param, ParamError
from ..protocol import SESSION_EVENT
from ..results import Usage

_ASSISTANT = b'"assistant/message"'
_ASSISTANT_START = b'{"type":"assistant/message"'
_TYPE_START = b'{"type":"'
_HEAD, _TYPE_HEAD = len(_ASSISTANT_START), len(_TYPE_START)


def _count(value: Any) -> int:
    if type(value) is int:  # the common case, checked first
        return value if value > 0 else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def step_usage(event: Mapping[str, Any]) -> Usage:
    """The usage one ``assistant/message`` event reports (zeros when it reports none).

    ``total_tokens`` is the runtime's ``totalTokens`` when given, else input + output.
    """
    data = event.get("data")
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return Usage()
    inputs, outputs = _count(usage.get("inputTokens")), _count(usage.get("outputTokens"))
    total = usage.get("totalTokens")
    return Usage(inputs, outputs, _count(total) if total is not None else inputs + outputs)


def events_usage(events: Iterable[Mapping[str, Any]]) -> Usage:
    """The summed usage of the ``assistant/message`` events among ``events``."""
    inputs = outputs = totals = 0
    for event in events:
        if event.get("type") == "assistant/message":
            data = event.get("data")
            usage = data.get("usage") if isinstance(data, dict) else None
            if isinstance(usage, dict):  # as step_usage, without a Usage per step
                step_in, step_out = _count(usage.get("inputTokens")), _count(usage.get("outputTokens"))
                total = usage.get("totalTokens")
                inputs += step_in
                outputs += step_out
                totals += _count(total) if total is not None else step_in + step_out
    return Usage(inputs, outputs, totals)


def turn_usage(turn: Any) -> Usage:
    """The usage of a ``TurnResult``: its root events plus every descendant's model steps.

    Root events are scanned as raw JSON and only the model steps are decoded.
    """
    steps: list[Mapping[str, Any]] = []
    events = turn.events
    raw = getattr(events, "raw", None)
    if raw is not None:
        for line in raw:
            # Decoded only when it may be a model step: a line that starts with another "type"
            # is another event, whatever its payload quotes (no search through it); any other
            # line is searched for the type once. (Slices and ``find``: ``startswith`` parses
            # its arguments, and ``bytes in bytes`` raises and clears a TypeError first.)
            head = line[:_HEAD]
            if head == _ASSISTANT_START or (head[:_TYPE_HEAD] != _TYPE_START and line.find(_ASSISTANT) >= 0):
                steps.append(orjson.loads(line))
    else:
        steps.extend(events)
    for notification in turn.notifications:
        if notification.method == SESSION_EVENT:
            event = notification.params.get("event")
            if isinstance(event, dict):
                steps.append(event)
    return events_usage(steps)


class PricesError(ParamError, ValueError):
    """The prices file is unreadable or malformed, or has no price for the route; the message
    says what to fix and starts with the parameter (``.param``: ``prices``).

    ``PricesError(text)`` says ``prices: <text>`` (the CLI spells the parameter as its flag).
    """

    def __init__(self, *parts: str | Param) -> None:
        if len(parts) == 1 and isinstance(parts[0], str):
            parts = (Param("prices", spelled="prices"), ": ", parts[0])
        super().__init__(*parts)


@attrs.frozen
class Price:
    """USD per million input and output tokens of one route."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, usage: Usage) -> float:
        """``(input_tokens × input_per_mtok + output_tokens × output_per_mtok) / 1e6``."""
        return (usage.input_tokens * self.input_per_mtok + usage.output_tokens * self.output_per_mtok) / 1e6


@attrs.frozen
class Prices:
    """The prices file: a ``Price`` per ``"provider/model"`` route."""

    routes: Mapping[str, Price]
    source: str = "<prices>"

    def price(self, provider: str, model: str) -> Price:
        """The price of route ``provider/model``.

        Raises:
            PricesError: the file has no table for that route.
        """
        route = f"{provider}/{model}"
        try:
            return self.routes[route]
        except KeyError:
            known = ", ".join(sorted(self.routes)) or "none"
            raise PricesError(
                f"prices file {self.source!r} has no table for route {route!r} (it has: {known}); "
                f'add ["{route}"] with input_per_mtok and output_per_mtok'
            ) from None


def parse_prices(data: Mapping[str, Any], *, source: str = "<prices>") -> Prices:
    """Check a parsed prices TOML document: ``["provider/model"]`` tables of two prices.

    Raises:
        PricesError: a table is malformed (the message names it and the key).
    """
    routes: dict[str, Price] = {}
    for route, table in data.items():
        where = f"prices file {source!r}: [{route!r}]"
        provider, sep, model = route.partition("/")
        if not sep or not provider or not model:
            raise PricesError(f'{where}: a table name must be "provider/model" (quote it: ["deepseek-official/deepseek-v4-flash"])')
        if not isinstance(table, dict):
            raise PricesError(f"{where}: must be a table with input_per_mtok and output_per_mtok")
        unknown = sorted(set(table) - {"input_per_mtok", "output_per_mtok"})
        if unknown:
            raise PricesError(f"{where}: unknown key(s) {unknown}; expected input_per_mtok and output_per_mtok")
        values = []
        for key in ("input_per_mtok", "output_per_mtok"):
            value = table.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise PricesError(f"{where}: {key} must be a number >= 0 (USD per million tokens), not {value!r}")
            values.append(float(value))
        routes[route] = Price(*values)
    return Prices(routes, source)


def load_prices(path: str | os.PathLike[str]) -> Prices:
    """Read a prices TOML file (see ``parse_prices``).

    Raises:
        PricesError: unreadable, not TOML, or malformed.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PricesError(f"cannot read prices file {str(path)!r}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PricesError(f"prices file {str(path)!r} is not valid TOML: {exc}") from exc
    return parse_prices(data, source=str(path))

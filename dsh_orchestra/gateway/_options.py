"""GatewayOptions: how the model gateway of a run behaves (docs/gateway.md)."""

from __future__ import annotations

import math
import os
from typing import Any

import attrs

from .._params import Check, Param, ParamValueError, integer, non_negative, one_of
from ._budget import PerMtok

DEFAULT_UPSTREAM = "https://api.deepseek.com/anthropic"
"""The provider's endpoint (``deepseek-official``) when neither ``upstream`` nor the user's
``DEEPSEEK_BASE_URL`` names one; the runtime appends ``/v1/messages``."""
DEFAULT_API_KEY_ENV = "DEEPSEEK_API_KEY"
CACHE_MODES = ("use", "record", "replay")
CACHE_EPOCHS = ("independent", "shared")
MAX_ATTEMPTS = 8
"""Attempts per call when the provider answers 429/529/overloaded or cannot be reached (the pauses
between them: 1, 2, 4, 8, 16, 30, 30 s at most, each jittered to 50-100 %: about 90 s in all)."""


def _concurrency(value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    integer(1, "an integer >= 1 or 'auto'").check("model_concurrency", value)
    return int(value)


def parse_rate(value: Any) -> float | None:
    """A rate of calls a second from a number, ``"R/s"``, ``"R/min"`` or ``"R"`` (None stays None).

    Raises:
        ParamValueError: not a positive finite rate.
    """
    if value is None:
        return None
    rate = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        rate = float(value)
    elif isinstance(value, str):
        number, _, unit = value.strip().partition("/")
        scale = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 1 / 60}.get(unit.strip())
        try:
            rate = float(number) * scale if scale is not None else math.nan
        except ValueError:
            pass
    if not (math.isfinite(rate) and rate > 0):
        raise ParamValueError(Param("model_rate", value), " must be a positive rate like 20/s or 600/min")
    return rate


def _is_price(value: Any) -> bool:
    numbers = [getattr(value, name, None) for name in ("input_per_mtok", "output_per_mtok")]
    return all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) and n >= 0 for n in numbers)


_price = Check(_is_price, "a price with finite input_per_mtok and output_per_mtok >= 0 (e.g. dsh_orchestra.eval.Price)")


def _path(value: Any) -> str | None:
    return None if value is None else os.fspath(value)


@attrs.frozen(kw_only=True)
class GatewayOptions:
    """How a run's model gateway behaves (docs/gateway.md).

    ``upstream``: the provider's base URL (default: ``DEEPSEEK_BASE_URL`` as the runtime spec or
    the environment had it, else ``DEFAULT_UPSTREAM``). ``api_key_env``: the variable holding
    the real key (the spec's ``api_key`` wins). ``model_concurrency``: upstream calls in flight,
    an integer or ``"auto"`` (AIMD). ``model_rate``: upstream calls started a second at most
    (a number, ``"R/s"`` or ``"R/min"``; None: no pacing), spaced evenly. Under Ray both are
    limits for the whole run, shared between the nodes' gateways (docs/scale-out.md). ``cache`` (a directory) with ``cache_mode`` ``use`` |
    ``record`` | ``replay`` and ``cache_epochs`` ``independent`` | ``shared``.
    ``max_attempts``: tries per call on 429/529/overloaded or an unreachable provider (a 429
    to a call sent before the gateway slowed down does not count; at most twice as many tries in all).
    ``max_total_tokens`` / ``max_total_cost`` (USD, needs ``price``): once the calls forwarded
    upstream counted that much, no further call is forwarded (docs/gateway.md#budgets).
    ``price`` (USD per million tokens, e.g. ``dsh_orchestra.eval.Price``): the calls' cost.
    """

    upstream: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    model_concurrency: int | str = attrs.field(default="auto", converter=_concurrency)
    model_rate: float | None = attrs.field(default=None, converter=parse_rate)
    cache: str | None = attrs.field(default=None, converter=_path)
    cache_mode: str = attrs.field(default="use", validator=one_of(*CACHE_MODES))
    cache_epochs: str = attrs.field(default="independent", validator=one_of(*CACHE_EPOCHS))
    max_attempts: int = attrs.field(default=MAX_ATTEMPTS, validator=integer(1))
    max_total_tokens: int | None = attrs.field(default=None, validator=attrs.validators.optional(integer(0)))
    max_total_cost: float | None = attrs.field(default=None, validator=attrs.validators.optional(non_negative("a finite number of USD >= 0")))
    price: PerMtok | None = attrs.field(default=None, validator=attrs.validators.optional(_price))

    def __attrs_post_init__(self) -> None:
        if self.cache_mode == "replay" and self.cache is None:
            raise ParamValueError(Param("cache_mode", "replay"), " needs ", Param("cache", spelled="cache"),
                                  " (the directory to replay from)")
        if self.upstream is not None and not self.upstream.startswith(("http://", "https://")):
            raise ParamValueError(Param("upstream", self.upstream), " must be an http:// or https:// URL")
        if self.max_total_cost is not None and self.price is None:
            raise ParamValueError(Param("max_total_cost", self.max_total_cost), " needs ", Param("price", spelled="price"),
                                  " (the cost of a token is unknown without it)")
        if not self.api_key_env:
            raise ParamValueError(Param("api_key_env", self.api_key_env), " must name an environment variable")


DEFAULT_GATEWAY = GatewayOptions()
"""The default of every ``gateway=`` parameter: on, with the default options."""

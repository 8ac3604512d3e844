"""The simulated runtime's ``initialize``: validation with 0.2.1-rc.2's messages, and the route.

Owns what a handshake may carry and how the real runtime words each rejection (PROTOCOL.md
sections 3 and 4.1), including the JavaScript and Node renderings of bad values. Pure.
"""

from __future__ import annotations

import os
from typing import Any, Final

import attrs

from ._sim_agent import Route

SERVER_INFO: Final = {"name": "deepseek-harness-sdk-runtime", "version": "0.0.1"}
DEFAULT_MAX_TOKENS: Final = 256_000
DEFAULT_EFFORT: Final = "high"
EFFORTS: Final = {"deepseek-official": ("off", "low", "high", "max")}
MAX_SAFE_INTEGER: Final = 2**53 - 1


class HandshakeError(ValueError):
    """``initialize`` was refused; the message is the runtime's."""


@attrs.frozen(kw_only=True)
class Handshake:
    """A valid ``initialize``: the route, the absolute default cwd, the two capabilities."""

    route: Route
    cwd: str
    approvals: bool
    questions: bool


def _js(value: Any, *, missing: bool = False) -> str:
    """How the runtime's JavaScript prints a value inside a message."""
    if missing:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _received(params: dict[str, Any], key: str) -> str:
    """Node's ``Received ...`` tail of an ERR_INVALID_ARG_TYPE message."""
    if key not in params:
        return "Received undefined"
    value = params[key]
    if value is None:
        return "Received null"
    if isinstance(value, bool):
        return f"Received type boolean ({_js(value)})"
    if isinstance(value, (int, float)):
        return f"Received type number ({value})"
    return f"Received an instance of {'Array' if isinstance(value, list) else 'Object'}"


def check_initialize(params: dict[str, Any], providers: tuple[str, ...]) -> Handshake:
    """Validate ``initialize`` params (``providers`` empty: any non-empty provider name).

    ``cwd`` is resolved against this process's directory, as the runtime does.

    Raises:
        HandshakeError: with the message 0.2.1-rc.2 answers for the first problem found.
    """
    provider = params.get("provider")
    if not isinstance(provider, str) or not provider or (providers and provider not in providers):
        raise HandshakeError(f'no adapter registered for provider "{_js(provider, missing="provider" not in params)}"')
    cwd = params.get("cwd")
    if not isinstance(cwd, str):
        raise HandshakeError(f'The "paths[0]" argument must be of type string. {_received(params, "cwd")}')
    model = params.get("model")
    if not isinstance(model, str) or not model:
        raise HandshakeError(f'adapter returned invalid exact model metadata for provider "{provider}" '
                             f'model "{_js(model, missing="model" not in params)}"')
    defaults: list[str] = []
    max_tokens = params.get("maxTokens", DEFAULT_MAX_TOKENS)
    if "maxTokens" not in params:
        defaults.append("maxTokens")
    elif type(max_tokens) is not int or not 0 < max_tokens <= MAX_SAFE_INTEGER:
        raise HandshakeError("initialize maxTokens must be a positive safe integer")
    effort = params.get("reasoningEffort", DEFAULT_EFFORT)
    if "reasoningEffort" not in params:
        defaults.insert(0, "reasoningEffort")
    elif not isinstance(effort, str) or not effort:
        raise HandshakeError("initialize reasoningEffort must be a non-empty string")
    allowed = EFFORTS.get(provider)
    if allowed is not None and effort not in allowed:
        raise HandshakeError(f'provider "{provider}" model "{model}" does not support reasoning effort "{effort}"')
    capabilities = params.get("capabilities")
    return Handshake(
        route=Route(provider=provider, model=model, reasoning_effort=effort, max_tokens=max_tokens,
                    defaults=tuple(defaults)),
        cwd=os.path.abspath(cwd),
        approvals=params.get("approvalRequests") is True,
        questions=isinstance(capabilities, dict) and capabilities.get("userQuestions") is True,
    )

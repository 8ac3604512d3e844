"""The one table of the runtime's known error messages (protocol.KNOWN_ERRORS)."""

from __future__ import annotations

import pytest

from dsh_orchestra.protocol import (
    KNOWN_ERRORS,
    JsonRpcResponseError,
    MethodNotSupportedError,
    NotInitializedError,
    SessionAlreadyOpenError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnedError,
    ShuttingDownError,
    UnknownSessionError,
    known_message,
    response_error,
)

# The messages 0.2.1-rc.2 sends, verbatim (PROTOCOL.md section 3).
OBSERVED = [
    ("session/query", "unknown DeepSeek Harness SDK runtime method: session/query", MethodNotSupportedError, None),
    ("x/y", "method not found: x/y", MethodNotSupportedError, None),
    ("session/prompt", 'session "eval-7" already exists', SessionExistsError, "eval-7"),
    ("session/resume", 'session "a b/c" not found', SessionNotFoundError, "a b/c"),
    ("session/resume", 'session "s1" is already owned by an active write handle', SessionOwnedError, "s1"),
    ("session/resume", "SDK session is already open or opening: s2", SessionAlreadyOpenError, "s2"),
    ("session/wait", "unknown SDK session: s3", UnknownSessionError, "s3"),
    ("session/prompt", "SDK server is shutting down", ShuttingDownError, None),
    ("session/wait", "SDK server is not initialized", NotInitializedError, None),
]


@pytest.mark.parametrize(("method", "message", "cls", "session_id"), OBSERVED)
def test_known_messages_become_their_class(method: str, message: str, cls: type, session_id: str | None) -> None:
    error = response_error(method, -32603, message, {"d": 1})
    assert type(error) is cls
    assert isinstance(error, JsonRpcResponseError)  # existing except clauses still catch it
    assert (error.method, error.code, error.message, error.data) == (method, -32603, message, {"d": 1})
    assert error.session_id == session_id


@pytest.mark.parametrize(
    "message",
    [
        "Cannot read properties of undefined (reading 'filter')",
        'session "s1" already exists, and more',  # anchored: not a prefix match
        "the SDK server is shutting down",
        "",
    ],
)
def test_other_messages_stay_generic(message: str) -> None:
    assert type(response_error("m", -32603, message)) is JsonRpcResponseError


def test_code_method_not_found_is_not_supported_whatever_the_message() -> None:
    assert type(response_error("m", -32601, "no such thing")) is MethodNotSupportedError


def test_known_message_is_the_inverse_of_the_table() -> None:
    for cls, template in KNOWN_ERRORS:
        fields = {name: "v-1" for name in ("session_id", "method") if "{" + name + "}" in template}
        text = template.format(**fields)
        assert type(response_error("m", -32603, text)) is cls
    assert known_message(SessionExistsError, session_id="x") == 'session "x" already exists'
    with pytest.raises(ValueError, match="not in KNOWN_ERRORS"):
        known_message(JsonRpcResponseError)

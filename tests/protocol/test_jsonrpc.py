"""Frame classification, error objects and frame builders (PROTOCOL.md sections 2, 3). No trio."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_orchestra.protocol import (
    ErrorObject,
    FrameKind,
    classify,
    error_frame,
    error_of,
    notification_frame,
    params_of,
    request_frame,
    result_frame,
)


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "m"}, FrameKind.REQUEST),
        ({"id": "req_0a", "method": "approval/request", "params": {}}, FrameKind.REQUEST),
        ({"id": 0, "method": "m"}, FrameKind.REQUEST),
        ({"id": -7, "method": "m"}, FrameKind.REQUEST),
        ({"id": "", "method": "m"}, FrameKind.REQUEST),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, FrameKind.RESPONSE),
        ({"id": "c1", "error": {"code": -32603, "message": "x"}}, FrameKind.RESPONSE),
        ({"id": 5}, FrameKind.RESPONSE),
        ({"method": "session.event", "params": {}}, FrameKind.NOTIFICATION),
        # null and boolean ids are not ids: the runtime never answers them
        ({"id": None, "method": "m"}, FrameKind.NOTIFICATION),
        ({"id": True, "method": "m"}, FrameKind.NOTIFICATION),
        ({"id": False, "method": "m"}, FrameKind.NOTIFICATION),
        ({"id": 1.5, "method": "m"}, FrameKind.NOTIFICATION),
        ({"id": [1], "method": "m"}, FrameKind.NOTIFICATION),
        ({"id": None, "result": {}}, FrameKind.INVALID),
        ({"id": True, "result": {}}, FrameKind.INVALID),
        ({"method": 5, "id": None}, FrameKind.INVALID),
        ({"result": {}}, FrameKind.INVALID),
        ({}, FrameKind.INVALID),
    ],
)
def test_classify(frame: dict[str, Any], kind: FrameKind) -> None:
    """id+method is a request, id alone a response, method alone a notification."""
    assert classify(frame) is kind


def test_a_non_string_method_with_an_id_is_a_response() -> None:
    # The runtime looks at the id first: a usable id without a string method settles a request.
    assert classify({"id": 3, "method": 7}) is FrameKind.RESPONSE


@pytest.mark.parametrize(
    ("frame", "params"),
    [
        ({"method": "m"}, {}),
        ({"method": "m", "params": None}, {}),
        ({"method": "m", "params": [1, 2]}, {}),
        ({"method": "m", "params": "x"}, {}),
        ({"method": "m", "params": 3}, {}),
        ({"method": "m", "params": {"a": 1}}, {"a": 1}),
    ],
)
def test_params_that_are_not_an_object_read_as_empty(frame: dict[str, Any], params: dict[str, Any]) -> None:
    assert params_of(frame) == params


def test_error_of_keeps_code_message_and_data_verbatim() -> None:
    data = {"detail": [1, {"x": None}], "retry": False}
    error = error_of({"id": 1, "error": {"code": -32000, "message": "custom failure", "data": data}})
    assert error == ErrorObject(-32000, "custom failure", data)
    assert error is not None and error.data is data


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ({"code": -32603, "message": "SDK server is not initialized"}, ErrorObject(-32603, "SDK server is not initialized")),
        ({"message": "no code"}, ErrorObject(None, "no code")),
        ({"code": "-32603", "message": "m"}, ErrorObject(None, "m")),
        ({"code": True, "message": "m"}, ErrorObject(None, "m")),
        ({"code": 1.5, "message": "m"}, ErrorObject(None, "m")),
        ({"code": -1}, ErrorObject(-1, "JSON-RPC error")),
        ({"code": -1, "message": 42}, ErrorObject(-1, "JSON-RPC error")),
        ({"code": 0, "message": "zero", "data": 0}, ErrorObject(0, "zero", 0)),
        ("boom", ErrorObject(None, "JSON-RPC error", "boom")),
        (None, ErrorObject(None, "JSON-RPC error", None)),
    ],
)
def test_error_of_defaults(error: Any, expected: ErrorObject) -> None:
    """A missing message reads "JSON-RPC error"; a missing or non-integer code is None."""
    assert error_of({"id": 1, "error": error}) == expected


def test_error_of_success_response_is_none() -> None:
    assert error_of({"id": 1, "result": {}}) is None
    assert error_of({"id": 1}) is None


def test_frame_builders() -> None:
    assert request_frame(1, "shutdown", None) == {"jsonrpc": "2.0", "id": 1, "method": "shutdown"}
    assert request_frame("a", "m", {}) == {"jsonrpc": "2.0", "id": "a", "method": "m", "params": {}}
    assert notification_frame("n", None) == {"jsonrpc": "2.0", "method": "n"}
    assert notification_frame("n", {"x": 1}) == {"jsonrpc": "2.0", "method": "n", "params": {"x": 1}}
    assert result_frame("req_1", {"outcome": "rejected"}) == {
        "jsonrpc": "2.0", "id": "req_1", "result": {"outcome": "rejected"}
    }
    assert error_frame(7, -32601, "method not found: x") == {
        "jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "method not found: x"}
    }
    assert error_frame(7, -32603, "m", data=[]) == {
        "jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "m", "data": []}
    }


def test_built_frames_classify_as_what_they_are() -> None:
    assert classify(request_frame(1, "m", None)) is FrameKind.REQUEST
    assert classify(notification_frame("m", None)) is FrameKind.NOTIFICATION
    assert classify(result_frame(1, None)) is FrameKind.RESPONSE
    assert classify(error_frame("x", 1, "m")) is FrameKind.RESPONSE

"""JSON-RPC 2.0 frames: classification of decoded frames and builders for outgoing ones.

Pure: no trio, no I/O. Frames stay plain dicts on the hot path; these helpers only look at
the members that decide what a frame is (PROTOCOL.md section 2).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

JsonObject = dict[str, Any]
RequestId = str | int

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class FrameKind(enum.Enum):
    """What a decoded frame is."""

    REQUEST = "request"
    RESPONSE = "response"
    NOTIFICATION = "notification"
    INVALID = "invalid"


REQUEST = FrameKind.REQUEST
RESPONSE = FrameKind.RESPONSE
NOTIFICATION = FrameKind.NOTIFICATION
INVALID = FrameKind.INVALID


def _usable_id(value: Any) -> bool:
    kind = type(value)
    if kind is str or kind is int:  # the exact types orjson makes: the reader's fast path
        return True
    return kind is not bool and isinstance(value, (str, int))


def classify(frame: JsonObject) -> FrameKind:
    """id+method is a request, id alone a response, method alone a notification.

    An id is a string or an integer (not a bool); ``method`` a string. Cheap enough for the
    connection's reader, which calls it for every frame.
    """
    method = frame.get("method")
    has_id = _usable_id(frame.get("id"))
    if type(method) is str or isinstance(method, str):
        return REQUEST if has_id else NOTIFICATION
    if has_id:
        return RESPONSE
    return INVALID


def params_of(frame: JsonObject) -> JsonObject:
    """The frame's params; missing, array or scalar params read as ``{}`` (as the runtime does)."""
    params = frame.get("params")
    return params if type(params) is dict or isinstance(params, dict) else {}


@attrs.frozen
class ErrorObject:
    """The ``error`` member of an error response, kept verbatim."""

    code: int | None
    message: str
    data: Any = None


def error_of(frame: JsonObject) -> ErrorObject | None:
    """The error object of a response, or None for a success response.

    A missing message reads "JSON-RPC error"; a missing or non-integer code is None.
    """
    if "error" not in frame:
        return None
    error = frame["error"]
    if not isinstance(error, dict):
        return ErrorObject(None, "JSON-RPC error", error)
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = None
    message = error.get("message")
    if not isinstance(message, str):
        message = "JSON-RPC error"
    return ErrorObject(code, message, error.get("data"))


def request_frame(request_id: RequestId, method: str, params: JsonObject | None) -> JsonObject:
    """Build a request frame (``params`` omitted when None)."""
    frame: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        frame["params"] = params
    return frame


def notification_frame(method: str, params: JsonObject | None) -> JsonObject:
    """Build a notification frame (``params`` omitted when None)."""
    frame: JsonObject = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        frame["params"] = params
    return frame


def result_frame(request_id: RequestId, result: Any) -> JsonObject:
    """Build a success response frame."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_frame(request_id: RequestId, code: int, message: str, data: Any = None) -> JsonObject:
    """Build an error response frame (``data`` omitted when None)."""
    error: JsonObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}

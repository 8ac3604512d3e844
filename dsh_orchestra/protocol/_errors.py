"""The error hierarchy shared by every layer.

Pure: no trio, no I/O. Each error keeps its data as attributes and builds its message from them.
"""

from __future__ import annotations

import re
from typing import Any


class OrchestraError(Exception):
    """Base class of every error dsh_orchestra raises on purpose."""


class SdkProtocolError(OrchestraError):
    """The peer sent something outside the protocol.

    Attributes:
        method: the JSON-RPC method the bad data belonged to, when known.
        path: the JSON path of the offending value (``params.event.data``), when known.
    """

    def __init__(self, message: str, *, method: str | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.method = method
        self.path = path


class FrameTooLargeError(SdkProtocolError):
    """A single frame grew past the configured maximum frame size."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"frame of at least {size} bytes exceeds the maximum frame size of {limit} bytes; "
            "raise max_frame_size if the runtime really sends frames this large"
        )
        self.size = size
        self.limit = limit


class JsonRpcResponseError(OrchestraError):
    """The peer answered a request with a JSON-RPC error object.

    ``code`` is ``None`` when the peer sent no integer code; ``data`` is kept verbatim.
    """

    def __init__(self, method: str, code: int | None, message: str, data: Any = None) -> None:
        super().__init__(f"{method!r} failed with JSON-RPC error {code}: {message}")
        self.method = method
        self.code = code
        self.message = message
        self.data = data
        self.session_id: str | None = None  # the session a known message names (KNOWN_ERRORS)


class MethodNotSupportedError(JsonRpcResponseError):
    """The connected runtime does not implement the method (it answered "unknown ... method")."""

    def __init__(self, method: str, code: int | None, message: str, data: Any = None) -> None:
        super().__init__(method, code, message, data)
        self.args = (
            f"the connected runtime does not implement {method!r} (it answered: {message}); "
            "use a runtime that implements the newest protocol, such as the simulator",
        )


class TransportClosedError(OrchestraError):
    """The connection went away (peer closed, process exited, or we closed it).

    Attributes:
        returncode: the exit status of the process behind the connection, when known.
        stderr_tail: the last lines the process wrote to stderr, when known.
    """

    def __init__(
        self, message: str, *, returncode: int | None = None, stderr_tail: str = ""
    ) -> None:
        detail = message
        if returncode is not None:
            detail += f" (exit status {returncode})"
        if stderr_tail:
            detail += f"; stderr tail:\n{stderr_tail}"
        super().__init__(detail)
        self.reason = message
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class RuntimeExitedError(TransportClosedError):
    """The runtime process exited while requests or subscriptions were still open."""

    def __init__(self, command: str, returncode: int | None, stderr_tail: str = "") -> None:
        super().__init__(
            f"runtime {command!r} exited", returncode=returncode, stderr_tail=stderr_tail
        )
        self.command = command


class RequestTimeoutError(OrchestraError):
    """A lifecycle bound of RuntimeSpec elapsed: ``initialize`` not answered within
    ``handshake_timeout`` (the ``__cause__`` of the RuntimeStartError a caller gets)."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} did not complete within {seconds:g} s")
        self.what = what
        self.seconds = seconds


class RuntimeStartError(OrchestraError):
    """Spawning a runtime or its ``initialize`` handshake failed."""

    def __init__(self, command: str, profile: str | None, reason: str, stderr_tail: str = "") -> None:
        where = f"runtime {command!r}" + (f" (profile {profile!r})" if profile else "")
        message = f"{where} failed to start: {reason}"
        if stderr_tail:
            message += f"; stderr tail:\n{stderr_tail}"
        super().__init__(message)
        self.command = command
        self.profile = profile
        self.reason = reason
        self.stderr_tail = stderr_tail


class SubscriberOverflowError(OrchestraError):
    """A notification subscriber fell too far behind and was dropped."""

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(
            f"subscriber {name!r} stopped reading: its buffer of {capacity} notifications "
            "overflowed and it was closed; read faster or raise its buffer size"
        )
        self.name = name
        self.capacity = capacity


# ---- the runtime's known error messages -----------------------------------------------
# The runtime answers every failure with -32603 and a message (PROTOCOL.md section 3), so the
# message is the only thing that tells failures apart. Each class below is a
# JsonRpcResponseError (``except JsonRpcResponseError`` still catches them all) and
# ``KNOWN_ERRORS`` is the one table that maps the messages to them.


class SessionExistsError(JsonRpcResponseError):
    """The session is persisted but not open in this process: ``session/resume`` it first."""


class SessionNotFoundError(JsonRpcResponseError):
    """``session/resume`` of an id the runtime's store does not hold."""


class SessionOwnedError(JsonRpcResponseError):
    """The session is held by another live runtime process (its write handle)."""


class SessionAlreadyOpenError(JsonRpcResponseError):
    """``session/resume`` of a session already open (or opening) in this runtime."""


class UnknownSessionError(JsonRpcResponseError):
    """A method that needs an open session (``session/wait``) named one this runtime lacks."""


class ShuttingDownError(JsonRpcResponseError):
    """The runtime is shutting down and takes no new work."""


class NotInitializedError(JsonRpcResponseError):
    """A session method arrived before a successful ``initialize``."""


KNOWN_ERRORS: tuple[tuple[type[JsonRpcResponseError], str], ...] = (
    (MethodNotSupportedError, "unknown DeepSeek Harness SDK runtime method: {method}"),
    (MethodNotSupportedError, "method not found: {method}"),
    (SessionExistsError, 'session "{session_id}" already exists'),
    (SessionNotFoundError, 'session "{session_id}" not found'),
    (SessionOwnedError, 'session "{session_id}" is already owned by an active write handle'),
    (SessionAlreadyOpenError, "SDK session is already open or opening: {session_id}"),
    (UnknownSessionError, "unknown SDK session: {session_id}"),
    (ShuttingDownError, "SDK server is shutting down"),
    (NotInitializedError, "SDK server is not initialized"),
)
"""(error class, message template) for every runtime message a client branches on
(PROTOCOL.md section 3, observed on 0.2.1-rc.2). The simulator answers with the same texts
(``known_message``); ``response_error`` turns an error response into the matching class."""


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", template)
    regex = "".join(re.escape(part) if index % 2 == 0 else f"(?P<{part}>.*)" for index, part in enumerate(parts))
    return re.compile(regex + r"\Z", re.DOTALL)


_MATCHERS = tuple((cls, _pattern(template)) for cls, template in KNOWN_ERRORS)


def known_message(cls: type[JsonRpcResponseError], **fields: str) -> str:
    """The runtime's message for ``cls`` (the first template of the table), ``fields`` filled in."""
    for known, template in KNOWN_ERRORS:
        if known is cls:
            return template.format(**fields)
    raise ValueError(f"{cls.__name__} is not in KNOWN_ERRORS")


def response_error(method: str, code: int | None, message: str, data: Any = None) -> JsonRpcResponseError:
    """The error for an error response to ``method``: the class the table (or code -32601)
    names, else JsonRpcResponseError. A matched session id is kept as ``session_id``."""
    for cls, pattern in _MATCHERS:
        match = pattern.match(message)
        if match is not None:
            error = cls(method, code, message, data)
            error.session_id = match.groupdict().get("session_id")
            return error
    if code == -32601:  # METHOD_NOT_FOUND, from a peer with a message of its own
        return MethodNotSupportedError(method, code, message, data)
    return JsonRpcResponseError(method, code, message, data)

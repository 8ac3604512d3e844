"""The error hierarchy shared by every layer.

Pure: no trio, no I/O. Each error keeps its data as attributes and builds its message from them.
"""

from __future__ import annotations

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
    """A lifecycle bound (handshake, shutdown) elapsed."""

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

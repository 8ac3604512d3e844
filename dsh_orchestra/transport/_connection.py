"""One JSON-RPC 2.0 connection over a trio stream pair.

Owns: the one reader task, pending requests, incoming-request handlers, notification fan-out
with bounded buffers, the write lock. Must not know what methods mean (no sessions, no
processes); the caller supplies result types and handlers.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from typing import Any, Awaitable, Callable, TypeVar

import attrs
import trio

from ..protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    JsonRpcResponseError,
    LineFramer,
    MethodNotSupportedError,
    OrchestraError,
    SdkProtocolError,
    TransportClosedError,
    encode_frame,
    error_frame,
    error_of,
    notification_frame,
    request_frame,
    result_frame,
    structure,
    unstructure,
)
from ._subscription import DEFAULT_CAPACITY, Notification, NotificationFilter, Subscription

log = logging.getLogger("dsh_orchestra.transport")

T = TypeVar("T")
Handler = Callable[[Any], Awaitable[Any]]
Sink = Callable[[Notification], None]
LostHook = Callable[[str], Awaitable[TransportClosedError]]

RECEIVE_SIZE = 256 * 1024


class RpcError(OrchestraError):
    """Raise from a request handler to answer with this exact JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


@attrs.frozen
class ConnectionStatistics:
    """A snapshot of one connection's counters."""

    frames_received: int
    frames_sent: int
    ignored_lines: int
    notifications: int
    pending_requests: int
    subscribers: int
    handlers_running: int


class _Pending:
    __slots__ = ("method", "done", "reply")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = trio.Event()
        self.reply: dict[str, Any] | None = None


def _is_unknown_method(error_message: str) -> bool:
    return error_message.startswith(("unknown DeepSeek Harness SDK runtime method", "method not found"))


class Connection:
    """JSON-RPC over ``stream`` (anything with ``send_all`` and ``receive_some``).

    Start it with ``await nursery.start(connection.run)``. ``close()`` fails every pending
    request with TransportClosedError and detaches from the stream without closing it.
    """

    def __init__(
        self,
        stream: trio.abc.Stream | trio.StapledStream[Any, Any],
        *,
        name: str = "peer",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        lost_hook: LostHook | None = None,
    ) -> None:
        self.name = name
        self._stream = stream
        self._framer = LineFramer(max_frame_size=max_frame_size)
        self._lost_hook = lost_hook
        self._ids = itertools.count(1)
        self._pending: dict[Any, _Pending] = {}
        self._handlers: dict[str, tuple[Handler, type | None]] = {}
        self._sinks: list[Sink] = []
        self._send_lock = trio.StrictFIFOLock()
        self._nursery: trio.Nursery | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self._closed_error: TransportClosedError | None = None
        self._stopped = trio.Event()
        self._closed_event = trio.Event()
        self._frames_received = 0
        self._frames_sent = 0
        self._notifications = 0
        self._handlers_running = 0

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection was closed or its stream ended."""
        return self._closed_error is not None

    @property
    def closed_error(self) -> TransportClosedError | None:
        """Why the connection is closed, or None while it is open."""
        return self._closed_error

    async def run(self, *, task_status: trio.TaskStatus[Connection] = trio.TASK_STATUS_IGNORED) -> None:
        """Read frames until the stream ends or ``close()``; handlers run in this service."""
        if self._nursery is not None:
            raise RuntimeError("Connection.run() was already started")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._cancel_scope = nursery.cancel_scope
                task_status.started(self)
                reason = await self._read_loop()
                error = await self._lost_error(reason)
                self._shut(error)
                nursery.cancel_scope.cancel(reason="connection lost")
        finally:
            if self._closed_error is None:
                self._shut(TransportClosedError(f"connection to {self.name} was cancelled"))
            self._stopped.set()

    async def _lost_error(self, reason: str) -> TransportClosedError:
        if self._closed_error is not None:
            return self._closed_error
        if self._lost_hook is not None:
            return await self._lost_hook(reason)
        return TransportClosedError(f"{self.name} {reason}")

    def close(self, reason: str = "connection closed") -> None:
        """Fail every pending request and subscription; stop reading. Idempotent."""
        if self._closed_error is None:
            self._shut(TransportClosedError(f"{reason} ({self.name})"))
        if self._cancel_scope is not None:
            self._cancel_scope.cancel(reason=reason)

    async def aclose(self) -> None:
        """Close and wait until the reader and the handler tasks have stopped."""
        self.close()
        if self._nursery is not None:
            await self._stopped.wait()
        else:
            await trio.lowlevel.checkpoint()

    def fail(self, error: TransportClosedError) -> None:
        """Close with ``error`` as the reason every waiter gets (used by process owners)."""
        if self._closed_error is None:
            self._shut(error)
        if self._cancel_scope is not None:
            self._cancel_scope.cancel(reason=error.reason)

    async def wait_closed(self) -> None:
        """Wait until the connection is closed or its stream has ended."""
        await self._closed_event.wait()

    def _shut(self, error: TransportClosedError) -> None:
        self._closed_error = error
        self._closed_event.set()
        for pending in self._pending.values():
            pending.done.set()
        for sink in list(self._sinks):  # a bound sink whose owner has fail() is told why
            fail = getattr(getattr(sink, "__self__", None), "fail", None)
            if callable(fail):
                fail(error)
        self._sinks.clear()

    def _copy_error(self) -> TransportClosedError:
        error = self._closed_error
        assert error is not None
        copy = TransportClosedError(error.reason, returncode=error.returncode, stderr_tail=error.stderr_tail)
        copy.__cause__ = error
        return copy

    # ---- reading ---------------------------------------------------------------------

    async def _read_loop(self) -> str:
        framer = self._framer
        receive = self._stream.receive_some
        pending = self._pending
        sinks = self._sinks
        while True:
            try:
                data = await receive(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                return f"stream broke: {exc}"
            if not data:
                framer.receive_data(b"")
                return "closed its stream"
            framer.receive_data(data)
            try:
                frames = framer.frames()
            except SdkProtocolError as exc:
                log.error("protocol violation from %s: %s", self.name, exc)
                return f"sent an oversized frame: {exc}"
            self._frames_received += len(frames)
            for frame in frames:
                method = frame.get("method")
                request_id = frame.get("id")
                has_id = isinstance(request_id, (str, int)) and request_id is not True and request_id is not False
                if type(method) is str:
                    if has_id:
                        self._dispatch_request(request_id, method, frame.get("params"))
                        continue
                    params = frame.get("params")
                    notification = Notification(method, params if type(params) is dict else {})
                    self._notifications += 1
                    for sink in sinks:
                        sink(notification)
                elif has_id:
                    waiter = pending.get(request_id)
                    if waiter is not None and waiter.reply is None:
                        waiter.reply = frame
                        waiter.done.set()
                else:
                    framer.ignored += 1

    def _dispatch_request(self, request_id: Any, method: str, params: Any) -> None:
        assert self._nursery is not None
        self._handlers_running += 1
        self._nursery.start_soon(self._answer, request_id, method, params if isinstance(params, dict) else {})

    async def _answer(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            entry = self._handlers.get(method)
            if entry is None:
                reply = error_frame(request_id, METHOD_NOT_FOUND, f"method not found: {method}")
            else:
                handler, params_type = entry
                reply = await self._call_handler(request_id, method, params, handler, params_type)
            if reply is not None:
                await self._send(reply)
        except (TransportClosedError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer is gone: nobody to answer
        finally:
            self._handlers_running -= 1

    async def _call_handler(
        self, request_id: Any, method: str, params: dict[str, Any], handler: Handler, params_type: type | None
    ) -> dict[str, Any] | None:
        try:
            value = structure(params, params_type, method=method) if params_type is not None else params
        except SdkProtocolError as exc:
            return error_frame(request_id, INVALID_PARAMS, str(exc))
        try:
            result = await handler(value)
        except RpcError as exc:
            return error_frame(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:  # noqa: BLE001 (converted to a -32603 answer)
            log.warning("handler for %r failed: %r", method, exc)
            return error_frame(request_id, INTERNAL_ERROR, str(exc) or type(exc).__name__)
        if self._closed_error is not None:
            return None
        return result_frame(request_id, unstructure(result) if result is not None else {})

    # ---- writing ---------------------------------------------------------------------

    async def _send(self, frame: dict[str, Any]) -> None:
        data = encode_frame(frame)
        async with self._send_lock:
            if self._closed_error is not None:
                raise self._copy_error()
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise TransportClosedError(f"cannot write to {self.name}: {exc}") from exc
            self._frames_sent += 1

    async def send_raw(self, data: bytes) -> None:
        """Write raw bytes (for fault injection in tests and simulators)."""
        async with self._send_lock:
            await self._stream.send_all(data)

    async def request(self, method: str, params: Any = None, result_type: type[T] | None = None) -> Any:
        """Send a request and wait for its response.

        ``params`` is a wire class instance, a dict, or None (omitted). With ``result_type``
        the result is structured into it, otherwise the raw JSON result is returned.

        Raises:
            JsonRpcResponseError: the peer answered with an error (code, message, data kept).
            MethodNotSupportedError: the peer said it does not know the method.
            TransportClosedError: the connection closed before the response arrived.
            SdkProtocolError: the result does not fit ``result_type``.

        Cancellation: the pending entry is dropped; a late response is ignored.
        """
        if self._closed_error is not None:
            raise self._copy_error()
        request_id = next(self._ids)
        pending = self._pending[request_id] = _Pending(method)
        try:
            wire = unstructure(params) if params is not None else None
            await self._send(request_frame(request_id, method, wire))
            await pending.done.wait()
        finally:
            del self._pending[request_id]
        reply = pending.reply
        if reply is None:
            error = self._copy_error()
            raise TransportClosedError(
                f"{method!r} got no reply: {error.reason}",
                returncode=error.returncode,
                stderr_tail=error.stderr_tail,
            ) from error
        failure = error_of(reply)
        if failure is not None:
            cls = MethodNotSupportedError if _is_unknown_method(failure.message) or failure.code == METHOD_NOT_FOUND else JsonRpcResponseError
            raise cls(method, failure.code, failure.message, failure.data)
        result = reply.get("result")
        if result_type is None:
            return result
        return structure(result if result is not None else {}, result_type, method=method, what="result")

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no reply)."""
        wire = unstructure(params) if params is not None else None
        await self._send(notification_frame(method, wire))

    # ---- registration ----------------------------------------------------------------

    def register(self, method: str, handler: Handler, params_type: type | None = None) -> None:
        """Answer incoming ``method`` requests with ``handler`` (each call in its own task).

        With ``params_type``, params are structured first and bad params answer -32602.
        The handler's return value is the result; RpcError answers that error; any other
        exception answers -32603 with its message.
        """
        if not inspect.iscoroutinefunction(handler) and not callable(handler):
            raise TypeError(f"handler for {method!r} must be an async callable")
        self._handlers[method] = (handler, params_type)

    def add_sink(self, sink: Sink) -> None:
        """Call ``sink(notification)`` in the reader, in wire order. It must not block or raise.

        When ``sink`` is a bound method whose object has ``fail(error)``, that is called
        with the TransportClosedError when the connection closes.
        """
        self._sinks.append(sink)

    def remove_sink(self, sink: Sink) -> None:
        """Stop calling ``sink``."""
        try:
            self._sinks.remove(sink)
        except ValueError:
            pass

    def subscribe(
        self,
        name: str = "subscriber",
        *,
        capacity: int = DEFAULT_CAPACITY,
        filter: NotificationFilter | None = None,
    ) -> Subscription:
        """A bounded subscription to every notification (or those ``filter`` accepts)."""
        subscription = Subscription(name, capacity=capacity, filter=filter, on_close=self._unsubscribe)
        if self._closed_error is not None:
            subscription.fail(self._copy_error())
        else:
            self._sinks.append(subscription.push)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        self.remove_sink(subscription.push)

    def statistics(self) -> ConnectionStatistics:
        """Counters of this connection."""
        return ConnectionStatistics(
            frames_received=self._frames_received,
            frames_sent=self._frames_sent,
            ignored_lines=self._framer.ignored,
            notifications=self._notifications,
            pending_requests=len(self._pending),
            subscribers=len(self._sinks),
            handlers_running=self._handlers_running,
        )

"""One JSON-RPC 2.0 connection over a trio stream pair: the driver of the state machine.

Owns: the one reader task, the writes (one writer at a time), the handler tasks. What a frame
means for the connection (pending requests, fan-out, closing) is the state machine's
(``_machine.RpcState``); lending the reading to a waiting task is ``_lending``'s. Must not
know what methods mean (no sessions, no processes); the caller supplies result types and
handlers.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, TypeVar

import attrs
import trio

from ..protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    OrchestraError,
    SdkProtocolError,
    TransportClosedError,
    encode_frame,
    error_frame,
    notification_frame,
    result_frame,
    structure,
    unstructure,
)
from ._lending import ReadLending, Waiter, lendable
from ._machine import Handler, ReplyTarget, RpcState, Sink
from ._pipes import RECEIVE_SIZE as RECEIVE_SIZE, FdReceiver, byte_io
from ._subscription import DEFAULT_CAPACITY, NotificationFilter, Subscription

log = logging.getLogger("dsh_orchestra.transport")

T = TypeVar("T")
LostHook = Callable[[str], Awaitable[TransportClosedError]]


class NoReply(Exception):
    """Raise from a request handler to send no response at all (the peer stopped waiting)."""


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
    lent_reads: int = 0
    """Chunks read by a waiting task itself (``pump``) rather than the reader task."""


class Connection:
    """JSON-RPC over ``stream`` (anything with ``send_all`` and ``receive_some``).

    Start it with ``await nursery.start(connection.run)``. ``close()`` fails every pending
    request with TransportClosedError and detaches from the stream without closing it.

    Process pipes (``trio.lowlevel.FdStream``, alone or in a StapledStream) are read and
    written through their descriptors directly; see ``_pipes``.
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
        self._receiver, self._sender = byte_io(stream, RECEIVE_SIZE)
        self._state = RpcState(name, self._spawn, max_frame_size=max_frame_size)
        self._lending: ReadLending | None = None
        if lendable(self._receiver, self._sender):
            assert isinstance(self._receiver, FdReceiver)
            self._lending = ReadLending(self._receiver, self._dispatch_lent, lambda: self._state.error is not None)
        self._lost_hook = lost_hook
        self._writing = False  # a writer holds the stream; the others queue in _write_queue
        self._write_queue = trio.lowlevel.ParkingLot()
        self._nursery: trio.Nursery | None = None
        self._stopped = trio.Event()
        self._closed_event = trio.Event()
        self._handlers_running = 0

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection was closed or its stream ended."""
        return self._state.error is not None

    @property
    def closed_error(self) -> TransportClosedError | None:
        """Why the connection is closed, or None while it is open."""
        return self._state.error

    async def run(self, *, task_status: trio.TaskStatus[Connection] = trio.TASK_STATUS_IGNORED) -> None:
        """Read frames until the stream ends or ``close()``; handlers run in this service."""
        if self._nursery is not None:
            raise RuntimeError("Connection.run() was already started")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                reason = await self._read_loop()
                error = self._state.error
                if error is None:
                    error = await self._lost_hook(reason) if self._lost_hook is not None else None
                self._shut(error or TransportClosedError(f"{self.name} {reason}"))
                nursery.cancel_scope.cancel(reason="connection lost")
        finally:
            self._shut(TransportClosedError(f"connection to {self.name} was cancelled"))
            self._stopped.set()

    def close(self, reason: str = "connection closed") -> None:
        """Fail every pending request and subscription; stop reading. Idempotent."""
        self.fail(TransportClosedError(f"{reason} ({self.name})"), reason)

    async def aclose(self) -> None:
        """Close and wait until the reader and the handler tasks have stopped."""
        self.close()
        if self._nursery is not None:
            await self._stopped.wait()
        else:
            await trio.lowlevel.checkpoint()

    def fail(self, error: TransportClosedError, reason: str | None = None) -> None:
        """Close with ``error`` as the reason every waiter gets (used by process owners)."""
        self._shut(error)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel(reason=reason or error.reason)

    async def wait_closed(self) -> None:
        """Wait until the connection is closed or its stream has ended."""
        await self._closed_event.wait()

    def _shut(self, error: TransportClosedError) -> None:
        self._state.fail(error)  # (no-op when closed already, by the state machine itself too)
        if not self._closed_event.is_set():
            self._closed_event.set()
            self.interrupt_pump()  # a request reading the pipe itself sees that it was woken

    # ---- reading ---------------------------------------------------------------------

    async def _read_loop(self) -> str:
        receive = self._receiver.receive
        lending = self._lending
        dispatch = self._state.receive
        while True:
            if lending is not None and lending.wanted:  # from now on the reading may be lent
                receive = lending.receive
                lending = None
            try:
                data = await receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                return f"stream broke: {exc}"
            if not data:
                return self._state.receive_eof()
            reason = dispatch(data)
            if reason is not None:
                return reason

    def _dispatch_lent(self, data: bytes) -> None:
        """Feed a chunk a borrower read (``pump``) to the state machine, as the reader would."""
        try:
            reason = self._state.receive(data)
        except BaseException as exc:  # a sink raised: the rest of the chunk is lost, so fail
            error = TransportClosedError(f"a notification sink of {self.name} raised {exc!r}; frames were lost")
            error.__cause__ = exc
            self.fail(error)  # as the reader task's crash would, then re-raise
            raise
        if reason is not None:  # the state machine failed it (an oversized frame)
            assert self._state.error is not None
            self.fail(self._state.error, "connection lost")

    async def pump(self, subscription: Subscription | Waiter) -> bool:
        """Read and dispatch the next chunk in the calling task, for ``subscription``'s
        ``receive()`` with an empty buffer (see ``Lender``), or for a request waiting for its
        reply (``request``).

        Returns False at once (no schedule point) when another task is reading in this way,
        the stream is not a pipe that can be lent, the connection is closed or not started,
        or the pipe ended or broke (the reader task then sees that itself); also the first
        time it is asked, after which the reader task waits in a way it can hand over
        (from its next chunk on). Otherwise it waits for the pipe, or when data is likely
        waiting lets the other tasks run first (see ``_lending``), dispatches what it read to
        everyone exactly as the reader task would, and returns True; also True when
        ``interrupt_pump()`` ended its wait. Cancellation ends the wait with nothing read. A
        sink that raises (a filter's bug) fails the connection, since the rest of its chunk
        cannot be delivered, and the exception propagates to the caller.
        """
        return self._lending is not None and await self._lending.pump(subscription)

    def interrupt_pump(self) -> None:
        """End the current ``pump`` wait for the pipe, if one is waiting (it returns True)."""
        if self._lending is not None:
            self._lending.interrupt()

    def _spawn(self, request_id: Any, method: str, params: Any, entry: tuple[Handler, type | None] | None) -> None:
        assert self._nursery is not None
        self._handlers_running += 1
        self._nursery.start_soon(self._answer, request_id, method, params, entry)

    async def _answer(self, request_id: Any, method: str, params: Any, entry: tuple[Handler, type | None] | None) -> None:
        try:
            reply: dict[str, Any] | None
            if entry is None:
                reply = error_frame(request_id, METHOD_NOT_FOUND, f"method not found: {method}")
            else:
                reply = await self._call_handler(request_id, method, params, *entry)
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
        except NoReply:
            return None
        except RpcError as exc:
            return error_frame(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:  # noqa: BLE001 (converted to a -32603 answer)
            log.warning("handler for %r failed: %r", method, exc)
            return error_frame(request_id, INTERNAL_ERROR, str(exc) or type(exc).__name__)
        if self._state.error is not None:
            return None
        return result_frame(request_id, unstructure(result) if result is not None else {})

    # ---- writing ---------------------------------------------------------------------

    async def _send(self, frame: dict[str, Any]) -> None:
        await self._write(encode_frame(frame))
        self._state.frames_sent += 1

    async def _write(self, data: bytes) -> None:
        """Write ``data`` whole, one writer at a time.

        Not a schedule point when the lock is free and the pipe has room (the callers that
        must be one add their own). A write cancelled half-way leaves a torn frame on the
        wire, after which nothing can be framed reliably: the connection fails.
        """
        # A FIFO lock without trio.StrictFIFOLock's bookkeeping (owner tracking, parking-lot
        # breakers), which costs more than the write itself on this path. The releasing
        # writer hands the stream straight to the first queued one.
        written = 0
        if self._writing:
            await self._write_queue.park()  # FIFO behind the current writer; now ours
        else:
            if self._state.error is not None:
                raise self._state.closed_error()
            try:  # the common case: the pipe takes the whole frame, nothing to wait for
                written = self._sender.write_nowait(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise TransportClosedError(f"cannot write to {self.name}: {exc}") from exc
            if written == len(data):
                return
            data = data[written:]
            self._writing = True
        try:
            if self._state.error is not None:
                raise self._state.closed_error()
            try:
                await self._sender.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise TransportClosedError(f"cannot write to {self.name}: {exc}") from exc
            except BaseException:
                if self._sender.torn or written:
                    self.fail(TransportClosedError(
                        f"a cancelled write left a partial frame on the wire to {self.name}"
                    ))
                raise
        finally:
            if self._write_queue:
                self._write_queue.unpark()  # hand over; _writing stays True
            else:
                self._writing = False

    async def send_raw(self, data: bytes) -> None:
        """Write raw bytes (for fault injection in tests and simulators)."""
        await trio.lowlevel.checkpoint()
        await self._write(data)

    async def request(self, method: str, params: Any = None, result_type: type[T] | None = None) -> Any:
        """Send a request and wait for its response.

        ``params`` is a wire class instance, a dict, or None (omitted). With ``result_type``
        the result is structured into it, otherwise the raw JSON result is returned.

        Raises:
            JsonRpcResponseError: the peer answered with an error (code, message, data kept),
                as the subclass ``protocol.KNOWN_ERRORS`` names for a known message
                (MethodNotSupportedError, SessionExistsError, ShuttingDownError, ...).
            TransportClosedError: the connection closed before the response arrived; its
                cause is the FrameTooLargeError when an oversized frame closed it.
            SdkProtocolError: the result does not fit ``result_type``.

        Cancellation: the pending entry is dropped; a late response is ignored. Only if the
        cancellation lands while the request is half-written (the peer stopped reading and
        the pipe is full) does the connection fail, since a torn frame cannot be repaired.
        """
        waiter = Waiter()
        request_id = await self.send_request(method, params, waiter)
        try:
            if not waiter.woken and self._lending is not None:  # (woken already: closed meanwhile)
                await self._lending.read_for(waiter)
            if not waiter.woken:
                waiter.task = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(waiter.abort)
        finally:
            self._state.pending.pop(request_id, None)
        return self._state.result_of(method, waiter.reply, result_type)

    async def send_request(self, method: str, params: Any, target: ReplyTarget) -> int:
        """Send a request whose reply goes to ``target.wake(reply)``; the one way to send one
        (``request`` is this plus a waiting task).

        Returns the request id once the frame is written. ``target.wake`` is called exactly
        once, in the task that reads the reply, with the response frame, or with None when the
        connection closed first; it may be called before this returns (the reply or the close
        arrived while the write waited for room), and also when this raises (with None: the
        connection closed, or a write cancelled half-way failed it). Never after ``forget``.
        ``result_of`` turns the reply into what ``request`` returns or raises. ``params`` as
        for ``request``; cancellation is checked before anything is sent.

        Raises:
            TransportClosedError: the connection is closed, or the write failed (``target``
                may then have been woken with None already).
        """
        if self._state.error is not None:
            raise self._state.closed_error()
        # Not a schedule point unless the write waits for room: requests sent in a loop go out
        # back to back, so the peer reads them in a few chunks instead of one wake-up each.
        await trio.lowlevel.checkpoint_if_cancelled()
        request_id, data = self._state.start_request(method, params, target)
        try:
            await self._write(data)
        except BaseException:
            self._state.pending.pop(request_id, None)
            raise
        self._state.frames_sent += 1
        return request_id

    def forget(self, request_id: int) -> bool:
        """Drop ``send_request``'s request ``request_id``: its target will not be woken (a late
        reply is ignored). False when it was answered (or forgotten) already."""
        return self._state.forget(request_id)

    def result_of(self, method: str, reply: dict[str, Any] | None, result_type: type[T] | None = None) -> Any:
        """The result of ``method``'s ``reply`` (None: the connection closed first), or the
        exception ``request`` raises for it.

        Raises:
            JsonRpcResponseError, TransportClosedError, SdkProtocolError: as ``request``.
        """
        return self._state.result_of(method, reply, result_type)

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no reply)."""
        wire = unstructure(params) if params is not None else None
        await trio.lowlevel.checkpoint()
        await self._send(notification_frame(method, wire))

    # ---- registration ----------------------------------------------------------------

    def register(self, method: str, handler: Handler, params_type: type | None = None) -> None:
        """Answer incoming ``method`` requests with ``handler`` (each call in its own task).

        With ``params_type``, params are structured first and bad params answer -32602.
        The handler's return value is the result; RpcError answers that error; any other
        exception answers -32603 with its message.
        """
        if not callable(handler):
            raise TypeError(f"handler for {method!r} must be an async callable")
        self._state.handlers[method] = (handler, params_type)

    def add_sink(self, sink: Sink) -> None:
        """Call ``sink(notifications)`` in the reader once per chunk read, with that chunk's
        notifications in wire order (a list it must neither change nor keep); the one way to
        fan notifications out (``subscribe`` adds a Subscription's ``push_many``). It must not
        block or raise. A request's reply reaches its target only after every sink got the
        notifications read before it.

        When ``sink`` is a bound method whose object has ``fail(error)``, that is called
        with the TransportClosedError when the connection closes.
        """
        self._state.add_sink(sink)

    def remove_sink(self, sink: Sink) -> None:
        """Stop calling ``sink``."""
        self._state.remove_sink(sink)

    def subscribe(
        self,
        name: str = "subscriber",
        *,
        capacity: int = DEFAULT_CAPACITY,
        filter: NotificationFilter | None = None,
    ) -> Subscription:
        """A bounded subscription to every notification (or those ``filter`` accepts)."""
        subscription = Subscription(
            name, capacity=capacity, filter=filter, on_close=self._unsubscribe,
            lender=self if self._lending is not None else None,
        )
        if self._state.error is not None:
            subscription.fail(self._state.closed_error())
        else:
            self.add_sink(subscription.push_many)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        self.remove_sink(subscription.push_many)

    def statistics(self) -> ConnectionStatistics:
        """Counters of this connection."""
        state = self._state
        return ConnectionStatistics(
            frames_received=state.frames_received,
            frames_sent=state.frames_sent,
            ignored_lines=state.framer.ignored,
            notifications=state.notifications,
            pending_requests=len(state.pending),
            subscribers=len(state.sinks),
            handlers_running=self._handlers_running,
            lent_reads=self._lending.lent_reads if self._lending is not None else 0,
        )

"""One JSON-RPC 2.0 connection over a trio stream pair.

Owns: the one reader task, pending requests, incoming-request handlers, notification fan-out
with bounded buffers, the write lock. Must not know what methods mean (no sessions, no
processes); the caller supplies result types and handlers.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from typing import Any, Awaitable, Callable, Protocol, TypeVar

import attrs
import orjson
import trio

from ..protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    NOTIFICATION,
    REQUEST,
    RESPONSE,
    FrameTooLargeError,
    LineFramer,
    OrchestraError,
    SdkProtocolError,
    TransportClosedError,
    classify,
    encode_frame,
    error_frame,
    error_of,
    notification_frame,
    params_of,
    request_frame,
    response_error,
    result_frame,
    structure,
    unstructure,
)
from ._pipes import RECEIVE_SIZE as RECEIVE_SIZE, FdReceiver, FdSender, byte_io
from ._subscription import DEFAULT_CAPACITY, Notification, NotificationFilter, OpenNotification, Subscription

log = logging.getLogger("dsh_orchestra.transport")

LENT_READS_PER_YIELD = 4
"""A subscriber reading the pipe itself (``pump``) that keeps finding data waiting lets the
other tasks run once per this many chunks (64 KiB of frames at most between schedule points),
not once per chunk: a trip through the scheduler costs about what dispatching 40 events does
(docs/benchmarks.md, W1)."""

T = TypeVar("T")
Handler = Callable[[Any], Awaitable[Any]]
Sink = Callable[[Notification], None]
BatchSink = Callable[[list[Notification]], None]
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
    """Chunks read by a subscriber's own task (``pump``) rather than the reader task."""


class _Pending:
    """One request waiting for its response: a one-shot wake-up, cheaper than trio.Event.

    The waiter sets ``task`` and parks in ``wait_task_rescheduled(pending.abort)`` (inlined in
    ``Connection.request``); ``wake()`` reschedules it, ``abort`` forgets it when cancelled.
    """

    __slots__ = ("method", "reply", "woken", "task", "pipe_wait")

    def __init__(self, method: str) -> None:
        self.method = method
        self.reply: dict[str, Any] | None = None  # None when woken without one (closed)
        self.woken = False
        self.task: trio.lowlevel.Task | None = None
        self.pipe_wait = False  # its caller waits for the pipe in ``pump``

    def wake(self, reply: dict[str, Any] | None = None) -> None:
        """Settle with ``reply`` (first call wins) and wake the waiter."""
        if self.woken:
            return
        self.woken = True
        self.reply = reply
        task, self.task = self.task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def abort(self, _: Any) -> trio.lowlevel.Abort:
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


_UNSET: Any = object()

Callback = Callable[[Any, dict[str, Any] | None], None]
"""``callback(token, reply)`` of ``Connection.start_request``: ``reply`` is the response frame,
or None when the connection closed first."""


class ReplyTarget(Protocol):
    """What ``Connection.send_request`` hands a reply to: ``wake(reply)``, called once."""

    def wake(self, reply: dict[str, Any] | None = None) -> None: ...


class _Callback:
    """One request answered through a callback in the reader (``Connection.start_request``).

    While its frame is being written it only keeps what arrives (``early``), so that a
    ``start_request`` that raises never calls back.
    """

    __slots__ = ("method", "callback", "token", "early")

    def __init__(self, method: str, callback: Callback, token: Any) -> None:
        self.method = method
        self.callback = callback
        self.token = token
        self.early: Any = None  # _UNSET once written; until then what wake() got, if anything

    def wake(self, reply: dict[str, Any] | None = None) -> None:
        """Call back (the connection already dropped this entry), or keep ``reply`` while writing."""
        if self.early is _UNSET:
            self.callback(self.token, reply)
        elif self.early is None:
            self.early = (reply,)


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
        self._framer = LineFramer(max_frame_size=max_frame_size)
        # Lending the reading to a waiting task (pump: a subscriber's receive() or a request):
        # only over a pipe whose
        # descriptor no writer waits on (interrupting a wait wakes every waiter of the fd).
        self._lendable = isinstance(self._receiver, FdReceiver) and not (
            isinstance(self._sender, FdSender) and _same_fd(self._receiver, self._sender)
        )
        # The reader task waits in a way a borrower can interrupt only once a task asked to
        # read (pump, whose first call only asks): until then it reads as plainly as it can.
        self._lend_wanted = False
        self._lending = False
        self._borrower: Any = None  # the Subscription or request (_Pending) whose task reads now (pump)
        # A request reading until its reply (_read_for) keeps the reader task parked from one
        # chunk to the next instead of waking it after each (it would only park again).
        self._holder: _Pending | None = None
        self._borrower_waiting = False  # ... and waits for the pipe
        self._borrower_interrupted = False
        self._reader_task: trio.lowlevel.Task | None = None  # parked while a borrower reads
        self._reader_waiting = False  # the reader task waits for the pipe
        self._reader_interrupted = False
        self._lost_hook = lost_hook
        self._ids = itertools.count(1)
        self._pending: dict[Any, _Pending | ReplyTarget] = {}
        self._handlers: dict[str, tuple[Handler, type | None]] = {}
        self._sinks: list[Sink] = []
        self._batch_sinks: list[BatchSink] = []
        self._batch: list[Notification] | None = None  # the chunk being dispatched, not yet batch-delivered
        self._writing = False  # a writer holds the stream; the others queue in _write_queue
        self._write_queue = trio.lowlevel.ParkingLot()
        self._nursery: trio.Nursery | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self._closed_error: TransportClosedError | None = None
        self._stopped = trio.Event()
        self._closed_event = trio.Event()
        self._frames_received = 0
        self._frames_sent = 0
        self._notifications = 0
        self._handlers_running = 0
        self._lent_reads = 0
        self._lent_unyielded = 0  # chunks a subscriber read since a pump last let others run

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
        try:  # what was read before the close reaches the batch sinks first, as it would have
            self._deliver_batch()
        except Exception as exc:  # noqa: BLE001 (a sink broke its contract; closing goes on)
            log.warning("a batch sink of %s raised while closing: %r", self.name, exc)
        self._closed_error = error
        self._closed_event.set()
        for request_id, pending in list(self._pending.items()):
            if type(pending) is not _Pending:  # answered by its callback: nobody else drops it
                del self._pending[request_id]
            pending.wake()
        self.interrupt_pump()  # a request reading the pipe itself sees that it was woken
        sinks: list[Any] = [*self._sinks, *self._batch_sinks]
        for sink in sinks:  # a bound sink whose owner has fail() is told why
            fail = getattr(getattr(sink, "__self__", None), "fail", None)
            if callable(fail):
                fail(error)
        self._sinks = []
        self._batch_sinks = []

    def _copy_error(self) -> TransportClosedError:
        error = self._closed_error
        assert error is not None
        copy = TransportClosedError(error.reason, returncode=error.returncode, stderr_tail=error.stderr_tail)
        copy.__cause__ = error.__cause__ or error  # e.g. the FrameTooLargeError that closed it
        return copy

    # ---- reading ---------------------------------------------------------------------

    async def _read_loop(self) -> str:
        receive = self._receiver.receive
        while True:
            if self._lend_wanted and not self._lending:  # from now on the reading may be lent
                self._lending = True
                receive = self._receive_chunk
            try:
                data = await receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                return f"stream broke: {exc}"
            if not data:
                self._framer.receive_data(b"")
                return "closed its stream"
            reason = self._dispatch(data)
            if reason is not None:
                return reason

    async def _receive_chunk(self) -> bytes:
        """The reader task's next chunk over a pipe it may lend (see ``pump``)."""
        receiver = self._receiver
        assert isinstance(receiver, FdReceiver)
        while True:
            if self._borrower is not None:  # a subscriber's task reads: wait until it is done
                self._reader_task = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._reader_abort)
                continue
            if receiver.drained:
                self._reader_waiting = True
                try:
                    await receiver.wait()
                except trio.ClosedResourceError:
                    if not self._reader_interrupted:
                        raise
                    continue  # a borrower took the pipe over (interrupt_reader)
                finally:
                    self._reader_waiting = self._reader_interrupted = False
            else:  # data is likely waiting: only let the other tasks run first
                await trio.lowlevel.checkpoint()
            if self._borrower is not None:
                continue  # never read while a borrower may wait for the same bytes
            data = receiver.read_nowait()
            if data is not None:
                return data

    def _reader_abort(self, _: Any) -> trio.lowlevel.Abort:
        self._reader_task = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _dispatch(self, data: bytes) -> str | None:
        """Decode and dispatch one chunk's frames; the reason to stop reading, if any.

        Sinks get each notification as it is decoded; batch sinks get the chunk's
        notifications in one call once it is decoded (also when a sink raised), and those
        decoded so far before a response's callback runs or the connection's close takes
        effect.
        """
        framer = self._framer
        pending = self._pending
        loads = orjson.loads
        new = object.__new__
        frames = delivered = 0
        try:
            lines = framer.split(data)
        except FrameTooLargeError as exc:
            return self._too_large(exc)
        batch: list[Notification] = []
        self._batch = batch
        keep = batch.append
        sinks = self._sinks  # (what code run in the middle of the chunk adds: see RESPONSE)
        try:
            # In wire order, one frame at a time: each is decoded, checked and handed on
            # before the next is decoded (docs/benchmarks.md, W1).
            for line in lines:
                try:
                    frame = loads(line)
                    method = frame.get("method")  # AttributeError: not an object
                except orjson.JSONDecodeError:  # invalid UTF-8 or JSON; blank lines are not counted
                    if line.strip():
                        framer.ignored += 1
                    continue
                except AttributeError:
                    framer.ignored += 1
                    continue
                if type(method) is str and "id" not in frame:  # a notification: the hot path
                    params = frame.get("params")
                    # Notification(method, params, line), built as an OpenNotification
                    notification: Any = new(OpenNotification)  # (mypy: the slots are set once)
                    notification.method = method
                    notification.params = params if type(params) is dict else {}
                    notification.raw = line
                    notification.__class__ = Notification
                    keep(notification)
                    if sinks:
                        # self._sinks is replaced, never mutated: a sink that removes itself
                        # (an overflowing subscription) does not make this loop skip the next
                        for sink in self._sinks:
                            sink(notification)
                    continue
                frames += 1
                kind = classify(frame)
                if kind is NOTIFICATION:  # one with an unusable id (null, say)
                    notification = Notification(frame["method"], params_of(frame), line)
                    keep(notification)
                    for sink in self._sinks:
                        sink(notification)
                elif kind is RESPONSE:
                    waiter = pending.get(frame["id"])
                    if type(waiter) is _Pending:
                        waiter.wake(frame)
                    elif waiter is not None:  # nobody waits to drop it: its callback runs now
                        if batch:  # batch sinks get what came before first
                            self._deliver_batch()  # (if one raises, the close wakes the entry)
                            delivered += len(batch)
                            batch = self._batch = []
                            keep = batch.append
                        if pending.pop(frame["id"], None) is waiter:  # (not dropped by a close)
                            waiter.wake(frame)
                        sinks = self._sinks  # a batch sink or the callback may have added one
                elif kind is REQUEST:
                    self._dispatch_request(frame["id"], frame["method"], params_of(frame))
                else:
                    framer.ignored += 1
        finally:
            self._frames_received += frames + delivered + len(batch)
            self._notifications += delivered + len(batch)
            if batch and self._batch is batch:
                self._deliver_batch()
            self._batch = None
        return None

    def _deliver_batch(self) -> None:
        batch, self._batch = self._batch, None
        if batch:
            for sink in self._batch_sinks:  # replaced, never mutated (as self._sinks)
                sink(batch)

    def _too_large(self, exc: FrameTooLargeError) -> str:
        log.error("protocol violation from %s: %s", self.name, exc)
        error = TransportClosedError(f"{self.name} sent a frame over the limit: {exc}")
        error.__cause__ = exc
        self.fail(error)  # callers learn it now, not when the process is gone
        return error.reason

    # ---- lending the reading to a subscriber (one trip per wait instead of two) -------

    async def pump(self, subscription: Subscription | _Pending) -> bool:
        """Read and dispatch the next chunk in the calling task, for ``subscription``'s
        ``receive()`` with an empty buffer (see ``Lender``), or for a request waiting for its
        reply (``request``).

        Returns False at once (no schedule point) when another task is reading in this way,
        the stream is not a pipe that can be lent, the connection is closed or not started,
        or the pipe ended or broke (the reader task then sees that itself); also the first
        time it is asked, after which the reader task waits in a way it can hand over
        (from its next chunk on). Otherwise it
        waits for the pipe, or when data is likely waiting lets the other tasks run once
        first (for a subscriber only once every ``LENT_READS_PER_YIELD`` such chunks; a
        request's always), so a pipe that stays full starves nobody, dispatches what it
        read to everyone exactly as the reader task would, and returns True; also
        True when ``interrupt_pump()`` ended its wait. The reader task does not read while a
        borrower does and is woken again when it is done, so every frame is read once, in
        order. Cancellation ends the wait with nothing read. A sink that raises (a filter's
        bug) fails the connection, since the rest of its chunk cannot be delivered, and the
        exception propagates to the caller.
        """
        if not self._lending:  # the reader task waits without being interruptible yet
            self._lend_wanted = self._lendable
            return False
        if self._borrower is not None or not self._lendable or self._closed_error is not None:
            return False
        receiver = self._receiver
        assert isinstance(receiver, FdReceiver)
        self._borrower = subscription
        try:
            if self._reader_waiting and not self._reader_interrupted:  # take the pipe over
                self._reader_interrupted = True
                _interrupt(receiver)
            if receiver.drained:
                self._borrower_waiting = subscription.pipe_wait = True
                try:
                    await receiver.wait()
                except trio.ClosedResourceError:
                    if self._borrower_interrupted and not _closed(receiver):
                        return True
                    self._lendable = False  # closed under us: the reader task reports it
                    return False
                finally:
                    self._borrower_waiting = self._borrower_interrupted = subscription.pipe_wait = False
                    self._lent_unyielded = 0
            elif self._lent_unyielded < LENT_READS_PER_YIELD - 1 and type(subscription) is not _Pending:
                self._lent_unyielded += 1
            else:  # data is likely waiting: let the other tasks run first, as the reader task
                await trio.lowlevel.checkpoint()  # does (a full pipe must not starve them)
                self._lent_unyielded = 0
                if self._closed_error is not None:
                    return False
            try:
                data = receiver.read_nowait()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._lendable = False  # the reader task meets the same error and reports it
                return False
            if data is None:
                return True
            if not data:
                self._lendable = False  # end of file (it reads again as such): the reader's
                return False
            self._lent_reads += 1
            try:
                reason = self._dispatch(data)
            except BaseException as exc:  # a sink raised: the rest of the chunk is lost, so
                self._sink_failed(exc)  # fail as the reader task's crash would, then re-raise
                raise
            if reason is not None and self._cancel_scope is not None:
                self._cancel_scope.cancel(reason="connection lost")  # _dispatch failed it
            return True
        finally:
            self._borrower = None
            if subscription is not self._holder:
                self._wake_reader()

    def _wake_reader(self) -> None:
        """Let the reader task read again, if it is parked for a borrower."""
        task, self._reader_task = self._reader_task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def _sink_failed(self, exc: BaseException) -> None:
        error = TransportClosedError(f"a notification sink of {self.name} raised {exc!r}; frames were lost")
        error.__cause__ = exc
        self.fail(error)

    def interrupt_pump(self) -> None:
        """End the current ``pump`` wait for the pipe, if one is waiting (it returns True)."""
        if self._borrower_waiting and not self._borrower_interrupted:
            self._borrower_interrupted = True
            assert isinstance(self._receiver, FdReceiver)
            _interrupt(self._receiver)

    def _dispatch_request(self, request_id: Any, method: str, params: Any) -> None:
        assert self._nursery is not None
        self._handlers_running += 1
        self._nursery.start_soon(self._answer, request_id, method, params)

    async def _answer(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            entry = self._handlers.get(method)
            reply: dict[str, Any] | None
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
        except NoReply:
            return None
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
        await self._write(encode_frame(frame))
        self._frames_sent += 1

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
            if self._closed_error is not None:
                raise self._copy_error()
            try:  # the common case: the pipe takes the whole frame, nothing to wait for
                written = self._sender.write_nowait(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise TransportClosedError(f"cannot write to {self.name}: {exc}") from exc
            if written == len(data):
                return
            data = data[written:]
            self._writing = True
        try:
            if self._closed_error is not None:
                raise self._copy_error()
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
        if self._closed_error is not None:
            raise self._copy_error()
        await trio.lowlevel.checkpoint_if_cancelled()  # the wait below is the schedule point
        pending = _Pending(method)
        request_id, data = self._new_request(method, params, pending)
        try:
            await self._write(data)
            del data  # orjson's output keeps a ~4 KiB buffer: do not hold it while waiting
            self._frames_sent += 1
            if not pending.woken:  # (woken already only if the connection closed meanwhile)
                await self._read_for(pending)
            if not pending.woken:
                pending.task = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(pending.abort)
        finally:
            del self._pending[request_id]
        return self.result_of(method, pending.reply, result_type)

    def _new_request(self, method: str, params: Any, entry: _Pending | ReplyTarget) -> tuple[int, bytes]:
        """A new request's id and encoded frame, with ``entry`` pending under that id."""
        request_id = next(self._ids)
        data = encode_frame(request_frame(request_id, method, unstructure(params) if params is not None else None))
        self._pending[request_id] = entry
        return request_id, data

    def result_of(self, method: str, reply: dict[str, Any] | None, result_type: type[T] | None = None) -> Any:
        """The result of ``method``'s ``reply`` (None: the connection closed first), or the
        exception ``request`` raises for it: what a ``start_request`` callback uses.

        Raises:
            JsonRpcResponseError, TransportClosedError, SdkProtocolError: as ``request``.
        """
        if reply is None:
            error = self._copy_error()
            raise TransportClosedError(
                f"{method!r} got no reply: {error.reason}",
                returncode=error.returncode,
                stderr_tail=error.stderr_tail,
            ) from error.__cause__
        failure = error_of(reply) if "error" in reply else None
        if failure is not None:
            raise response_error(method, failure.code, failure.message, failure.data)
        result = reply.get("result")
        if result_type is None:
            return result
        return structure(result if result is not None else {}, result_type, method=method, what="result")

    async def start_request(self, method: str, params: Any, callback: Callback, token: Any = None) -> int:
        """Send a request whose reply goes to ``callback(token, reply)`` instead of a waiting task.

        Returns the request id once the frame is written. From then on ``callback`` is called
        exactly once, in the task that reads the reply (the reader, usually): with the response
        frame, or with None when the connection closed first (``result_of`` turns either into
        the result or the exception ``request`` would raise). It must not block or raise. It is
        not called after ``forget(request_id)``. ``params`` as for ``request``.

        Raises:
            TransportClosedError: the connection is closed, or closed before or while the
                frame was written; ``callback`` is then never called.

        Not a schedule point when the pipe has room (callers sending many add their own).
        Cancellation is checked before anything is sent; a write cancelled half-way (the peer
        stopped reading) forgets the request and fails the connection, as for ``request``;
        ``callback`` is then never called.
        """
        entry = _Callback(method, callback, token)  # keeps what comes while being written
        request_id = await self.send_request(method, params, entry)
        early, entry.early = entry.early, _UNSET
        if early is not None:  # settled while being written: closed, or answered already
            if early[0] is None:
                self.result_of(method, None)  # raises the closed error, as request() would
            entry.callback(token, early[0])
        return request_id

    async def send_request(self, method: str, params: Any, target: ReplyTarget) -> int:
        """Send a request whose reply goes to ``target.wake(reply)``: ``start_request`` with
        ``target`` itself as the pending entry (no entry object per request).

        Returns the request id once the frame is written. ``target.wake`` is called exactly
        once, in the task that reads the reply, with the response frame, or with None when the
        connection closed first; unlike ``start_request``'s callback it may be called before
        this returns (the reply or the close arrived while the write waited for room), and
        also when this raises (with None: the connection closed, or a write cancelled
        half-way failed it). Never after ``forget``. ``params`` as for ``request``;
        cancellation is checked before anything is sent.

        Raises:
            TransportClosedError: the connection is closed, or the write failed (``target``
                may then have been woken with None already).
        """
        if self._closed_error is not None:
            raise self._copy_error()
        # Not a schedule point unless the write waits for room: requests sent in a loop go out
        # back to back, so the peer reads them in a few chunks instead of one wake-up each.
        await trio.lowlevel.checkpoint_if_cancelled()
        request_id, data = self._new_request(method, params, target)
        try:
            await self._write(data)
        except BaseException:
            self._pending.pop(request_id, None)
            raise
        self._frames_sent += 1
        return request_id

    def forget(self, request_id: int) -> bool:
        """Drop ``start_request``'s or ``send_request``'s request ``request_id``: its callback will not be called
        (a late reply is ignored). False when it was answered (or forgotten) already."""
        entry = self._pending.get(request_id)
        if entry is None or type(entry) is _Pending:
            return False
        del self._pending[request_id]
        return True

    async def _read_for(self, pending: _Pending) -> None:
        """Read the pipe in the requesting task until ``pending`` is answered, while nobody
        else reads it (``pump``): one trip through the scheduler per reply instead of the
        reader task's and then the caller's. Returns at once when the reading cannot be lent.

        From one chunk to the next the reader task stays parked (``_holder``): there is no
        schedule point between two ``pump`` calls here, so waking it would only make it park
        again, one more task step and run-loop pass per frame. It is woken when this ends."""
        if self._holder is None:
            self._holder = pending
        try:
            while not pending.woken and await self.pump(pending):
                pass
        except Exception:
            if self._closed_error is None:
                raise
            # a sink raised while this task read: the connection failed (``_sink_failed``)
            # and woke ``pending`` without a reply, which ``request`` reports as closed
        finally:
            if self._holder is pending:
                self._holder = None
                if self._borrower is None:  # (else the borrower wakes it when done)
                    self._wake_reader()

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
        if not inspect.iscoroutinefunction(handler) and not callable(handler):
            raise TypeError(f"handler for {method!r} must be an async callable")
        self._handlers[method] = (handler, params_type)

    def add_sink(self, sink: Sink) -> None:
        """Call ``sink(notification)`` in the reader, in wire order. It must not block or raise.

        When ``sink`` is a bound method whose object has ``fail(error)``, that is called
        with the TransportClosedError when the connection closes.
        """
        self._sinks = [*self._sinks, sink]

    def remove_sink(self, sink: Sink) -> None:
        """Stop calling ``sink``."""
        self._sinks = [other for other in self._sinks if other != sink]

    def add_batch_sink(self, sink: BatchSink) -> None:
        """Call ``sink(notifications)`` in the reader once per chunk read, with that chunk's
        notifications in wire order (a list the sink must neither change nor keep): for a
        sink that fans notifications out (a router), one call per read instead of one per
        notification. Same rules as ``add_sink``; it is called after the chunk's plain sinks
        saw them, and before any later chunk is dispatched, a ``start_request`` callback
        runs or the connection's close reaches the sinks."""
        self._batch_sinks = [*self._batch_sinks, sink]

    def remove_batch_sink(self, sink: BatchSink) -> None:
        """Stop calling ``sink``."""
        self._batch_sinks = [other for other in self._batch_sinks if other != sink]

    def subscribe(
        self,
        name: str = "subscriber",
        *,
        capacity: int = DEFAULT_CAPACITY,
        filter: NotificationFilter | None = None,
    ) -> Subscription:
        """A bounded subscription to every notification (or those ``filter`` accepts)."""
        subscription = Subscription(
            name, capacity=capacity, filter=filter, on_close=self._unsubscribe, lender=self if self._lendable else None
        )
        if self._closed_error is not None:
            subscription.fail(self._copy_error())
        else:
            self.add_sink(subscription.push)
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
            subscribers=len(self._sinks) + len(self._batch_sinks),
            handlers_running=self._handlers_running,
            lent_reads=self._lent_reads,
        )


def _same_fd(receiver: FdReceiver, sender: FdSender) -> bool:
    try:
        return receiver.fd == sender.fd
    except trio.ClosedResourceError:
        return True


def _closed(receiver: FdReceiver) -> bool:
    try:
        return receiver.fd < 0
    except trio.ClosedResourceError:
        return True


def _interrupt(receiver: FdReceiver) -> None:
    """Wake the task waiting for ``receiver``'s pipe with ClosedResourceError.

    ``notify_closing`` wakes the waiters of a descriptor and forgets its registration
    without closing it; the caller marks the wait as interrupted first, so the woken task
    tells this from a real close (after which the descriptor reads as closed).
    """
    try:
        trio.lowlevel.notify_closing(receiver.fd)
    except trio.ClosedResourceError:
        pass  # closed already: the waiter was woken by the close

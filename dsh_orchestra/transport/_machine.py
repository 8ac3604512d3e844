"""The JSON-RPC connection as a state machine: bytes in, what happens next out. No trio, no I/O.

Owns: the pending-request table (request id -> what its reply goes to), the handler table,
the notification fan-out (one kind of sink: a callable given each read's notifications as a
list), the line framer, the counters and the closed state. ``Connection`` (``_connection``)
drives it: its reader task feeds each chunk read to ``receive``, its writers send the bytes
``start_request`` returns, its handler tasks answer the server requests ``receive`` hands to
``spawn``. Must not know what methods mean.

The rules it keeps, in wire order within and across chunks:

* every notification of a chunk reaches every sink, in one call per sink per chunk, in wire
  order; a response's target is woken only after the sinks got every notification read
  before that response (a reply never overtakes the events before it);
* a response goes to the target pending under its id (popped: each is woken at most once), a
  response nobody waits for is dropped; a server request goes to ``spawn`` with its handler;
* ``fail(error)`` (first call wins) first hands the sinks what was read before it, then wakes
  every pending target with None, calls ``fail(error)`` on each sink's owner that has one, and
  drops the sinks; nothing read after it is handed on.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Awaitable, Callable, Protocol, TypeVar

import orjson

from ..protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    NOTIFICATION,
    REQUEST,
    RESPONSE,
    FrameTooLargeError,
    LineFramer,
    TransportClosedError,
    classify,
    encode_frame,
    error_of,
    params_of,
    request_frame,
    response_error,
    structure,
    unstructure,
)
from ._notification import Notification, OpenNotification

log = logging.getLogger("dsh_orchestra.transport")

T = TypeVar("T")
Handler = Callable[[Any], Awaitable[Any]]
Sink = Callable[[list[Notification]], None]
"""``sink(notifications)``: one read's notifications in wire order (a list it must neither change
nor keep), in the reader; it must not block or raise."""
Spawn = Callable[[Any, str, dict[str, Any], "tuple[Handler, type | None] | None"], None]
"""``spawn(request_id, method, params, handler)``: answer a server request (handler None: unknown)."""


class ReplyTarget(Protocol):
    """What a request's reply goes to: ``wake(reply)``, called once, with the response frame or
    with None when the connection closed first."""

    def wake(self, reply: dict[str, Any] | None = None) -> None: ...


class RpcState:
    """One connection's protocol state (see the module docstring)."""

    def __init__(self, name: str, spawn: Spawn, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.name = name
        self.framer = LineFramer(max_frame_size=max_frame_size)
        self.pending: dict[Any, ReplyTarget] = {}
        self.handlers: dict[str, tuple[Handler, type | None]] = {}
        self.sinks: list[Sink] = []  # replaced, never mutated: a sink may add or remove one while fed
        self.error: TransportClosedError | None = None
        self.frames_received = self.frames_sent = self.notifications = 0
        self._spawn = spawn
        self._ids = itertools.count(1)
        self._batch: list[Notification] | None = None  # the chunk's notifications not handed on yet

    # ---- requests ------------------------------------------------------------------------

    def start_request(self, method: str, params: Any, target: ReplyTarget) -> tuple[int, bytes]:
        """A new request's id and frame, with ``target`` pending under that id.

        ``params``: a wire class instance, a dict, or None (omitted).

        Raises:
            TransportClosedError: closed already (a copy of why).
        """
        if self.error is not None:
            raise self.closed_error()
        request_id = next(self._ids)
        data = encode_frame(request_frame(request_id, method, unstructure(params) if params is not None else None))
        self.pending[request_id] = target
        return request_id, data

    def forget(self, request_id: Any) -> bool:
        """Drop request ``request_id``: its target is not woken. False when it was not pending."""
        return self.pending.pop(request_id, None) is not None

    def result_of(self, method: str, reply: dict[str, Any] | None, result_type: type[T] | None = None) -> Any:
        """The result of ``method``'s ``reply`` (None: the connection closed first), or the
        exception it stands for.

        Raises:
            JsonRpcResponseError: the peer answered with an error (``protocol.KNOWN_ERRORS``).
            TransportClosedError: no reply (the connection closed first).
            SdkProtocolError: the result does not fit ``result_type``.
        """
        if reply is None:
            error = self.closed_error()
            raise TransportClosedError(
                f"{method!r} got no reply: {error.reason}", returncode=error.returncode, stderr_tail=error.stderr_tail,
            ) from error.__cause__
        failure = error_of(reply) if "error" in reply else None
        if failure is not None:
            raise response_error(method, failure.code, failure.message, failure.data)
        result = reply.get("result")
        if result_type is None:
            return result
        return structure(result if result is not None else {}, result_type, method=method, what="result")

    # ---- fan-out -------------------------------------------------------------------------

    def add_sink(self, sink: Sink) -> None:
        """Hand ``sink`` every read's notifications from now on (see ``Sink``)."""
        self.sinks = [*self.sinks, sink]

    def remove_sink(self, sink: Sink) -> None:
        """Stop feeding ``sink`` (harmless when it is not fed)."""
        self.sinks = [other for other in self.sinks if other != sink]

    # ---- receiving -----------------------------------------------------------------------

    def receive(self, data: bytes) -> str | None:
        """Decode ``data`` (a chunk of the wire, not empty) and hand each frame on, in wire
        order; the reason to stop reading, if any (an oversized frame failed the connection).

        A sink or target that raises propagates (the caller fails the connection: the rest
        of the chunk is lost); the chunk's notifications decoded so far still reach the sinks.
        """
        framer = self.framer
        pending = self.pending
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
                    continue
                frames += 1
                kind = classify(frame)
                if kind is NOTIFICATION:  # one with an unusable id (null, say)
                    keep(Notification(frame["method"], params_of(frame), line))
                elif kind is RESPONSE:
                    target = pending.get(frame["id"])
                    if target is None:
                        continue  # nobody waits (forgotten, cancelled, or answered twice)
                    if batch:  # the sinks get what came before first
                        self._deliver()  # (if one raises, the close wakes the target)
                        delivered += len(batch)
                        batch = self._batch = []
                        keep = batch.append
                    if pending.pop(frame["id"], None) is target:  # (not woken by a close meanwhile)
                        target.wake(frame)
                elif kind is REQUEST:
                    method = frame["method"]
                    self._spawn(frame["id"], method, params_of(frame), self.handlers.get(method))
                else:
                    framer.ignored += 1
                if self.error is not None:  # a target closed the connection: nothing more is handed on
                    break
        finally:
            self.frames_received += frames + delivered + len(batch)
            self.notifications += delivered + len(batch)
            if batch and self._batch is batch:
                self._deliver()
            self._batch = None
        return None

    def receive_eof(self) -> str:
        """The wire ended (a partial last line is dropped); the reason to stop reading."""
        self.framer.receive_data(b"")
        return "closed its stream"

    def _deliver(self) -> None:
        batch, self._batch = self._batch, None
        if batch:
            for sink in self.sinks:
                sink(batch)

    def _too_large(self, exc: FrameTooLargeError) -> str:
        log.error("protocol violation from %s: %s", self.name, exc)
        error = TransportClosedError(f"{self.name} sent a frame over the limit: {exc}")
        error.__cause__ = exc
        self.fail(error)  # callers learn it now, not when the process is gone
        return error.reason

    # ---- closing -------------------------------------------------------------------------

    def fail(self, error: TransportClosedError) -> bool:
        """Close with ``error`` (see the module docstring); False when closed already."""
        if self.error is not None:
            return False
        try:  # what was read before the close reaches the sinks first, as it would have
            self._deliver()
        except Exception as exc:  # noqa: BLE001 (a sink broke its contract; closing goes on)
            log.warning("a sink of %s raised while closing: %r", self.name, exc)
        self.error = error
        targets = list(self.pending.values())
        self.pending.clear()
        for target in targets:
            target.wake()
        sinks, self.sinks = self.sinks, []
        for sink in sinks:  # a bound sink whose owner has fail() is told why
            fail = getattr(getattr(sink, "__self__", None), "fail", None)
            if callable(fail):
                fail(error)
        return True

    def closed_error(self) -> TransportClosedError:
        """A fresh copy of why the connection closed (each caller raises its own)."""
        error = self.error
        assert error is not None
        copy = TransportClosedError(error.reason, returncode=error.returncode, stderr_tail=error.stderr_tail)
        copy.__cause__ = error.__cause__ or error  # e.g. the FrameTooLargeError that closed it
        return copy

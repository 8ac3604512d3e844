"""Byte I/O under a connection: any trio stream, plus a fast path for file descriptors.

Owns: how the reader gets bytes and how frames reach the stream. Must not know about frames
or methods.

Why a fast path: trio's ``FdStream.receive_some`` and ``send_all`` each begin with an
unconditional checkpoint, so every frame written and every chunk read costs one extra trip
through the scheduler. On a process pipe (``trio.lowlevel.FdStream``, which is what
``trio.lowlevel.open_process`` gives for ``stdin``/``stdout``) the connection calls
``os.read``/``os.write`` on the non-blocking descriptor itself and parks in
``wait_readable``/``wait_writable`` only when the pipe is empty or full. That removes a
scheduler trip from each write and each read: a pinned W2 round trip went from 43 to 29 us
with this and a write lock taken without a checkpoint when free (docs/benchmarks.md, W2). Any other stream (memory streams in tests,
sockets) goes through the stream's own methods.

Guarantees kept: ``receive()`` is always a schedule point (a reader that finds data waiting
still lets other tasks run once per chunk); ``send_all`` writes every byte or raises, and
records in ``torn`` whether a cancellation left part of a frame on the wire.
"""

from __future__ import annotations

import errno
import os
from typing import Any

import trio

RECEIVE_SIZE = 16 * 1024
"""Bytes asked for per read. Small enough that one read's frames (about 25 session events)
decode into fewer new objects than the garbage collector's young-generation threshold (700):
the reader dispatches each before the next is decoded, and a consumer that keeps up drops
them before any collection sees them. At 64 KiB, a streaming subscriber held about 100
frames' dicts at every collection, which promoted them and made full collections of the
whole heap run every ~10,000 events (about 0.3 s of CPU per 100,000 events, gc callbacks; 16
KiB: no full collection). ``os.read`` allocates the full size before it shrinks the result,
another reason to keep it small (docs/benchmarks.md, W1)."""

_FdStream: Any = getattr(trio.lowlevel, "FdStream", None)  # absent on Windows


def _fd(stream: Any) -> int:
    fd: int = stream.fileno()  # -1 once the FdStream was closed
    if fd < 0:
        raise trio.ClosedResourceError("file was already closed")
    return fd


def _broken(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("file was already closed")
    return trio.BrokenResourceError(f"pipe broke: {exc}")


class StreamReceiver:
    """Chunks from any trio receive stream."""

    def __init__(self, stream: trio.abc.ReceiveStream, size: int = RECEIVE_SIZE) -> None:
        self._stream = stream
        self._size = size

    async def receive(self) -> bytes:
        """The next chunk, ``b""`` at end of file."""
        data = await self._stream.receive_some(self._size)
        return data if type(data) is bytes else bytes(data)


class FdReceiver:
    """Chunks read straight from an ``FdStream``'s non-blocking descriptor.

    Besides ``receive()`` (the reader task's), ``wait()`` and ``read_nowait()`` let the
    connection lend the reading to a subscriber's task (``Connection.pump``).
    """

    def __init__(self, stream: Any, size: int = RECEIVE_SIZE) -> None:
        self._stream = stream
        self._size = size
        self.drained = True  # the last read came back short: the pipe was empty then

    @property
    def fd(self) -> int:
        """The descriptor read (ClosedResourceError once the stream was closed)."""
        return _fd(self._stream)

    async def receive(self) -> bytes:
        """The next chunk, ``b""`` at end of file; always a schedule point."""
        if self.drained:
            await trio.lowlevel.wait_readable(_fd(self._stream))
        else:  # data is likely waiting: only let the other tasks run first
            await trio.lowlevel.checkpoint()
        while True:
            data = self.read_nowait()
            if data is not None:
                return data
            await trio.lowlevel.wait_readable(_fd(self._stream))

    async def wait(self) -> None:
        """Wait until the descriptor is readable (a schedule point)."""
        await trio.lowlevel.wait_readable(_fd(self._stream))

    def read_nowait(self) -> bytes | None:
        """One chunk if one can be read without waiting (``b""`` at end of file), else None."""
        try:
            data: bytes = os.read(_fd(self._stream), self._size)
        except BlockingIOError:
            self.drained = True
            return None
        except OSError as exc:
            raise _broken(exc) from exc
        self.drained = len(data) < self._size
        return data


class StreamSender:
    """Writes through any trio send stream."""

    torn = False  # a trio stream does not say how much of a cancelled write went out

    def __init__(self, stream: trio.abc.SendStream) -> None:
        self._stream = stream

    def write_nowait(self, data: bytes) -> int:
        """Bytes of ``data`` written without waiting: always 0 (use ``send_all``)."""
        return 0

    async def send_all(self, data: bytes) -> None:
        """Write all of ``data``."""
        await self._stream.send_all(data)


class FdSender:
    """Writes straight to an ``FdStream``'s non-blocking descriptor.

    Not a schedule point when the pipe has room (callers that must be one add their own).
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.torn = False  # a cancelled write left part of a frame on the wire

    @property
    def fd(self) -> int:
        """The descriptor written (ClosedResourceError once the stream was closed)."""
        return _fd(self._stream)

    def write_nowait(self, data: bytes) -> int:
        """Write what fits in the pipe now; how many bytes that was (0 when it is full)."""
        try:
            return os.write(_fd(self._stream), data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise _broken(exc) from exc

    async def send_all(self, data: bytes) -> None:
        """Write all of ``data``, waiting for room in the pipe when it is full."""
        stream = self._stream
        view: bytes | memoryview = data
        written = 0
        while True:
            fd = _fd(stream)  # asked again after every wait: the stream may have been closed
            try:
                written += os.write(fd, view)
            except BlockingIOError:
                pass
            except OSError as exc:
                raise _broken(exc) from exc
            if written == len(data):
                return
            view = memoryview(data)[written:]
            try:
                await trio.lowlevel.wait_writable(fd)
            except BaseException:
                self.torn = self.torn or written > 0
                raise


Receiver = StreamReceiver | FdReceiver
Sender = StreamSender | FdSender


def byte_io(stream: Any, size: int = RECEIVE_SIZE) -> tuple[Receiver, Sender]:
    """The receiver and sender for ``stream`` (a Stream or StapledStream)."""
    if isinstance(stream, trio.StapledStream):
        receive_stream: Any = stream.receive_stream
        send_stream: Any = stream.send_stream
    else:
        receive_stream = send_stream = stream
    fd = _FdStream is not None
    receiver: Receiver = (
        FdReceiver(receive_stream, size) if fd and isinstance(receive_stream, _FdStream)
        else StreamReceiver(receive_stream, size)
    )
    sender: Sender = (
        FdSender(send_stream) if fd and isinstance(send_stream, _FdStream)
        else StreamSender(send_stream)
    )
    return receiver, sender

"""Read lending: a task waiting for the wire reads it itself instead of being woken by the reader.

Owns: who reads the pipe now (the reader task or one borrower), the waits on it and their
interruption, and the request waiter (``Waiter``). Used by ``Connection`` only over a pipe it
reads through its descriptor (``_pipes.FdReceiver``) whose descriptor no writer waits on
(interrupting a wait wakes every waiter of the descriptor). What is read is handed to the
connection's ``dispatch``, which feeds the state machine exactly as the reader task does.

Why: a subscriber's ``receive()`` or a request waiting for its reply costs one trip through
trio's scheduler per wait instead of two (the reader task's, then its own): docs/benchmarks.md,
W1 latency and W2.

Invariants:

* At most one task reads the pipe at a time: the reader task reads only while there is no
  borrower (``_borrower`` None), and parks (``_reader_task``) while there is one; a borrower
  that finds the reader task waiting for the pipe takes the wait over by interrupting it
  (``_reader_interrupted`` tells that from a real close). So every chunk is read once and
  dispatched in wire order, whoever reads it.
* The reader task waits plainly (uninterruptibly) until a task first asks to borrow
  (``pump`` returns False that first time and sets ``_wanted``); from its next chunk on it
  waits in the interruptible way (``_active``).
* A borrower waiting for the pipe (``pipe_wait`` on it) is interrupted by ``interrupt()``
  (something it waits for arrived by another way: a push, a close); its ``pump`` returns True.
* A request reading until its reply (``read_for``) holds the reader task parked from one chunk
  to the next (``_holder``) and wakes it when it ends; any other borrower wakes it after each
  chunk. A borrower never reads after the connection closed.
* Whoever reads lets the other tasks run when data keeps waiting: the reader task once per
  chunk, a request's ``pump`` once per chunk, a subscriber's once per ``LENT_READS_PER_YIELD``.
* A borrower that meets the end of the pipe, or an error, stops lending for good
  (``lendable`` False) and leaves it to the reader task to meet and report it.
"""

from __future__ import annotations

from typing import Any, Callable

import trio

from ._pipes import FdReceiver, FdSender, Receiver, Sender

LENT_READS_PER_YIELD = 4
"""A subscriber reading the pipe itself (``pump``) that keeps finding data waiting lets the
other tasks run once per this many chunks (64 KiB of frames at most between schedule points),
not once per chunk: a trip through the scheduler costs about what dispatching 40 events does
(docs/benchmarks.md, W1)."""


class Waiter:
    """One request waiting for its response: a one-shot wake-up, cheaper than trio.Event.

    The requesting task sets ``task`` and parks in ``wait_task_rescheduled(waiter.abort)``;
    ``wake()`` reschedules it, ``abort`` forgets it when cancelled.
    """

    __slots__ = ("reply", "woken", "task", "pipe_wait")

    def __init__(self) -> None:
        self.reply: dict[str, Any] | None = None  # None when woken without one (closed)
        self.woken = False
        self.task: trio.lowlevel.Task | None = None
        self.pipe_wait = False  # its task waits for the pipe in ``pump``

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


def lendable(receiver: Receiver, sender: Sender) -> bool:
    """Whether reads from ``receiver`` can be lent (see the module docstring)."""
    return isinstance(receiver, FdReceiver) and not (isinstance(sender, FdSender) and _same_fd(receiver, sender))


class ReadLending:
    """Lending the reading of one connection's pipe (see the module docstring).

    ``dispatch(data)`` hands a chunk to the connection (it fails the connection itself when a
    sink raises, and re-raises); ``closed()`` tells whether the connection is closed.
    """

    def __init__(self, receiver: FdReceiver, dispatch: Callable[[bytes], None], closed: Callable[[], bool]) -> None:
        self.receiver = receiver
        self.lendable = True
        self.lent_reads = 0
        self._dispatch = dispatch
        self._closed = closed
        self._wanted = False
        self._active = False
        self._borrower: Any = None  # the Subscription or Waiter whose task reads now
        self._holder: Waiter | None = None
        self._borrower_waiting = False
        self._borrower_interrupted = False
        self._reader_task: trio.lowlevel.Task | None = None  # parked while a borrower reads
        self._reader_waiting = False
        self._reader_interrupted = False
        self._unyielded = 0  # chunks a subscriber read since a pump last let others run

    @property
    def wanted(self) -> bool:
        """A task asked to borrow: the reader task should read through ``receive`` from now on."""
        return self._wanted

    # ---- the reader task ---------------------------------------------------------------

    async def receive(self) -> bytes:
        """The reader task's next chunk, waiting in a way a borrower can take over."""
        self._active = True
        receiver = self.receiver
        while True:
            if self._borrower is not None:  # a borrower reads: wait until it is done
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
                    continue  # a borrower took the pipe over
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

    def _wake_reader(self) -> None:
        task, self._reader_task = self._reader_task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    # ---- borrowers -----------------------------------------------------------------------

    async def pump(self, borrower: Any) -> bool:
        """Read and dispatch the next chunk in the calling task for ``borrower`` (a Subscription
        with an empty buffer, or a Waiter); see ``Connection.pump`` for the contract."""
        if not self._active:  # the reader task waits without being interruptible yet
            self._wanted = self.lendable
            return False
        if self._borrower is not None or not self.lendable or self._closed():
            return False
        receiver = self.receiver
        self._borrower = borrower
        try:
            if self._reader_waiting and not self._reader_interrupted:  # take the pipe over
                self._reader_interrupted = True
                _interrupt(receiver)
            if receiver.drained:
                self._borrower_waiting = borrower.pipe_wait = True
                try:
                    await receiver.wait()
                except trio.ClosedResourceError:
                    if self._borrower_interrupted and not _fd_closed(receiver):
                        return True
                    self.lendable = False  # closed under us: the reader task reports it
                    return False
                finally:
                    self._borrower_waiting = self._borrower_interrupted = borrower.pipe_wait = False
                    self._unyielded = 0
            elif self._unyielded < LENT_READS_PER_YIELD - 1 and type(borrower) is not Waiter:
                self._unyielded += 1
            else:  # data is likely waiting: let the other tasks run first, as the reader task
                await trio.lowlevel.checkpoint()  # does (a full pipe must not starve them)
                self._unyielded = 0
                if self._closed():
                    return False
            try:
                data = receiver.read_nowait()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.lendable = False  # the reader task meets the same error and reports it
                return False
            if data is None:
                return True
            if not data:
                self.lendable = False  # end of file (it reads again as such): the reader's
                return False
            self.lent_reads += 1
            self._dispatch(data)
            return True
        finally:
            self._borrower = None
            if borrower is not self._holder:
                self._wake_reader()

    async def read_for(self, waiter: Waiter) -> None:
        """Read the pipe in the requesting task until ``waiter`` is woken, while nobody else
        reads it; returns at once when the reading cannot be lent. The reader task stays
        parked from one chunk to the next and is woken when this ends."""
        if self._holder is None:
            self._holder = waiter
        try:
            while not waiter.woken and await self.pump(waiter):
                pass
        except Exception:
            if not self._closed():
                raise
            # a sink raised while this task read: the connection failed and woke ``waiter``
            # without a reply, which the request reports as closed
        finally:
            if self._holder is waiter:
                self._holder = None
                if self._borrower is None:  # (else the borrower wakes it when done)
                    self._wake_reader()

    def interrupt(self) -> None:
        """End the current borrower's wait for the pipe, if one waits (its ``pump`` returns True)."""
        if self._borrower_waiting and not self._borrower_interrupted:
            self._borrower_interrupted = True
            _interrupt(self.receiver)


def _same_fd(receiver: FdReceiver, sender: FdSender) -> bool:
    try:
        return receiver.fd == sender.fd
    except trio.ClosedResourceError:
        return True


def _fd_closed(receiver: FdReceiver) -> bool:
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

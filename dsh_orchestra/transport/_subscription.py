"""Bounded notification subscriptions: the reader pushes without blocking, consumers receive.

Owns: the per-subscriber buffer and its overflow rule. Must not know what methods mean.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Protocol

import trio

from .._params import Param, ParamValueError
from ..protocol import SubscriberOverflowError, TransportClosedError
from ._notification import Notification as Notification, NotificationFilter as NotificationFilter

DEFAULT_CAPACITY = 100_000




class Lender(Protocol):
    """What a subscription reads through when its buffer is empty (a ``Connection``).

    ``pump(subscription)`` reads and dispatches the next chunk of the wire in the calling
    task and returns True, or returns False at once when it cannot (another task reads,
    the wire is not a pipe, it closed): the subscription then waits to be pushed to. While
    it waits for the pipe, ``subscription.pipe_wait`` is True and ``interrupt_pump()`` ends
    that wait (pump returns True).
    """

    async def pump(self, subscription: Subscription) -> bool: ...

    def interrupt_pump(self) -> None: ...


class Subscription(trio.abc.ReceiveChannel[Notification]):
    """A bounded buffer of notifications, filled by the reader in wire order.

    The reader never waits for a subscription: past ``capacity`` unread notifications the
    subscription fails alone with SubscriberOverflowError (its buffer is dropped). When the
    connection goes away, buffered notifications are still delivered, then the error is raised.
    """

    SCHEDULE_EVERY = 256
    """``receive()`` lets other tasks run at least once per this many items (see there)."""

    def __init__(
        self,
        name: str,
        *,
        capacity: int = DEFAULT_CAPACITY,
        filter: NotificationFilter | None = None,
        on_close: Callable[[Subscription], None] | None = None,
        lender: Lender | None = None,
    ) -> None:
        if capacity <= 0:
            raise ParamValueError(Param("capacity", capacity, spelled="capacity"), f" must be > 0, not {capacity!r}")
        self.name = name
        self.capacity = capacity
        self._filter = filter
        self._on_close = on_close
        self._items: deque[Notification] = deque()
        self._waiters = trio.lowlevel.ParkingLot()  # tasks waiting in receive(); no Event per wait
        self._parked = 0  # len(self._waiters), read without a call on every push
        self._lender = lender
        self.pipe_wait = False  # a receive() waits in the lender's pump (see Lender)
        self._free = self.SCHEDULE_EVERY - 1  # items receive() may return before it lets others run
        self._error: BaseException | None = None
        self._closed = False
        self._accepting = True  # neither failed nor closed: what push() checks

    # ---- reader side (synchronous, never blocks) ------------------------------------

    def push(self, notification: Notification) -> None:
        """Buffer one notification, or fail this subscription if it is full."""
        if not self._accepting:  # failed or closed
            return
        if self._filter is not None and not self._filter(notification):
            return
        items = self._items
        if len(items) >= self.capacity:
            items.clear()
            self.fail(SubscriberOverflowError(self.name, self.capacity))
            self._detach()
            return
        items.append(notification)
        if self._parked or self.pipe_wait:  # (pipe_wait: pushed by someone else than the pump)
            self._wake()

    def push_many(self, notifications: list[Notification]) -> None:
        """``push`` each of ``notifications`` in order, in one call (a router's run of one
        session's notifications from one read)."""
        if not self._accepting:  # failed or closed
            return
        if self._filter is not None:
            for notification in notifications:
                self.push(notification)
            return
        items = self._items
        if len(items) + len(notifications) > self.capacity:  # push() would fail on the first past it
            items.clear()
            self.fail(SubscriberOverflowError(self.name, self.capacity))
            self._detach()
            return
        items.extend(notifications)
        if self._parked or self.pipe_wait:
            self._wake()

    def fail(self, error: BaseException) -> None:
        """Make receive() raise ``error`` once the buffered notifications are drained."""
        if self._error is None:
            self._error = error
            self._accepting = False
        self._wake()

    def _wake(self) -> None:
        if self._parked:
            self._waiters.unpark_all()
        if self.pipe_wait:
            self._interrupt()

    def _interrupt(self) -> None:
        if self._lender is not None:
            self._lender.interrupt_pump()

    # ---- consumer side ---------------------------------------------------------------

    def receive_nowait(self) -> Notification:
        """Return the next buffered notification, or raise trio.WouldBlock."""
        if self._closed:
            raise trio.ClosedResourceError("this subscription was closed")
        if self._items:
            return self._items.popleft()
        if self._error is not None:
            raise self._error_copy()
        raise trio.WouldBlock

    async def receive(self) -> Notification:
        """Wait for the next notification.

        Always a cancel point. A schedule point when it has to wait, and otherwise once
        every ``SCHEDULE_EVERY`` notifications: a consumer draining a full buffer one item at
        a time then costs one trip through the scheduler per batch, not per item, so it keeps
        pace with the reader (which delivers a whole pipe read, a hundred or more
        notifications, per trip) instead of letting the buffer, and the garbage collector's
        work, grow (docs/benchmarks.md, W1).

        With an empty buffer on a connection over a pipe, the waiting task reads the pipe
        itself when no other task is reading it (``Connection.pump``): one trip through the
        scheduler per wait instead of the reader task's and then this one's (finding data
        waiting, it lets other tasks run once per ``LENT_READS_PER_YIELD`` chunks). Every frame
        read that way is dispatched to every subscriber, request and handler exactly as the
        reader task would, in wire order.

        Raises:
            SubscriberOverflowError: this subscription fell behind and was dropped.
            TransportClosedError: the connection went away (after the buffer drained).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        items = self._items
        if items:  # the hot path: one ready (close() empties the buffer for good)
            free = self._free
            if free > 0:
                self._free = free - 1
                return items.popleft()
            self._free = self.SCHEDULE_EVERY - 1
            item = items.popleft()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return item
        if self._lender is not None and not self._closed and self._error is None:
            await self._pump()
            if items and not self._closed:
                self._free -= 1
                return items.popleft()
        while not (items or self._closed or self._error is not None):
            self._parked += 1
            try:
                await self._waiters.park()  # the schedule point (no WouldBlock raised per wait)
            finally:
                self._parked -= 1
        self._free = self.SCHEDULE_EVERY - 1
        return self.receive_nowait()

    async def _pump(self) -> None:
        """Read the wire in this task until an item, an error or a close arrives, or the
        lender cannot lend (then ``receive`` parks as usual)."""
        lender = self._lender
        assert lender is not None
        items = self._items
        while not (items or self._closed or self._error is not None):
            if not await lender.pump(self):
                return

    async def receive_batch(self, max_items: int | None = None) -> list[Notification]:
        """Wait for at least one notification and return all buffered (up to ``max_items``).

        Always a checkpoint (one trip through the scheduler per batch).
        """
        if max_items is not None and max_items < 1:
            raise ParamValueError(Param("max_items", max_items, spelled="max_items"), f" must be >= 1, not {max_items!r}")
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._items and not self._closed:
            out = self._take(max_items)
            self._free = self.SCHEDULE_EVERY - 1
            await trio.lowlevel.cancel_shielded_checkpoint()
            return out
        first = await self.receive()  # it has to wait: that is the schedule point
        return [first, *self._take(None if max_items is None else max_items - 1)]

    def _take(self, limit: int | None) -> list[Notification]:
        items = self._items
        if limit is None or limit >= len(items):
            out = list(items)
            items.clear()
            return out
        return [items.popleft() for _ in range(limit)]

    def _error_copy(self) -> BaseException:
        error = self._error
        assert error is not None
        if type(error) is TransportClosedError:  # each waiter gets its own exception
            copy = TransportClosedError(error.reason, returncode=error.returncode, stderr_tail=error.stderr_tail)
            copy.__cause__ = error.__cause__ or error
            return copy
        return error

    def pending(self) -> int:
        """How many notifications are buffered."""
        return len(self._items)

    def close(self) -> None:
        """Stop receiving; buffered notifications are dropped. Idempotent."""
        if not self._closed:
            self._closed = True
            self._accepting = False
            self._items.clear()
            self._detach()
            self._wake()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """Async twin of ``close()``."""
        self.close()
        await trio.lowlevel.checkpoint()

    def _detach(self) -> None:
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close(self)

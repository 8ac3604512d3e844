"""Bounded notification subscriptions: the reader pushes without blocking, consumers receive.

Owns: the per-subscriber buffer and its overflow rule. Must not know what methods mean.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

import attrs
import trio

from .._params import Param, ParamValueError
from ..protocol import SubscriberOverflowError, TransportClosedError

DEFAULT_CAPACITY = 100_000


@attrs.frozen(slots=True)
class Notification:
    """One notification as received: its method and its params object (plain JSON)."""

    method: str
    params: dict[str, Any]


NotificationFilter = Callable[[Notification], bool]


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
    ) -> None:
        if capacity <= 0:
            raise ParamValueError(Param("capacity", capacity, spelled="capacity"), f" must be > 0, not {capacity!r}")
        self.name = name
        self.capacity = capacity
        self._filter = filter
        self._on_close = on_close
        self._items: deque[Notification] = deque()
        self._waiters = trio.lowlevel.ParkingLot()  # tasks waiting in receive(); no Event per wait
        self._served = 0  # items returned since receive() last let other tasks run
        self._error: BaseException | None = None
        self._closed = False

    # ---- reader side (synchronous, never blocks) ------------------------------------

    def push(self, notification: Notification) -> None:
        """Buffer one notification, or fail this subscription if it is full."""
        if self._error is not None or self._closed:
            return
        if self._filter is not None and not self._filter(notification):
            return
        if len(self._items) >= self.capacity:
            self._items.clear()
            self.fail(SubscriberOverflowError(self.name, self.capacity))
            self._detach()
            return
        self._items.append(notification)
        if self._waiters:
            self._waiters.unpark_all()

    def fail(self, error: BaseException) -> None:
        """Make receive() raise ``error`` once the buffered notifications are drained."""
        if self._error is None:
            self._error = error
        if self._waiters:
            self._waiters.unpark_all()

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

        Raises:
            SubscriberOverflowError: this subscription fell behind and was dropped.
            TransportClosedError: the connection went away (after the buffer drained).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        items = self._items
        if items and not self._closed:
            item = items.popleft()
            self._served += 1
            if self._served >= self.SCHEDULE_EVERY:
                self._served = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
            return item
        while not (items or self._closed or self._error is not None):
            await self._waiters.park()  # the schedule point (no WouldBlock raised per wait)
        self._served = 0
        return self.receive_nowait()

    async def receive_batch(self, max_items: int | None = None) -> list[Notification]:
        """Wait for at least one notification and return all buffered (up to ``max_items``).

        Always a checkpoint (one trip through the scheduler per batch).
        """
        if max_items is not None and max_items < 1:
            raise ParamValueError(Param("max_items", max_items, spelled="max_items"), f" must be >= 1, not {max_items!r}")
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._items and not self._closed:
            out = self._take(max_items)
            self._served = 0
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
            self._items.clear()
            self._detach()
            if self._waiters:
                self._waiters.unpark_all()

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

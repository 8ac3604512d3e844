"""AdaptiveLimiter: how many upstream model calls may be in flight, shared by a whole run.

AIMD (additive increase, multiplicative decrease) when adaptive: +1 after a window of
successes (as many successes in a row as the current limit), x0.5 on a rate-limit or
overload answer (once per window: answers to calls that started before the last decrease do
not halve it again). A ``retry-after`` holds every new call until it passes. Waiting calls are
let through in arrival order. Time is trio's clock, so tests drive it with ``MockClock``.
"""

from __future__ import annotations

import collections
import math

import trio

AUTO_START = 8
"""``auto``: the limit a run starts at."""
AUTO_MIN = 1
"""``auto``: the limit never goes below this."""
AUTO_MAX = 128
"""``auto``: the limit never goes above this."""


class AdaptiveLimiter:
    """A FIFO gate of ``limit`` places; ``adaptive`` makes the limit follow AIMD."""

    def __init__(self, limit: int = AUTO_START, *, adaptive: bool = True, minimum: int = AUTO_MIN,
                 maximum: int = AUTO_MAX) -> None:
        if not minimum <= limit <= maximum:
            raise ValueError(f"the limit must lie in {minimum}..{maximum}, not {limit!r}")
        self.limit = limit
        self.adaptive = adaptive
        self.minimum = minimum
        self.maximum = maximum
        self.in_flight = 0
        self.hold_until = -math.inf
        self.history: list[tuple[float, int]] = [(trio.current_time(), limit)]  # (time, limit) at each change
        self._streak = 0
        self._epoch = 0  # bumped at each decrease; a ticket remembers the epoch it started in
        self._queue: collections.deque[object] = collections.deque()
        self._changed = trio.Event()

    @property
    def waiting(self) -> int:
        """Calls queued for a place."""
        return len(self._queue)

    async def acquire(self) -> int:
        """Wait for a place (in arrival order, after any hold); returns a ticket for ``release``."""
        me = object()
        self._queue.append(me)
        try:
            while True:
                changed = self._changed
                first = self._queue[0] is me
                if first and self.in_flight < self.limit and trio.current_time() >= self.hold_until:
                    break
                deadline = self.hold_until if first and self.in_flight < self.limit else math.inf
                with trio.move_on_at(deadline):
                    await changed.wait()
        except BaseException:
            self._queue.remove(me)
            self._notify()
            raise
        self._queue.popleft()
        self.in_flight += 1
        self._notify()  # the next in line may go too
        return self._epoch

    def release(self, ticket: int, outcome: str) -> None:
        """Give the place back: ``outcome`` ``ok``, ``limited`` (429/529/overloaded) or ``other``."""
        self.in_flight -= 1
        if self.adaptive and outcome == "ok":
            self._streak += 1
            if self._streak >= self.limit and self.limit < self.maximum:
                self._set(self.limit + 1)
        elif self.adaptive and outcome == "limited":
            self._streak = 0
            if ticket == self._epoch:
                self._epoch += 1
                self._set(max(self.minimum, self.limit // 2))
        self._notify()

    def set_limit(self, limit: int, *, adaptive: bool | None = None) -> None:
        """Set the limit now (``dsh-orchestra ctl concurrency``); ``adaptive`` False fixes it
        (AIMD stops), None keeps the mode. Waiting calls go when places open; calls in flight
        above a lowered limit finish.

        Raises:
            ValueError: ``limit`` is below 1.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"the limit is a whole number of at least 1, not {limit!r}")
        if adaptive is not None:
            self.adaptive = adaptive
        self.minimum = min(self.minimum, limit)
        self.maximum = max(self.maximum, limit)
        self._set(limit)
        self._notify()

    def hold(self, seconds: float) -> None:
        """Let no new call through for ``seconds`` from now (a ``retry-after``); holds only extend."""
        until = trio.current_time() + max(0.0, seconds)
        if until > self.hold_until:
            self.hold_until = until
            self._notify()

    def _set(self, limit: int) -> None:
        self._streak = 0
        if limit != self.limit:
            self.limit = limit
            self.history.append((trio.current_time(), limit))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

"""AdaptiveLimiter: how many upstream model calls may be in flight, shared by a whole run.

AIMD (additive increase, multiplicative decrease) when adaptive: +1 after a window of
successes (as many successes in a row as the current limit), x0.5 on a rate-limit or
overload answer (once per window: answers to calls that started before the last decrease do
not halve it again). A ``retry-after`` holds every new call until it passes. An optional rate
paces the starts (at most ``rate`` a second, evenly spaced; a start that woke up late does not
push the later ones back). Waiting calls are let
through in arrival order; a retry goes to the head of the line (behind earlier retries). Time is trio's clock, so tests
drive it with ``MockClock``.

Learned pacing (``learn_pacing``: adaptive limiters, and the Ray node gateways' limiters, whose
limits the quota coordinator sets): a limited answer with a ``retry-after`` of ``w`` seconds makes the
starts go at least ``gap`` apart, ``gap`` = ``w`` at first (the provider's time to its next free
request), x PACE_BACKOFF once per window at a further limited answer (never below that answer's
``w``), / (1 + PACE_STEP) at each success, at most PACE_MAX, dropped below PACE_MIN. Without it, the end of a hold
let every waiting call start at once and all but one were limited again (a herd). A limiter that
learns pacing but does not adapt opens a new window at the first limited answer of a window
too (without halving its limit), so answers to calls sent before that slow-down count as stale.
``shared_gap`` (the quota coordinator's grant: this member's part of the run's learned gap,
``gateway._quota``) spaces the starts as well; the longest of the three intervals holds.
A ``w`` of a whole number of seconds (``retry-after: 1`` without ``retry-after-ms``: a wait
rounded up) says little of the spacing, so ``w`` there is at most the interval at which the
provider served the latest SERVED_SPAN successes (:attr:`AdaptiveLimiter.served_interval`).

:meth:`AdaptiveLimiter.set_limit` and :meth:`AdaptiveLimiter.set_rate` are the public way to
change the limits of a running gateway (``ctl``, the Ray quota coordinator).
"""

from __future__ import annotations

import collections
import math
from typing import Callable

import trio

AUTO_START = 8
"""``auto``: the limit a run starts at."""
AUTO_MIN = 1
"""``auto``: the limit never goes below this."""
AUTO_MAX = 128
"""``auto``: the limit never goes above this."""
PACE_BACKOFF = 1.25
"""Learned pacing: the gap grows by this (once per window) at a limited answer while paced."""
PACE_STEP = 0.01
"""Learned pacing: the gap shrinks by this share (gap / 1.01) at each success."""
PACE_MAX = 1.0
"""Learned pacing: the gap is at most this many seconds (a longer ``retry-after`` is a quota
window's reset, not the spacing between calls: it holds, and the gap stops here)."""
PACE_MIN = 0.001
"""Learned pacing: a gap below this many seconds is dropped (back to the AIMD limit alone)."""
SERVED_SPAN = 16
"""Learned pacing: the provider's served interval is measured over this many latest successes."""


class AdaptiveLimiter:
    """A FIFO gate of ``limit`` places; ``adaptive`` makes the limit follow AIMD; ``rate``
    (calls a second, or None) paces the starts."""

    def __init__(self, limit: int = AUTO_START, *, adaptive: bool = True, minimum: int = AUTO_MIN,
                 maximum: int = AUTO_MAX, rate: float | None = None) -> None:
        if not 0 <= minimum <= limit <= maximum:
            raise ValueError(f"the limit must lie in {minimum}..{maximum}, not {limit!r}")
        self.limit = limit
        self.adaptive = adaptive
        self.minimum = minimum
        self.maximum = maximum
        self.rate: float | None = None
        self.in_flight = 0
        self.peak_in_flight = 0
        self.hold_until = -math.inf
        self.next_start = -math.inf  # the earliest start the pacing allows
        self.last_start = -math.inf  # the slot of the latest paced start
        self.gap: float | None = None  # learned pacing: seconds between starts (None: not paced)
        self.learn_pacing = adaptive  # False: a retry-after only holds (the behaviour before learned pacing)
        self.shared_gap: float | None = None  # this member's part of the run's learned gap (the quota coordinator's grant)
        self.limited_wait: float | None = None  # the longest retry-after (pacing_wait) of a limited answer since the reporter took it
        self._served: collections.deque[float] = collections.deque(maxlen=SERVED_SPAN)  # times of the latest successes
        self.history: list[tuple[float, int]] = [(trio.current_time(), limit)]  # (time, limit) at each change
        self.successes = 0  # answers counted by outcome, for whoever watches (the quota coordinator)
        self.limited = 0
        self.limited_window: int | None = None  # the latest window in which a call started that was limited
        self._streak = 0
        self._epoch = 0  # the window: bumped at each decrease; a ticket remembers the window it started in
        self._queue: collections.deque[object] = collections.deque()
        self._fronts = 0  # retries at the head of the queue
        self._changed = trio.Event()
        self.on_call: Callable[[], None] | None = None  # told of each new call as it joins the line (a batch's StartRamp)
        if rate is not None:
            self.set_rate(rate)

    @property
    def waiting(self) -> int:
        """Calls queued for a place."""
        return len(self._queue)

    @property
    def window(self) -> int:
        """The current window (AIMD decreases so far, or the coordinator's count)."""
        return self._epoch

    def set_rate(self, rate: float | None) -> None:
        """Pace the starts at ``rate`` calls a second (None: no pacing).

        Raises:
            ValueError: ``rate`` not a positive finite number.
        """
        _check_positive(rate, "the rate must be a positive number of calls a second")
        if rate != self.rate:
            self.rate = None if rate is None else float(rate)
            self._respace()

    @property
    def interval(self) -> float:
        """Seconds between starts: the rate's, the learned gap's and the shared gap's, the longest (0: not paced)."""
        return max(0.0 if self.rate is None else 1.0 / self.rate, self.gap or 0.0, self.shared_gap or 0.0)

    def set_window(self, window: int) -> None:
        """Adopt the coordinator's window (tickets then carry it; see ``limited_window``) when it
        is ahead: a window this member opened itself (its own limited answer) is not undone."""
        if window > self._epoch:
            self._epoch = window
            self._streak = 0

    def set_shared_gap(self, gap: float | None) -> None:
        """Space the starts at least ``gap`` seconds apart (None: no such floor): this member's
        part of the run's learned gap, as the quota coordinator grants it.

        Raises:
            ValueError: ``gap`` not a positive finite number.
        """
        _check_positive(gap, "the gap must be a positive number of seconds")
        if gap != self.shared_gap:
            self.shared_gap = None if gap is None else float(gap)
            self._respace()

    async def acquire(self, *, front: bool = False) -> int:
        """Wait for a place (in arrival order, after any hold and the pacing); returns a ticket
        for ``release``. ``front``: go to the head of the line, behind the retries already there (a retry of a
        call that waited)."""
        me = object()
        if not front and self.on_call is not None:
            self.on_call()
        if front:  # behind the retries already waiting (in their order), ahead of every new call
            self._queue.insert(self._fronts, me)
            self._fronts += 1
        else:
            self._queue.append(me)
        try:
            while True:
                changed = self._changed
                first = self._queue[0] is me
                free = first and self.in_flight < self.limit
                at = max(self.hold_until, self.next_start)
                if free and trio.current_time() >= at:
                    break
                with trio.move_on_at(at if free else math.inf):
                    await changed.wait()
        except BaseException:
            self._queue.remove(me)
            self._fronts -= front
            self._notify()
            raise
        self._queue.popleft()
        self._fronts -= front
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        interval = self.interval
        if interval > 0:  # the next slot: one interval after this one's (a late wake-up does not shift it)
            now = trio.current_time()
            slot = self.next_start if now - self.next_start < interval else now
            self.last_start, self.next_start = slot, slot + interval
        self._notify()  # the next in line may go too
        return self._epoch

    def release(self, ticket: int, outcome: str, *, retry_after: float | None = None) -> None:
        """Give the place back: ``outcome`` ``ok``, ``limited`` (429/529/overloaded) or ``other``;
        ``retry_after``: the seconds a limited answer said to wait (learned pacing)."""
        self.in_flight -= 1
        retry_after = self.pacing_wait(retry_after)
        if self.learn_pacing:
            self._learn(ticket, outcome, retry_after)
        if outcome == "ok":
            self.successes += 1
            self._served.append(trio.current_time())
        elif outcome == "limited":
            self.limited += 1
            self.limited_window = ticket if self.limited_window is None else max(self.limited_window, ticket)
            if retry_after is not None:
                self.limited_wait = max(retry_after, self.limited_wait or 0.0)
        if self.adaptive and outcome == "ok":
            self._streak += 1
            if self._streak >= self.limit and self.limit < self.maximum:
                self._set(self.limit + 1)
        elif self.adaptive and outcome == "limited":
            self._streak = 0
            if ticket == self._epoch:
                self._epoch += 1
                self._set(max(self.minimum, self.limit // 2))
        elif self.learn_pacing and outcome == "limited" and ticket == self._epoch:
            self._epoch += 1  # a slow-down without halving (the coordinator, or ctl, sets the limit)
            self._streak = 0
        self._notify()

    def set_limit(self, limit: int, *, adaptive: bool | None = None) -> None:
        """Set the number of calls in flight from now on (``dsh-orchestra ctl concurrency``, the
        quota coordinator). ``adaptive`` False fixes it (AIMD stops), None keeps the mode (an
        adaptive limiter goes on adapting from ``limit``). Waiting calls go when places open;
        calls in flight above a lowered limit finish first. ``minimum`` and ``maximum`` widen to
        take ``limit``.

        Raises:
            ValueError: ``limit`` is below 1 (below 0 for a limiter made with ``minimum`` 0).
        """
        floor = min(1, self.minimum)  # 0 only for a limiter made with minimum 0 (a quota member's idle share)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < floor:
            raise ValueError(f"the limit must be an integer >= {floor}, not {limit!r}")
        if adaptive is not None:
            self.adaptive = adaptive
        self.minimum = min(self.minimum, limit)
        self.maximum = max(self.maximum, limit)
        self._set(limit)
        self._notify()

    @property
    def served_interval(self) -> float | None:
        """Seconds between the latest SERVED_SPAN successes, on average (None: fewer than 2)."""
        served = self._served
        return (served[-1] - served[0]) / (len(served) - 1) if len(served) >= 2 else None

    def pacing_wait(self, retry_after: float | None) -> float | None:
        """The spacing a limited answer's ``retry_after`` tells: itself; for a whole number of
        seconds (rounded up by the provider), at most :attr:`served_interval` (not below
        PACE_MIN)."""
        if retry_after is None or retry_after < 1.0 or not float(retry_after).is_integer():
            return retry_after
        served = self.served_interval
        return retry_after if served is None else max(PACE_MIN, min(float(retry_after), served))

    def hold(self, seconds: float) -> None:
        """Let no new call through for ``seconds`` from now (a ``retry-after``); holds only extend."""
        until = trio.current_time() + max(0.0, seconds)
        if until > self.hold_until:
            self.hold_until = until
            self._notify()

    def _learn(self, ticket: int, outcome: str, retry_after: float | None) -> None:
        if outcome == "ok":
            self.gap = gap_after_successes(self.gap, 1)
        elif outcome == "limited" and retry_after is not None and retry_after >= PACE_MIN:
            # the first limited answer of this window opens a new one (the caller halves the limit next)
            self.gap = gap = gap_after_limit(self.gap, retry_after, new_window=ticket == self._epoch)
            if math.isfinite(self.last_start):
                self.next_start = max(self.next_start, self.last_start + gap)

    def _set(self, limit: int) -> None:
        self._streak = 0
        if limit != self.limit:
            self.limit = limit
            self.history.append((trio.current_time(), limit))

    def _respace(self) -> None:
        """Keep the last start; space the next by the (new) interval."""
        if math.isfinite(self.last_start):
            self.next_start = self.last_start + self.interval
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


def gap_after_successes(gap: float | None, successes: int) -> float | None:
    """The learned gap after ``successes`` answers: / (1 + PACE_STEP) each, dropped (None) below
    PACE_MIN. The rule of one gateway and of the Ray run's ledger (``gateway._quota``)."""
    if gap is None or not successes:
        return gap
    gap /= (1.0 + PACE_STEP) ** min(successes, 10_000)  # (a float's range; far below PACE_MIN anyway)
    return None if gap < PACE_MIN else gap


def gap_after_limit(gap: float | None, wait: float, *, new_window: bool) -> float:
    """The learned gap after a limited answer that said to wait ``wait`` seconds: ``wait`` at
    first, x PACE_BACKOFF at the first such answer of a window (``new_window``), never below
    ``wait``, at most PACE_MAX. The rule of one gateway and of the Ray run's ledger."""
    if gap is None:
        gap = wait
    elif new_window:
        gap = max(wait, gap * PACE_BACKOFF)
    else:
        gap = max(wait, gap)
    return min(PACE_MAX, gap)


def _check_positive(value: float | None, message: str) -> None:
    """Raise ``ValueError`` (``message``, then ``value``) unless ``value`` is None or a positive finite number."""
    if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                  and math.isfinite(value) and value > 0):
        raise ValueError(f"{message}, not {value!r}")

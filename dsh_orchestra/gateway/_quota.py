"""QuotaLedger: one provider quota shared by the gateways of several nodes (pure logic, no I/O).

The run's limit (``model_concurrency`` calls in flight, ``model_rate`` calls a second) holds
for the whole run. Each node's gateway reports what it has and needs (:class:`QuotaReport`)
and gets its share back (:class:`QuotaGrant`); the ledger is what the Ray quota coordinator
runs (``dsh_orchestra.scale``), and time is passed in, so it is tested without Ray or clocks.

Shares: every member gets one place when the limit allows (so an idle node can start a call
at once; not a member idle for ``idle_after`` seconds: it holds no place the others need),
the rest goes to the members that ask for more (water-filling on their demand:
calls in flight plus waiting), and what nobody asks for is spread evenly. Safety: the ledger
keeps, per member, a bound of what the member may have in flight (``reserved``: the larger
of its grant and what it reported) and only ever grants out of what the others' bounds
leave, so the calls in flight of all members together never exceed the limit, also while a
share moves from one member to another (a member lowering its share is counted at its old
bound until it reports again). The rate is shared the same way, in proportion to the
concurrency shares.

Adaptive limits (``auto``): AIMD for the run: +1 after a window of successes summed over the
members; x0.5 when any member reports a limited answer to a call started in the current
window (once per window: the window number travels in the grants, the members tag their
calls with it). A ``retry-after`` seen by one member holds them all. A member that has not
reported for ``stale_after`` seconds (its node was lost) is dropped and its share goes to the
others.

Windows and learned pacing (every mode, ``auto`` or fixed): the window counts the run's
slow-downs; a member's limiter opens a new window itself at its first limited answer of a
window (so its answers to calls sent before are stale at once) and the ledger follows when the
member reports it (``window`` = that window + 1; never back). The ledger learns the run's pacing
as one gateway would (``AdaptiveLimiter``'s rule, run-wide): a reported ``retry-after`` of ``w``
seconds sets the run's ``gap`` (seconds between the run's starts) to ``w`` at first, x
PACE_BACKOFF at a report that opens a new window (never below ``w``), at least ``w`` otherwise;
/ (1 + PACE_STEP) per success the members report; at most PACE_MAX, dropped below PACE_MIN.
Each member is granted its part in proportion to its demand (calls in flight and waiting; its
own counted at least 1): ``gap x (the others' demands + its own) / its own``, so the members'
starts together go ``gap`` apart: a provider's quota is shared by every node, so one node's
429 slows all of them, and an idle member slows nobody (its first call goes at once). Not by
the concurrency shares as the rate: those spread the unused places evenly, which would slow a
busy member beside an idle one.
"""

from __future__ import annotations

import math
from typing import Awaitable, Callable, Collection, Mapping

import attrs
import trio

from ._limiter import AUTO_MAX, AUTO_MIN, AUTO_START, PACE_MIN, AdaptiveLimiter, gap_after_limit, gap_after_successes

STALE_AFTER = 3.0
"""Seconds without a report after which a member counts as gone (its share is freed)."""
REPORT_EVERY = 0.2
"""Seconds between a member's reports (:func:`follow_quota`)."""
IDLE_AFTER = 1.0
"""Seconds without a call in flight or waiting after which a member has no place of its own."""


def fair_shares(total: int, demands: Mapping[str, int], idle: Collection[str] = ()) -> dict[str, int]:
    """``total`` places shared out: one each first (when ``total`` allows; none to the ``idle``
    members), then water-filling on the unmet demand, then the rest evenly; ties go by name.
    The shares sum to ``total`` (or less: never more)."""
    names = sorted(demands)
    if not names or total <= 0:
        return {name: 0 for name in names}
    floored = [name for name in names if name not in idle]
    floor = 1 if total >= len(floored) else 0
    shares = {name: floor if name not in idle else 0 for name in names}
    left = total - floor * len(floored)
    while left > 0:
        unmet = [name for name in names if demands[name] > shares[name]]
        if not unmet:
            break
        name = min(unmet, key=lambda n: (shares[n], names.index(n)))  # the lowest level rises first
        shares[name] += 1
        left -= 1
    while left > 0:  # nobody asks for more: spread evenly (headroom for the next burst)
        name = min(names, key=lambda n: (shares[n], names.index(n)))
        shares[name] += 1
        left -= 1
    return shares


@attrs.frozen(kw_only=True)
class QuotaReport:
    """What a member's gateway tells the ledger: ``in_flight`` and ``waiting`` calls, its current
    ``limit`` and ``rate`` (as last granted and applied), ``successes`` since its last report,
    ``limited_window`` (the latest window in which a call started that was answered 429/529/
    overloaded, or None), ``hold_s`` (seconds a ``retry-after`` it saw still holds) and
    ``limited_wait`` (the longest ``retry-after`` of a limited answer since its last report, or
    None: the ledger learns the run's pacing from it)."""

    in_flight: int = 0
    waiting: int = 0
    limit: int = 0
    rate: float | None = None
    successes: int = 0
    limited_window: int | None = None
    hold_s: float = 0.0
    limited_wait: float | None = None

    @property
    def bound(self) -> int:
        """The most calls this member may have in flight until it applies a new grant."""
        return max(self.limit, self.in_flight)


@attrs.frozen(kw_only=True)
class QuotaGrant:
    """What the ledger tells a member: its ``limit`` and ``rate`` from now on, the ``window`` to
    tag its calls with, ``hold_s``: hold every new call that long (0: none), and ``gap``: start
    calls at least that many seconds apart (its part of the run's learned pacing; None: none)."""

    limit: int
    rate: float | None
    window: int
    hold_s: float = 0.0
    gap: float | None = None


@attrs.define
class _Member:
    demand: int = 0
    reserved: int = 0  # calls in flight this member may have at most until it reports again
    reserved_rate: float = 0.0
    limit: int = 0  # the last grant
    last_seen: float = 0.0
    busy_at: float = 0.0  # when it last had a call in flight or waiting (or joined)


class QuotaLedger:
    """The run's quota and its members' shares (see the module docstring).

    ``concurrency``: an integer (fixed) or ``"auto"`` (AIMD from ``start`` in
    ``minimum..maximum``); ``rate``: calls a second for the run, or None; ``idle_after``: seconds
    without a call after which a member gets no place of its own.
    """

    def __init__(self, concurrency: int | str = "auto", *, rate: float | None = None, start: int = AUTO_START,
                 minimum: int = AUTO_MIN, maximum: int = AUTO_MAX, stale_after: float = STALE_AFTER,
                 idle_after: float = IDLE_AFTER) -> None:
        self.adaptive = concurrency == "auto"
        self.total = start if self.adaptive else int(concurrency)
        self.minimum = minimum if self.adaptive else self.total
        self.maximum = max(maximum, self.total)
        self.rate = rate
        self.stale_after = stale_after
        self.idle_after = idle_after
        self.window = 0
        self.members: dict[str, _Member] = {}
        self.history: list[tuple[float, int]] = []  # (time, total) at each change
        self.hold_until = -math.inf
        self.gap: float | None = None  # learned pacing: seconds between the run's starts (None: not paced)
        self._streak = 0

    def set_total(self, total: int, now: float) -> None:
        """Set the run's concurrency limit (``ctl``); AIMD goes on from it when adaptive.

        Raises:
            ValueError: ``total`` below 1.
        """
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise ValueError(f"the limit must be an integer >= 1, not {total!r}")
        self.maximum = max(self.maximum, total)
        self._set(total, now)

    def shares(self, now: float | None = None) -> dict[str, int]:
        """Each member's target share of the concurrency limit (at ``now``: the members idle for
        ``idle_after`` seconds get no place of their own)."""
        idle = () if now is None else [name for name, member in self.members.items()
                                       if not member.demand and now - member.busy_at > self.idle_after]
        return fair_shares(self.total, {name: member.demand for name, member in self.members.items()}, idle)

    def report(self, name: str, report: QuotaReport, now: float) -> QuotaGrant:
        """Record ``name``'s report (joining if new) and return its grant."""
        self.expire(now)
        member = self.members.setdefault(name, _Member(busy_at=now))
        member.last_seen = now
        member.demand = report.in_flight + report.waiting
        if member.demand:
            member.busy_at = now
        if report.hold_s > 0:
            self.hold_until = max(self.hold_until, now + report.hold_s)
        slowed = report.limited_window is not None and report.limited_window >= self.window
        self._learn(slowed, report)
        if slowed:
            assert report.limited_window is not None
            self.window = report.limited_window + 1
        if self.adaptive:
            if slowed:
                self._streak = 0
                self._set(max(self.minimum, self.total // 2), now)
            else:
                self._streak += report.successes
                if self._streak >= self.total and self.total < self.maximum:
                    self._set(self.total + 1, now)
        target = self.shares(now)[name]
        others = sum(m.reserved for n, m in self.members.items() if n != name)
        limit = max(0, min(target, self.total - others))
        member.limit = limit
        member.reserved = max(limit, report.bound)
        rate = None
        if self.rate is not None:
            others_rate = sum(m.reserved_rate for n, m in self.members.items() if n != name)
            wanted = self.rate * target / self.total if self.total else 0.0
            rate = max(0.0, min(wanted, self.rate - others_rate))
            member.reserved_rate = max(rate, report.rate or 0.0)
        gap = None
        if self.gap is not None and target > 0:  # its part of the run's starts, by demand (its own counted at least 1)
            own = max(1, member.demand)
            gap = self.gap * (sum(m.demand for n, m in self.members.items() if n != name) + own) / own
        return QuotaGrant(limit=limit, rate=rate, window=self.window, hold_s=max(0.0, self.hold_until - now), gap=gap)

    def leave(self, name: str) -> None:
        """``name`` is gone (its gateway closed): its share is freed."""
        self.members.pop(name, None)

    def expire(self, now: float) -> list[str]:
        """Drop the members silent for ``stale_after`` seconds; their names."""
        gone = [name for name, member in self.members.items() if now - member.last_seen > self.stale_after]
        for name in gone:
            del self.members[name]
        return gone

    def reserved(self) -> int:
        """The calls in flight all members together may have at most now (never above ``total``
        once the members applied their grants)."""
        return sum(member.reserved for member in self.members.values())

    def _learn(self, slowed: bool, report: QuotaReport) -> None:
        """The run's learned gap after ``report`` (its successes first, then its longest
        retry-after; ``slowed``: it opens a new window), by one gateway's rule, run-wide."""
        self.gap = gap_after_successes(self.gap, report.successes)
        wait = report.limited_wait
        if wait is not None and wait >= PACE_MIN:
            self.gap = gap_after_limit(self.gap, wait, new_window=slowed)

    def _set(self, total: int, now: float) -> None:
        self._streak = 0
        if total != self.total:
            self.total = total
            self.history.append((now, total))


def quota_report(limiter: AdaptiveLimiter, successes: int) -> QuotaReport:
    """What ``limiter`` has to report now (``successes``: since the last report)."""
    return QuotaReport(in_flight=limiter.in_flight, waiting=limiter.waiting, limit=limiter.limit,
                       rate=limiter.rate if limiter.limit > 0 else None, successes=successes,
                       limited_window=limiter.limited_window,
                       hold_s=max(0.0, limiter.hold_until - trio.current_time()), limited_wait=limiter.limited_wait)


def apply_grant(limiter: AdaptiveLimiter, grant: QuotaGrant) -> None:
    """Set ``limiter`` to ``grant`` (a zero rate share: no new call at all)."""
    limiter.set_window(grant.window)
    limiter.set_shared_gap(grant.gap)
    limiter.set_rate(grant.rate if grant.rate else None)
    limiter.set_limit(0 if grant.rate is not None and grant.rate <= 0 else grant.limit)
    if grant.hold_s > 0:
        limiter.hold(grant.hold_s)


async def follow_quota(limiter: AdaptiveLimiter, exchange: Callable[[QuotaReport], Awaitable[QuotaGrant | None]], *,
                       every: float = REPORT_EVERY,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Keep ``limiter`` (fixed, ``minimum`` 0; the Ray node gateways' also learn pacing) at this
    member's share: report every ``every`` seconds through ``exchange`` (a call to the
    coordinator) and apply the grant; ``exchange`` returning None (no answer this time) keeps
    the limits as they are. Started
    (``nursery.start``) once a first grant is applied. Runs until cancelled."""
    seen = limiter.successes
    started = False
    while True:
        successes, seen = limiter.successes - seen, limiter.successes
        report = quota_report(limiter, successes)
        window, wait = limiter.limited_window, limiter.limited_wait
        limiter.limited_window = limiter.limited_wait = None
        grant = await exchange(report)
        if grant is None:  # not heard: report the same again next time
            seen -= successes
            limiter.limited_window = window if limiter.limited_window is None else max(window or 0, limiter.limited_window)
            limiter.limited_wait = wait if limiter.limited_wait is None else max(wait or 0.0, limiter.limited_wait)
            await trio.sleep(every)
            continue
        apply_grant(limiter, grant)
        if not started:
            started = True
            task_status.started()
        await trio.sleep(every)

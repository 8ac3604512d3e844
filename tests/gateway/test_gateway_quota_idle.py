"""An idle member of the run's quota (no call in flight or waiting for ``IDLE_AFTER`` seconds:
the driver's judges' gateway between judges, a node whose actors are done) gives its one
place back to the members that need it, and gets it again when a call comes. No Ray: the
ledger is pure, and the members are limiters following it on trio's MockClock."""

from __future__ import annotations

import random
from functools import partial

import pytest
import trio
import trio.testing

from dsh_orchestra.gateway import AdaptiveLimiter, QuotaGrant, QuotaLedger, QuotaReport, fair_shares, follow_quota
from dsh_orchestra.gateway._quota import IDLE_AFTER


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def test_an_idle_member_has_no_place_of_its_own_when_the_others_need_them() -> None:
    busy = {"a": 64, "b": 64}
    assert fair_shares(3, {**busy, "judges": 0}) == {"a": 1, "b": 1, "judges": 1}  # one each
    assert fair_shares(3, {**busy, "judges": 0}, idle={"judges"}) == {"a": 2, "b": 1, "judges": 0}
    assert fair_shares(2, {**busy, "judges": 0}, idle={"judges"}) == {"a": 1, "b": 1, "judges": 0}  # one each again
    # nobody needs them: spread to the idle member too (headroom), as before
    assert fair_shares(8, {"a": 2, "judges": 0}, idle={"judges"}) == fair_shares(8, {"a": 2, "judges": 0}) == {"a": 4, "judges": 4}


def test_the_ledger_takes_the_place_of_a_member_idle_for_idle_after_seconds() -> None:
    ledger = QuotaLedger(3)
    limits = {"a": 0, "b": 0, "judges": 0}  # each member's grant, applied at once
    now = 0.0

    def reports(judges: int) -> None:
        """A round of reports: the busy members want 64 calls each, the judges' ``judges``; each
        has as many in flight as its grant allows."""
        nonlocal now
        now = round(now + 0.2, 1)
        for name, demand in (("a", 64), ("b", 64), ("judges", judges)):
            running = min(limits[name], demand)
            sent = QuotaReport(in_flight=running, waiting=demand - running, limit=limits[name])
            limits[name] = ledger.report(name, sent, now).limit

    for _ in range(4):  # a judge's call: the judges' gateway joins, the shares settle
        reports(1)
    assert limits == {"a": 1, "b": 1, "judges": 1}
    for _ in range(round(IDLE_AFTER / 0.2) - 1):  # idle, not for long: its place is kept (a next call starts at once)
        reports(0)
        assert limits == {"a": 1, "b": 1, "judges": 1}
    for _ in range(4):  # idle for IDLE_AFTER; its grant lowered, then reported (counted at its old bound until then)
        reports(0)
    assert limits == {"a": 2, "b": 1, "judges": 0} and ledger.reserved() == 3  # the busy members have every place
    waited = 0
    while limits["judges"] == 0:  # a judge's call again: it asks, and has its place once a's second call ends
        reports(1)
        waited += 1
        assert ledger.reserved() == 3 and waited <= 3
    assert limits == {"a": 1, "b": 1, "judges": 1}


async def test_an_idle_members_place_goes_to_the_busy_ones_and_comes_back_for_its_next_call(
        autojump_clock: trio.testing.MockClock) -> None:
    """Two busy members and the judges' (one call, then idle, then one more): the calls in
    flight stay within the limit throughout; idle, the judges' member holds nothing and the
    busy ones use the whole limit; its next call starts within a few reports."""
    total = 4
    ledger = QuotaLedger(total)
    rng = random.Random(27)
    state = {"in_flight": 0, "peak": 0}
    limiters: dict[str, AdaptiveLimiter] = {}

    async def exchange(name: str, sent: QuotaReport) -> QuotaGrant:
        await trio.sleep(rng.uniform(0.001, 0.02))
        grant = ledger.report(name, sent, trio.current_time())
        await trio.sleep(rng.uniform(0.001, 0.02))
        return grant

    async def call(limiter: AdaptiveLimiter, seconds: float) -> None:
        ticket = await limiter.acquire()
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        try:
            await trio.sleep(seconds)
        finally:
            state["in_flight"] -= 1
            limiter.release(ticket, "ok")

    async def busy(limiter: AdaptiveLimiter) -> None:
        while True:
            await call(limiter, rng.uniform(0.05, 0.3))

    async def member(name: str, callers: int, task_status: trio.TaskStatus[None]) -> None:
        limiter = limiters[name] = AdaptiveLimiter(0, adaptive=False, minimum=0, maximum=1000)
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(follow_quota, limiter, partial(exchange, name), every=0.2))
            task_status.started()
            for _ in range(callers):
                nursery.start_soon(busy, limiter)

    async with trio.open_nursery() as nursery:
        await nursery.start(member, "a", 6)
        await nursery.start(member, "b", 6)
        await nursery.start(member, "judges", 0)
        judges = limiters["judges"]
        await call(judges, 0.1)  # the first judge's call
        await trio.sleep(IDLE_AFTER + 1.0)
        assert judges.limit == 0 and limiters["a"].limit + limiters["b"].limit == total
        assert limiters["a"].in_flight + limiters["b"].in_flight == total  # the judges' place is used
        started = trio.current_time()
        await call(judges, 0.0)  # the next judge's call gets a place back
        assert trio.current_time() - started < 1.0
        nursery.cancel_scope.cancel()
    assert state["peak"] == total

"""One quota shared by several gateways (QuotaLedger, follow_quota): shares, rebalancing, the
run-wide AIMD, and the limit never exceeded while shares move. No Ray: the ledger is pure and
the members are limiters driven on trio's MockClock."""

from __future__ import annotations

import random
from functools import partial

import pytest
import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from dsh_orchestra.gateway import AdaptiveLimiter, QuotaGrant, QuotaLedger, QuotaReport, fair_shares, follow_quota


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def test_fair_shares_one_each_then_by_demand_then_evenly() -> None:
    assert fair_shares(8, {"a": 10, "b": 10}) == {"a": 4, "b": 4}
    assert fair_shares(8, {"a": 10, "b": 0}) == {"a": 7, "b": 1}  # an idle member keeps one place
    assert fair_shares(8, {"a": 2, "b": 3}) == {"a": 4, "b": 4}  # demands met, the rest spread
    assert fair_shares(9, {"a": 100, "b": 2, "c": 0}) == {"a": 6, "b": 2, "c": 1}
    assert fair_shares(2, {"a": 5, "b": 5, "c": 5}) == {"a": 1, "b": 1, "c": 0}  # too few places for one each
    assert fair_shares(0, {"a": 1}) == {"a": 0} and fair_shares(5, {}) == {}


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 64), st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 100), max_size=6))
def test_fair_shares_never_hand_out_more_than_the_total(total: int, demands: dict[str, int]) -> None:
    shares = fair_shares(total, demands)
    assert set(shares) == set(demands) and all(v >= 0 for v in shares.values())
    assert sum(shares.values()) == (total if demands else 0)
    if total >= len(demands):
        assert all(v >= 1 for v in shares.values())
    # water-filling: a member gets more than another only if it asked for more, or all asks are met
    unmet = {n for n in demands if shares[n] < demands[n]}
    if unmet:
        for n in demands:
            for m in unmet:
                assert shares[n] <= max(shares[m], demands[n]) or shares[n] <= 1


def report(in_flight: int = 0, waiting: int = 0, limit: int = 0, **extra: object) -> QuotaReport:
    return QuotaReport(in_flight=in_flight, waiting=waiting, limit=limit, **extra)  # type: ignore[arg-type]


def test_a_lowered_share_is_counted_at_its_old_bound_until_its_member_reports_again() -> None:
    ledger = QuotaLedger(8)
    assert ledger.report("a", report(waiting=20), 0.0).limit == 8  # alone: everything
    grant = ledger.report("b", report(waiting=20), 0.1)
    assert grant.limit == 0  # a may have 8 in flight: nothing is free for b yet
    grant = ledger.report("a", report(in_flight=8, waiting=12, limit=8), 0.2)
    assert grant.limit == 4 and ledger.reserved() == 8  # a keeps its 8 in flight reserved until they end
    assert ledger.report("b", report(waiting=20), 0.3).limit == 0
    assert ledger.report("a", report(in_flight=4, waiting=16, limit=4), 0.4).limit == 4
    assert ledger.report("b", report(waiting=20), 0.5).limit == 4
    assert ledger.reserved() == 8


def test_a_member_that_stops_reporting_gives_its_share_to_the_others() -> None:
    ledger = QuotaLedger(9, stale_after=3.0)
    for t in (0.0, 0.2, 0.4):
        for name in "abc":
            ledger.report(name, report(in_flight=3, waiting=10, limit=ledger.members.get(name, None) and 3 or 0), t)
    assert ledger.shares() == {"a": 3, "b": 3, "c": 3}
    for t in (1.0, 2.0, 3.0, 3.5):  # c's node is lost: no more reports from it
        for name in "ab":
            ledger.report(name, report(in_flight=3, waiting=10, limit=3), t)
    assert set(ledger.members) == {"a", "b"}
    assert ledger.report("a", report(in_flight=3, waiting=10, limit=3), 3.6).limit in (4, 5)
    assert ledger.report("b", report(in_flight=3, waiting=10, limit=3), 3.7).limit in (4, 5)
    assert sum(m.limit for m in ledger.members.values()) == 9
    ledger.leave("b")  # a gateway that closes says so
    assert ledger.report("a", report(in_flight=4, waiting=10, limit=4), 3.8).limit == 9


def test_an_idle_member_keeps_one_place_and_the_busy_one_gets_the_rest() -> None:
    ledger = QuotaLedger(10)
    ledger.report("idle", report(), 0.0)
    ledger.report("busy", report(waiting=50), 0.0)
    assert ledger.members["idle"].limit == 10  # alone when it joined: everything
    assert ledger.report("idle", report(limit=10), 0.1).limit == 1
    # it had 10 places until it applied its grant of 1: counted at 10 until it reports at 1
    assert ledger.report("busy", report(waiting=50), 0.2).limit == 0
    ledger.report("idle", report(limit=1), 0.3)
    assert ledger.report("busy", report(waiting=50), 0.4).limit == 9


def test_a_limited_answer_on_any_member_halves_the_run_limit_once_per_window() -> None:
    ledger = QuotaLedger("auto", start=16)
    a = ledger.report("a", report(waiting=30), 0.0)
    b = ledger.report("b", report(waiting=30), 0.0)
    assert (a.window, b.window) == (0, 0)
    ledger.report("a", report(in_flight=8, limit=8, limited_window=0, hold_s=2.0), 1.0)
    assert ledger.total == 8 and ledger.window == 1
    grant = ledger.report("b", report(in_flight=8, limit=8, limited_window=0), 1.1)  # the same window: not again
    assert ledger.total == 8 and grant.window == 1
    assert grant.hold_s == pytest.approx(1.9)  # a's retry-after holds b too
    ledger.report("b", report(in_flight=4, limit=4, limited_window=1), 1.2)  # a call of the new window: again
    assert ledger.total == 4 and ledger.window == 2
    for t in range(4):  # 4 successes (a window of the new limit): +1
        ledger.report("a", report(limit=2, successes=1), 2.0 + t / 10)
    assert ledger.total == 5
    assert [total for _, total in ledger.history] == [8, 4, 5]


def test_fixed_limits_do_not_adapt_and_ctl_can_set_them() -> None:
    ledger = QuotaLedger(6)
    ledger.report("a", report(limited_window=0, successes=100), 0.0)
    assert ledger.total == 6
    ledger.set_total(3, 1.0)
    assert ledger.report("a", report(limit=6, waiting=9), 1.1).limit == 3
    with pytest.raises(ValueError, match=">= 1"):
        ledger.set_total(0, 2.0)


def test_the_rate_is_shared_in_proportion_and_never_over_the_run_rate() -> None:
    ledger = QuotaLedger(8, rate=20.0)
    first = ledger.report("a", report(waiting=10), 0.0)
    assert first.rate == pytest.approx(20.0)
    b = ledger.report("b", report(waiting=10), 0.1)
    assert b.rate == pytest.approx(0.0)  # a still runs at 20/s until it reports
    a = ledger.report("a", report(in_flight=4, waiting=10, limit=8, rate=20.0), 0.2)
    assert a.rate == pytest.approx(10.0)
    b = ledger.report("b", report(waiting=10), 0.3)
    assert b.rate == pytest.approx(0.0)  # a's 20/s still reserved until a reports at 10
    ledger.report("a", report(in_flight=4, waiting=10, limit=4, rate=10.0), 0.4)
    b = ledger.report("b", report(waiting=10), 0.5)
    assert b.rate == pytest.approx(10.0)
    assert sum(m.reserved_rate for m in ledger.members.values()) <= 20.0 + 1e-9


async def test_gateways_following_one_ledger_never_exceed_the_limit_together(autojump_clock: trio.testing.MockClock) -> None:
    """Three members with bursts of calls, one lost part-way: the calls in flight of all
    together stay within the limit at every instant; each member within its grant; the lost
    member's share goes to the others."""
    total = 12
    ledger = QuotaLedger(total, stale_after=1.0)
    rng = random.Random(7)
    state = {"in_flight": 0, "peak": 0}
    over_share: list[str] = []
    grants: dict[str, list[QuotaGrant]] = {name: [] for name in "abc"}

    async def exchange(name: str, sent: QuotaReport) -> QuotaGrant:
        await trio.sleep(rng.uniform(0.001, 0.05))  # the report travels
        grant = ledger.report(name, sent, trio.current_time())
        await trio.sleep(rng.uniform(0.001, 0.05))  # and the grant back
        grants[name].append(grant)
        return grant

    async def call(name: str, limiter: AdaptiveLimiter) -> None:
        ticket = await limiter.acquire()
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        if limiter.in_flight > limiter.limit:  # admitted over the member's share
            over_share.append(name)
        try:
            await trio.sleep(rng.uniform(0.01, 0.4))
        finally:  # a lost member's calls end with it
            state["in_flight"] -= 1
            limiter.release(ticket, "ok")

    async def calls(name: str, limiter: AdaptiveLimiter) -> None:
        while True:
            await call(name, limiter)
            await trio.sleep(rng.uniform(0.0, 0.1))

    async def member(name: str, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        limiter = AdaptiveLimiter(0, adaptive=False, minimum=0, maximum=1000)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(follow_quota, limiter, partial(exchange, name), every=0.2))
                task_status.started(scope)
                for _ in range(10):  # 10 callers each: 30 want places, 12 there are
                    nursery.start_soon(calls, name, limiter)

    async with trio.open_nursery() as nursery:
        a = await nursery.start(member, "a")
        b = await nursery.start(member, "b")
        c = await nursery.start(member, "c")
        await trio.sleep(3.0)
        assert {name for name in ledger.members} == {"a", "b", "c"}
        c.cancel()  # its node is lost: it reports no more, its calls are gone
        await trio.sleep(3.0)
        assert set(ledger.members) == {"a", "b"}
        assert grants["a"][-1].limit + grants["b"][-1].limit == total  # c's share went to a and b
        a.cancel()
        b.cancel()
    assert state["peak"] == total  # the whole limit was used, never more
    assert over_share == []

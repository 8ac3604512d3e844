"""Learned pacing under the quota coordinator (the Ray node gateways): members' limiters learn
from their own 429s at once, the ``QuotaLedger`` learns the run's gap from their reports and
grants each member its part by demand. No Ray: the ledger is pure and the members are limiters
driven on trio's MockClock against the fake model's token-bucket ``Quota``."""

from __future__ import annotations

from functools import partial

import attrs
import pytest
import trio
import trio.testing

from dsh_orchestra.gateway import AdaptiveLimiter, GatewayOptions, QuotaGrant, QuotaLedger, QuotaReport, follow_quota
from dsh_orchestra.gateway._quota import apply_grant
from dsh_orchestra.gateway._limiter import PACE_BACKOFF, PACE_MAX, PACE_MIN, PACE_STEP
from dsh_orchestra.testing._fake_model import Quota

ATTEMPTS = GatewayOptions().max_attempts


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def member_limiter(*, learn: bool = True) -> AdaptiveLimiter:
    """A member's limiter as ``scale._gateways.serve_gateway`` makes it (``learn`` False: before learned pacing there)."""
    limiter = AdaptiveLimiter(0, adaptive=False, minimum=0, maximum=1_000_000)
    limiter.learn_pacing = learn
    return limiter


@attrs.define
class Run:
    calls: int = 0
    limited: int = 0  # 429s absorbed (retried)
    passed_back: int = 0  # calls whose 429 went to the runtime
    took: float = 0.0


async def quota_run(members: int, *, learn: bool, share: bool, rate: float = 20.0, clients: int = 64,
                    each: int = 4, latency: float = 0.01) -> tuple[Run, QuotaLedger]:
    """``members`` gateways following one ``QuotaLedger`` (reports every 0.2 s, 2 ms each way),
    ``clients`` callers spread over them, ``each`` calls each, all against one ``Quota(rate)``;
    each call retried as the gateway's ``_Call.run`` does (the hold and the release with the
    answer's retry-after, a stale answer spends no attempt, at most 2 x max_attempts tries).
    ``share`` False: the reports carry no retry-after (no run-wide gap)."""
    ledger, quota, run = QuotaLedger("auto"), Quota(rate), Run()

    async def exchange(name: str, report: QuotaReport) -> QuotaGrant:
        await trio.sleep(0.002)
        grant = ledger.report(name, report if share else attrs.evolve(report, limited_wait=None), trio.current_time())
        await trio.sleep(0.002)
        return grant

    async def call(limiter: AdaptiveLimiter) -> None:
        attempt = tries = 0
        while True:
            attempt += 1
            tries += 1
            ticket = await limiter.acquire(front=tries > 1)
            wait = quota.take()
            if wait == 0.0:
                await trio.sleep(latency)
                limiter.release(ticket, "ok")
                run.calls += 1
                return
            await trio.sleep(0.001)  # the answer travels back
            limiter.hold(wait)
            if tries >= 2 * ATTEMPTS or (attempt >= ATTEMPTS and ticket >= limiter.window):
                limiter.release(ticket, "limited", retry_after=wait)
                run.passed_back += 1
                return
            stale = ticket < limiter.window
            limiter.release(ticket, "limited", retry_after=wait)
            run.limited += 1
            attempt -= stale
            await trio.sleep(wait)

    async def client(limiter: AdaptiveLimiter) -> None:
        for _ in range(each):
            await call(limiter)

    begin = trio.current_time()
    async with trio.open_nursery() as nursery:
        limiters = [member_limiter(learn=learn) for _ in range(members)]
        for number, limiter in enumerate(limiters):
            await nursery.start(partial(follow_quota, limiter, partial(exchange, f"node-{number}")))
        async with trio.open_nursery() as callers:
            for number in range(clients):
                callers.start_soon(client, limiters[number % members])
        run.took = trio.current_time() - begin
        nursery.cancel_scope.cancel()
    return run, ledger


async def test_a_node_gateway_without_learned_pacing_herds(autojump_clock: trio.testing.MockClock) -> None:
    run, _ = await quota_run(1, learn=False, share=False)
    assert run.limited > 200  # ~one 429 per call or more: each hold's end lets a herd start


async def test_a_node_gateway_learns_pacing_under_the_coordinator(autojump_clock: trio.testing.MockClock) -> None:
    run, ledger = await quota_run(1, learn=True, share=True)
    assert run.passed_back == 0 and run.calls == 256
    assert run.limited <= 256 // 8
    assert run.took <= (256 - 20) / 20.0 * 1.2  # the quota is used
    assert ledger.gap is not None and ledger.gap >= 0.5 / 20.0  # the run's gap: about 1 / rate


@pytest.mark.parametrize("members", [2, 3])
async def test_members_share_the_run_gap_so_one_quota_is_not_overrun(autojump_clock: trio.testing.MockClock,
                                                                      members: int) -> None:
    """Several nodes on one provider quota: with the run's gap shared by demand, fewer 429s and
    no slower than each node pacing on its own answers alone (which also beats no pacing)."""
    alone, _ = await quota_run(members, learn=True, share=False)
    shared, ledger = await quota_run(members, learn=True, share=True)
    herd, _ = await quota_run(members, learn=False, share=False)
    assert shared.passed_back == 0 and shared.calls == 256
    assert shared.limited <= 256 // 8 and shared.limited < alone.limited < herd.limited
    assert shared.took <= min(alone.took, (256 - 20) / 20.0 * 1.1)
    assert ledger.gap is not None


def report(**fields: object) -> QuotaReport:
    return QuotaReport(**fields)  # type: ignore[arg-type]


def test_the_ledger_learns_the_runs_gap_as_one_gateway_would() -> None:
    ledger = QuotaLedger(8)
    assert ledger.report("a", report(waiting=4), 0.0).gap is None
    grant = ledger.report("a", report(in_flight=4, limited_window=0, limited_wait=0.05), 0.1)
    assert ledger.gap == 0.05 and ledger.window == 1 and ledger.total == 8  # fixed: the window moves, the limit not
    assert grant.gap == pytest.approx(0.05) and grant.window == 1  # alone: the whole gap
    ledger.report("a", report(in_flight=4, limited_window=0, limited_wait=0.01), 0.2)  # an earlier window: no growth
    assert ledger.gap == 0.05
    ledger.report("a", report(in_flight=4, limited_window=1, limited_wait=0.01), 0.3)  # opens window 2: once x1.25
    assert ledger.gap == pytest.approx(0.05 * PACE_BACKOFF) and ledger.window == 2
    ledger.report("a", report(in_flight=4, limited_window=1, limited_wait=0.2), 0.4)  # never below the answer's wait
    assert ledger.gap == 0.2
    ledger.report("a", report(in_flight=4, successes=10), 0.5)
    assert ledger.gap == pytest.approx(0.2 / (1 + PACE_STEP) ** 10)
    ledger.report("a", report(in_flight=4, limited_window=2, limited_wait=30.0), 0.6)  # a window's reset: capped
    assert ledger.gap == PACE_MAX
    ledger.report("a", report(limited_window=9, limited_wait=0.0005), 0.7)  # a member ahead: the ledger follows
    assert ledger.window == 10 and ledger.gap == PACE_MAX  # a wait below PACE_MIN teaches nothing
    ledger.report("a", report(successes=10**6), 0.8)  # (after a long silence: no overflow)
    assert ledger.gap is None and ledger.report("a", report(), 0.9).gap is None  # dropped below PACE_MIN


def test_each_member_gets_its_part_of_the_gap_by_demand() -> None:
    ledger = QuotaLedger("auto", start=16)
    ledger.report("idle", report(), 0.0)
    ledger.report("busy", report(waiting=30, limited_window=0, limited_wait=0.05), 0.0)
    assert ledger.total == 8  # AIMD as before: halved once for the window
    busy = ledger.report("busy", report(in_flight=4, waiting=26), 0.1)
    idle = ledger.report("idle", report(in_flight=0), 0.1)
    # an idle member slows nobody: the busy one has the run's whole pace; the idle one's own demand counts 1
    assert busy.gap == pytest.approx(0.05) and idle.gap == pytest.approx(0.05 * 31)
    woke = ledger.report("idle", report(in_flight=10, waiting=20), 0.2)
    busy = ledger.report("busy", report(in_flight=4, waiting=26), 0.3)
    assert woke.gap == busy.gap == pytest.approx(0.1)  # equal demand: each half the run's starts
    small = ledger.report("idle", report(in_flight=10), 0.4)
    assert 1 / small.gap + 1 / ledger.report("busy", report(in_flight=4, waiting=26), 0.5).gap == pytest.approx(1 / 0.05)


async def test_a_coordinated_limiter_opens_its_own_windows_without_halving(autojump_clock: trio.testing.MockClock) -> None:
    limiter = member_limiter()
    apply_grant(limiter, QuotaGrant(limit=4, rate=None, window=3))
    assert limiter.window == 3
    for ticket in (3, 3, 3):  # three calls of window 3 answered 429: one slow-down
        limiter.in_flight += 1
        limiter.release(ticket, "limited", retry_after=0.05)
    assert limiter.window == 4 and limiter.limit == 4 and limiter.limited_window == 3
    assert limiter.gap == 0.05 and limiter.limited_wait == 0.05
    apply_grant(limiter, QuotaGrant(limit=2, rate=None, window=3, gap=0.2))  # the coordinator had not heard yet
    assert limiter.window == 4 and limiter.limit == 2  # never back
    assert limiter.shared_gap == 0.2 and limiter.interval == 0.2
    apply_grant(limiter, QuotaGrant(limit=2, rate=10.0, window=5))
    assert limiter.window == 5 and limiter.shared_gap is None and limiter.interval == 0.1
    fixed = AdaptiveLimiter(4, adaptive=False)  # a local fixed limit: a retry-after only holds, as before
    fixed.in_flight += 1
    fixed.release(0, "limited", retry_after=0.05)
    assert fixed.window == 0 and fixed.gap is None
    with pytest.raises(ValueError, match="positive number of seconds"):
        limiter.set_shared_gap(0.0)


async def test_the_shared_gap_spaces_the_starts(autojump_clock: trio.testing.MockClock) -> None:
    limiter = member_limiter()
    apply_grant(limiter, QuotaGrant(limit=8, rate=None, window=0, gap=0.25))
    begin = trio.current_time()
    starts = []
    for _ in range(4):
        limiter.release(await limiter.acquire(), "ok")
        starts.append(trio.current_time() - begin)
    assert starts == pytest.approx([0.0, 0.25, 0.5, 0.75])
    assert limiter.gap is None  # nothing learned from successes alone


async def test_follow_quota_reports_the_longest_wait_once(autojump_clock: trio.testing.MockClock) -> None:
    limiter = member_limiter()
    sent: list[QuotaReport] = []
    answers = iter([QuotaGrant(limit=4, rate=None, window=0), None, QuotaGrant(limit=4, rate=None, window=1, gap=0.1),
                    *[QuotaGrant(limit=4, rate=None, window=1, gap=0.1)] * 10])

    async def exchange(sent_report: QuotaReport) -> QuotaGrant | None:
        sent.append(sent_report)
        return next(answers)

    async with trio.open_nursery() as nursery:
        await nursery.start(partial(follow_quota, limiter, exchange, every=1.0))
        for wait in (0.02, 0.08, 0.05):
            limiter.in_flight += 1
            limiter.release(0, "limited", retry_after=wait)
        await trio.sleep(3.5)  # reports at 1, 2, 3 s: the one at 1 s is not answered, its wait goes again at 2 s
        nursery.cancel_scope.cancel()
    assert [r.limited_wait for r in sent] == [None, 0.08, 0.08, None]
    assert limiter.shared_gap == 0.1 and limiter.gap is not None and limiter.gap >= PACE_MIN

"""Learned pacing (AdaptiveLimiter) against a token-bucket quota, on trio's MockClock: the end of a
``retry-after`` hold no longer releases a herd that spends every call's attempts."""

from __future__ import annotations

import json
import math
from functools import partial
from typing import Awaitable, Callable

import attrs
import httpx
import pytest
import trio
import trio.testing

from dsh_orchestra.gateway import AdaptiveLimiter, Gateway, GatewayOptions
from dsh_orchestra.gateway._http import Peer
from dsh_orchestra.gateway._limiter import PACE_BACKOFF, PACE_MAX, PACE_MIN, PACE_STEP, SERVED_SPAN
from dsh_orchestra.testing._fake_model import Quota

from gateway_support import body, running_gateway

ATTEMPTS = GatewayOptions().max_attempts


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


@attrs.define
class Run:
    calls: int = 0
    limited: int = 0  # 429s absorbed (retried)
    passed_back: int = 0  # calls that ran out of attempts: the runtime would see the 429
    most_tries: int = 0


async def quota_run(limiter: AdaptiveLimiter, *, clients: int = 64, each: int = 4, rate: float = 20.0,
                    latency: float = 0.01, whole_seconds: bool = False) -> Run:
    """``clients`` concurrent callers, ``each`` calls each, through ``limiter`` to the fake model's
    quota (answering 429 with the time to its next token as ``retry-after``), retried as the
    gateway's ``_Call.run`` does: the limited answer holds the limiter and is released with its
    ``retry-after``, the retry sleeps that long and goes to the head of the line.
    ``whole_seconds``: the provider rounds its wait up to whole seconds (``retry-after: 1``)."""
    quota, run = Quota(rate), Run()

    async def call() -> None:
        for attempt in range(1, ATTEMPTS + 1):
            ticket = await limiter.acquire(front=attempt > 1)
            wait = quota.take()
            if whole_seconds:
                wait = float(math.ceil(wait))
            if wait == 0.0:
                await trio.sleep(latency)
                limiter.release(ticket, "ok")
                run.calls += 1
                run.most_tries = max(run.most_tries, attempt)
                return
            if attempt == ATTEMPTS:  # the gateway gives up: the 429 goes to the runtime
                limiter.hold(wait)
                limiter.release(ticket, "limited", retry_after=wait)
                run.passed_back += 1
                return
            run.limited += 1
            limiter.hold(wait)
            limiter.release(ticket, "limited", retry_after=wait)
            await trio.sleep(wait)

    async def client() -> None:
        for _ in range(each):
            await call()

    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(client)
    return run


async def test_without_learned_pacing_the_herd_spends_the_attempts(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter()
    limiter.learn_pacing = False  # a retry-after only holds: the gateway before learned pacing
    run = await quota_run(limiter)
    # each hold's end lets up to `limit` calls start on a bucket with one token: 429s galore
    assert run.limited > 256 and run.passed_back > 0


async def test_learned_pacing_absorbs_a_quota_without_passing_429s_back(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter()
    begin = trio.current_time()
    run = await quota_run(limiter)
    assert run.passed_back == 0 and run.calls == 256
    assert run.limited <= 256 // 8  # (the herd: more 429s than calls)
    # the quota is used: the bucket's 20 at the start, then 20 a second
    assert trio.current_time() - begin <= (256 - 20) / 20.0 * 1.2
    assert limiter.gap is not None and limiter.gap >= 0.8 / 20.0


async def test_the_gap_follows_the_answers(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(4)
    assert limiter.gap is None and limiter.interval == 0.0
    limiter.release(await limiter.acquire(), "limited", retry_after=0.05)
    assert limiter.gap == 0.05  # the provider's time to its next free request
    ticket = await limiter.acquire()  # started in the new window
    limiter.release(ticket, "limited", retry_after=0.01)
    assert limiter.gap == pytest.approx(0.05 * PACE_BACKOFF)  # once per window, never below the answer's wait
    stale = limiter.window - 1
    limiter.in_flight += 1
    limiter.release(stale, "limited", retry_after=0.01)  # a call of an earlier window: no further growth
    assert limiter.gap == pytest.approx(0.05 * PACE_BACKOFF)
    limiter.release(await limiter.acquire(), "ok")
    assert limiter.gap == pytest.approx(0.05 * PACE_BACKOFF / (1 + PACE_STEP))
    limiter.release(await limiter.acquire(), "limited")  # no retry-after: AIMD only, the gap stays
    assert limiter.gap == pytest.approx(0.05 * PACE_BACKOFF / (1 + PACE_STEP))
    limiter.release(await limiter.acquire(), "limited", retry_after=30.0)  # a window's reset: a hold, the gap 1 s
    assert limiter.gap == PACE_MAX
    while limiter.gap is not None:  # successes speed the starts up until the pacing is dropped
        assert limiter.gap >= PACE_MIN
        limiter.release(await limiter.acquire(), "ok")
    assert limiter.interval == 0.0


async def test_paced_starts_keep_their_order_and_spacing(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(8)
    limiter.release(await limiter.acquire(), "limited", retry_after=0.1)
    limiter.hold(0.1)
    begin = trio.current_time()
    starts: list[tuple[int, float]] = []

    async def call(number: int) -> None:
        ticket = await limiter.acquire()
        starts.append((number, round(trio.current_time() - begin, 6)))
        await trio.sleep(0.001)
        limiter.release(ticket, "ok")

    async with trio.open_nursery() as nursery:
        for number in range(4):
            nursery.start_soon(call, number)
            await trio.testing.wait_all_tasks_blocked()
    assert [n for n, _ in starts] == [0, 1, 2, 3]  # arrival order
    assert [t for _, t in starts][0] == 0.1  # the hold's end, then one gap apart (shrinking at each success)
    gaps = [round(b - a, 6) for (_, a), (_, b) in zip(starts, starts[1:], strict=False)]
    assert gaps[0] == 0.1 and gaps[1] == pytest.approx(0.1 / (1 + PACE_STEP), abs=1e-6)  # a slot is set as the call before starts
    assert all(0.09 < gap <= 0.1 for gap in gaps)


async def test_a_fixed_limiter_does_not_learn() -> None:
    assert AdaptiveLimiter(4, adaptive=False).learn_pacing is False
    assert AdaptiveLimiter(4).learn_pacing is True


LIMITED = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'


async def calls_through(answer: Callable[[Peer], Awaitable[None]], options: GatewayOptions, count: int, *,
                        stream: bool = True, prepare: Callable[[Gateway], None] | None = None) -> tuple[list[int], Gateway]:
    """``count`` calls at once through a gateway (``options``; ``prepare`` sees it first) in front
    of an upstream that answers each request with ``answer(peer)``: the statuses the callers got,
    and the gateway."""

    async def upstream(connection: trio.SocketStream) -> None:
        peer = Peer(connection)
        try:
            while await peer.receive() is not None:
                await answer(peer)
                if not peer.reusable():
                    break
        except trio.BrokenResourceError:
            pass
        finally:
            await connection.aclose()

    statuses: list[int] = []
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            [listener] = await nursery.start(partial(trio.serve_tcp, upstream, 0, host="127.0.0.1"))
            url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
            async with running_gateway(url, options) as gateway:
                if prepare is not None:
                    prepare(gateway)

                async def call(index: int) -> None:
                    async with httpx.AsyncClient(trust_env=False, timeout=None) as client:
                        response = await client.post(gateway.base_url + "/v1/messages",
                                                     content=json.dumps(body(f"q{index}", stream=stream)),
                                                     headers={"x-api-key": gateway.token})
                        statuses.append(response.status_code)

                async with trio.open_nursery() as calls:
                    for index in range(count):
                        calls.start_soon(call, index)
            nursery.cancel_scope.cancel()
    return statuses, gateway


async def test_a_429_to_a_call_sent_before_the_slow_down_spends_no_attempt() -> None:
    """8 calls in flight at once are all answered 429 (a burst the gateway sent before it knew
    of the limit). With ``max_attempts=1`` the first limited answer is passed back (it opened a new
    window); the 7 others were sent in the window before, so they are retried, and succeed."""
    arrived: list[Peer] = []
    all_in, bumped = trio.Event(), trio.Event()

    async def answer(peer: Peer) -> None:
        arrived.append(peer)
        index = len(arrived)
        if index > 8:
            await peer.whole(200, json.dumps(message()).encode(), [(b"content-type", b"application/json")])
            return
        if index == 8:
            all_in.set()
        await all_in.wait()
        if index > 1:  # the others once the first answer was counted
            await bumped.wait()
        await peer.whole(429, LIMITED, [(b"content-type", b"application/json"), (b"retry-after-ms", b"10")])

    def count_windows(gateway: Gateway) -> None:
        release = gateway.limiter.release

        def counted(ticket: int, outcome: str, *, retry_after: float | None = None) -> None:
            release(ticket, outcome, retry_after=retry_after)
            if gateway.limiter.window >= 1:
                bumped.set()

        gateway.limiter.release = counted  # type: ignore[method-assign]

    statuses, gateway = await calls_through(answer, GatewayOptions(max_attempts=1), 8, stream=False, prepare=count_windows)
    assert sorted(statuses) == [200] * 7 + [429]
    assert len(arrived) == 15 and gateway.totals.retries == 7


def message() -> dict[str, object]:
    return {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}


async def test_every_call_still_ends_after_at_most_twice_max_attempts_tries() -> None:
    """An upstream that answers every request 429: 6 calls at once each give up (the 429 passed
    on) after max_attempts counted tries, stale ones included at most 2 x max_attempts."""
    seen: list[int] = []

    async def answer(peer: Peer) -> None:
        seen.append(1)
        await peer.whole(429, LIMITED, [(b"content-type", b"application/json"), (b"retry-after-ms", b"5")])

    statuses, gateway = await calls_through(answer, GatewayOptions(max_attempts=3), 6)
    assert statuses == [429] * 6
    assert 6 * 3 <= len(seen) <= 6 * 6 and gateway.totals.retries == len(seen) - 6


async def test_a_whole_second_retry_after_paces_at_the_rate_the_provider_served(
        autojump_clock: trio.testing.MockClock) -> None:
    """``retry-after: 1`` is a wait rounded up: the gap is at most the interval of the latest
    successes (a gap of 1 s would start one call a second against a 20/s quota)."""
    limiter = AdaptiveLimiter(4)
    limiter.release(await limiter.acquire(), "limited", retry_after=1.0)
    assert limiter.gap == 1.0  # nothing served yet: the answer's wait
    limiter = AdaptiveLimiter(4)
    for _ in range(SERVED_SPAN):
        limiter.release(await limiter.acquire(), "ok")
        await trio.sleep(0.05)
    assert limiter.served_interval == pytest.approx(0.05)
    limiter.release(await limiter.acquire(), "limited", retry_after=1.0)
    assert limiter.gap == pytest.approx(0.05) and limiter.limited_wait == pytest.approx(0.05)
    limiter.release(await limiter.acquire(), "limited", retry_after=0.3)  # a precise wait is taken as it is
    assert limiter.gap == pytest.approx(0.3)
    assert limiter.pacing_wait(2.5) == 2.5 and limiter.pacing_wait(None) is None


async def test_a_quota_that_answers_in_whole_seconds_is_still_used(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter()
    begin = trio.current_time()
    run = await quota_run(limiter, whole_seconds=True)
    assert run.passed_back == 0 and run.calls == 256
    # the holds are the provider's whole seconds; between them the starts go at its rate, not one a second
    assert trio.current_time() - begin <= (256 - 20) / 20.0 * 2

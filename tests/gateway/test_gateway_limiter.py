"""AdaptiveLimiter (AIMD, holds, FIFO) on trio's MockClock; the gateway absorbing 429s."""

from __future__ import annotations

import json
from functools import partial

import httpx
import pytest
import trio
import trio.testing

from dsh_orchestra.gateway import AdaptiveLimiter, GatewayOptions
from dsh_orchestra.gateway._http import Peer
from dsh_orchestra.testing._fake_model import open_fake_model, parse_rate

from gateway_support import body, running_gateway


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_one_more_place_per_window_of_successes(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(4)
    for _ in range(3):
        limiter.release(await limiter.acquire(), "ok")
    assert limiter.limit == 4
    limiter.release(await limiter.acquire(), "ok")  # the 4th success in a row: a window
    assert limiter.limit == 5
    for _ in range(5):
        limiter.release(await limiter.acquire(), "ok")
    assert limiter.limit == 6 and [limit for _, limit in limiter.history] == [4, 5, 6]


async def test_limited_answers_halve_once_per_window(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(8)
    tickets = [await limiter.acquire() for _ in range(6)]
    limiter.release(tickets[0], "limited")
    assert limiter.limit == 4
    limiter.release(tickets[1], "limited")  # started before the decrease: no second halving
    assert limiter.limit == 4
    for ticket in tickets[2:]:
        limiter.release(ticket, "other")
    fresh = await limiter.acquire()
    limiter.release(fresh, "limited")  # started after it: halves again
    assert limiter.limit == 2
    for _ in range(4):
        limiter.release(await limiter.acquire(), "limited")
    assert limiter.limit == 1  # never below the minimum


def test_fixed_limits_do_not_adapt() -> None:
    async def main() -> None:
        limiter = AdaptiveLimiter(3, adaptive=False)
        for outcome in ("ok", "ok", "ok", "ok", "limited"):
            limiter.release(await limiter.acquire(), outcome)
        assert limiter.limit == 3

    trio.run(main)


async def test_the_limit_bounds_calls_in_flight_and_waiters_go_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = AdaptiveLimiter(2, adaptive=False)
    order: list[int] = []
    peak = 0

    async def call(index: int) -> None:
        nonlocal peak
        ticket = await limiter.acquire()
        order.append(index)
        peak = max(peak, limiter.in_flight)
        await trio.sleep(1.0)
        limiter.release(ticket, "ok")

    async with trio.open_nursery() as nursery:
        for index in range(10):
            nursery.start_soon(call, index)
            await trio.sleep(0.01)  # arrival order 0, 1, 2, ...
    assert order == list(range(10)) and peak == 2
    assert trio.current_time() == pytest.approx(5.01)  # 5 rounds of 2 (the last call began at 4.01)


async def test_a_hold_stops_every_new_call_until_it_passes(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(8)
    start = trio.current_time()
    limiter.hold(2.5)
    limiter.hold(1.0)  # a shorter hold does not shorten it
    times: list[float] = []

    async def call() -> None:
        ticket = await limiter.acquire()
        times.append(trio.current_time() - start)
        limiter.release(ticket, "ok")

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(call)
    assert times == [pytest.approx(2.5)] * 3


async def test_a_cancelled_waiter_leaves_the_queue(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(1, adaptive=False)
    held = await limiter.acquire()
    got: list[str] = []

    async def call(name: str) -> None:
        limiter.release(await limiter.acquire(), "ok")
        got.append(name)

    async with trio.open_nursery() as nursery:
        async with trio.open_nursery() as first:
            first.start_soon(call, "first")
            await trio.sleep(0.1)
            assert limiter.waiting == 1
            first.cancel_scope.cancel()
        assert limiter.waiting == 0 and got == []
        async with trio.open_nursery() as inner:
            inner.start_soon(call, "second")
            await trio.sleep(0.1)
            assert limiter.waiting == 1
            limiter.release(held, "ok")
        nursery.cancel_scope.cancel()
    assert got == ["second"] and limiter.in_flight == 0 and limiter.waiting == 0


@pytest.mark.parametrize(("text", "rate"), [("20/s", 20.0), ("600/min", 10.0), ("5", 5.0)])
def test_rates(text: str, rate: float) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["0/s", "fast", "10/h", "-1"])
def test_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="rate-limit"):
        parse_rate(text)


async def test_the_gateway_absorbs_429s_from_a_quota() -> None:
    """20 calls at once against a 5/s quota (bursts of 5): all succeed, the 429s are retried
    inside the gateway after retry-after."""
    async with open_fake_model(rate_limit=5.0) as model:
        with trio.fail_after(60):
            # auto: AIMD from 8. Tries enough that no call runs out under a loaded CI machine
            # (the default bound, MAX_ATTEMPTS, is tested against an always-429 upstream below)
            async with running_gateway(model.base_url, GatewayOptions(max_attempts=50)) as gateway:
                statuses: list[int] = []

                async def call(index: int) -> None:
                    async with httpx.AsyncClient(trust_env=False, timeout=None) as client:
                        response = await client.post(gateway.base_url + "/v1/messages", content=json.dumps(body(f"q{index}")),
                                                     headers={"x-api-key": gateway.token})
                        statuses.append(response.status_code)

                async with trio.open_nursery() as nursery:
                    for index in range(20):
                        nursery.start_soon(call, index)
    assert statuses == [200] * 20
    assert model.rate_limited > 0 and len(model.requests) == 20
    assert gateway.totals.retries == model.rate_limited and gateway.totals.calls == 20
    assert min(limit for _, limit in gateway.limiter.history) < 8  # halved on the 429s


async def always_limited(stream: trio.SocketStream) -> None:
    """An upstream that answers every request 429 with a 10 ms retry-after-ms."""
    peer = Peer(stream)
    try:
        while await peer.receive() is not None:
            await peer.whole(429, b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}',
                             [(b"content-type", b"application/json"), (b"retry-after-ms", b"10")])
            if not peer.reusable():
                break
    except trio.BrokenResourceError:
        pass  # the gateway closed its pooled connection
    finally:
        await stream.aclose()


async def test_the_runtime_sees_the_429_once_the_gateway_gives_up() -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            [listener] = await nursery.start(partial(trio.serve_tcp, always_limited, 0, host="127.0.0.1"))
            upstream = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
            async with running_gateway(upstream, GatewayOptions(max_attempts=3)) as gateway:
                gateway.backoff = lambda attempt: 0.0  # type: ignore[method-assign]
                async with httpx.AsyncClient(trust_env=False) as client:
                    answer = await client.post(gateway.base_url + "/v1/messages", content=json.dumps(body()),
                                               headers={"x-api-key": gateway.token})
            nursery.cancel_scope.cancel()
    assert answer.status_code == 429 and answer.json()["error"]["message"] == "slow down"
    assert answer.headers["retry-after-ms"] == "10"
    assert (gateway.totals.retries, gateway.totals.errors) == (2, 1)


async def test_an_in_band_overloaded_error_is_retried_before_anything_is_sent() -> None:
    from dsh_orchestra.testing._script import parse_script

    script = parse_script({"rules": [{"name": "over", "match": "OVER", "fail": "overloaded"}]})
    async with open_fake_model(script) as model:
        with trio.fail_after(60):
            async with running_gateway(model.base_url, GatewayOptions(max_attempts=3)) as gateway:
                gateway.backoff = lambda attempt: 0.0  # type: ignore[method-assign]
                async with httpx.AsyncClient(trust_env=False) as client:
                    answer = await client.post(gateway.base_url + "/v1/messages", content=json.dumps(body("OVER")),
                                               headers={"x-api-key": gateway.token})
    assert len(model.requests) == 3 and gateway.totals.retries == 2
    assert answer.status_code == 200 and answer.text.count("event: message_start") == 1
    assert "overloaded_error" in answer.text  # the last attempt's stream, passed on


async def test_set_limit_is_the_public_way_to_change_a_running_limit(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(2, adaptive=False)
    held = [await limiter.acquire() for _ in range(2)]
    limiter.set_limit(1)  # lower: the two in flight finish, no new call until below 1
    got: list[int] = []

    async def one() -> None:
        got.append(await limiter.acquire())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        await trio.sleep(1)
        limiter.release(held[0], "ok")
        await trio.sleep(1)
        assert got == []  # still one in flight: at the limit
        limiter.release(held[1], "ok")
    assert len(got) == 1
    limiter.set_limit(200)  # above the maximum: the maximum follows
    assert limiter.limit == limiter.maximum == 200 and limiter.history[-1][1] == 200
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="integer >= 1"):
            limiter.set_limit(bad)  # type: ignore[arg-type]


async def test_a_rate_spaces_the_starts_evenly(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(64, adaptive=False, rate=4.0)
    starts: list[float] = []

    async def call() -> None:
        ticket = await limiter.acquire()
        starts.append(trio.current_time())
        await trio.sleep(0.01)
        limiter.release(ticket, "ok")

    begin = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(9):
            nursery.start_soon(call)
    assert [round(t - begin, 6) for t in starts] == [0.25 * i for i in range(9)]
    limiter.set_rate(None)
    with pytest.raises(ValueError, match="positive"):
        limiter.set_rate(0)


async def test_a_retry_goes_to_the_head_of_the_line(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(1, adaptive=False)
    first = await limiter.acquire()
    order: list[str] = []

    async def call(name: str, front: bool) -> None:
        limiter.release(await limiter.acquire(front=front), "ok")
        order.append(name)

    async with trio.open_nursery() as nursery:
        for name in ("new-1", "new-2"):
            nursery.start_soon(call, name, False)
            await trio.sleep(0.1)
        for name in ("retry-1", "retry-2"):
            nursery.start_soon(call, name, True)
            await trio.sleep(0.1)
        limiter.release(first, "ok")
    assert order == ["retry-1", "retry-2", "new-1", "new-2"]  # retries first, in their own order


async def test_the_gateway_waits_what_retry_after_says_not_the_backoff() -> None:
    from dsh_orchestra.gateway import Gateway

    gateway = Gateway(upstream="http://127.0.0.1:9", api_key=None)
    assert gateway.pause(5, 0.25) == 0.25  # the 5th retry's backoff would be 8-16 s
    assert 8.0 <= gateway.pause(5, None) <= 16.0


async def test_a_late_start_does_not_push_the_pacing_back(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(64, adaptive=False, rate=10.0)
    begin = trio.current_time()
    limiter.release(await limiter.acquire(), "ok")  # t=0; the next slot at 0.1
    await trio.sleep(0.13)  # as if woken 30 ms late
    limiter.release(await limiter.acquire(), "ok")  # t=0.13: the next slot stays at 0.2, not 0.23
    starts = []
    for _ in range(2):
        limiter.release(await limiter.acquire(), "ok")
        starts.append(round(trio.current_time() - begin, 6))
    assert starts == [0.2, 0.3]
    await trio.sleep(5)  # idle: no burst saved up
    t0 = trio.current_time()
    for _ in range(3):
        limiter.release(await limiter.acquire(), "ok")
    assert round(trio.current_time() - t0, 6) == 0.2

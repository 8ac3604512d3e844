"""``AdaptiveLimiter.set_limit``: the limit changed live (``ctl concurrency``) lets waiting
calls through or holds new ones; ``adaptive=False`` fixes it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dsh_orchestra.gateway import AdaptiveLimiter


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_set_limit_live(autojump_clock: trio.testing.MockClock) -> None:
    limiter = AdaptiveLimiter(2)
    tickets = [await limiter.acquire() for _ in range(2)]
    got: list[int] = []

    async def third() -> None:
        got.append(await limiter.acquire())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(third)
        await trio.sleep(1)
        assert not got and limiter.waiting == 1
        limiter.set_limit(3)  # a place opens: the waiting call goes
        await trio.sleep(1)
        assert len(got) == 1 and limiter.in_flight == 3
    limiter.set_limit(1, adaptive=False)
    assert limiter.limit == 1 and not limiter.adaptive and [limit for _, limit in limiter.history] == [2, 3, 1]
    for ticket in [*tickets, *got][:2]:
        limiter.release(ticket, "ok")  # the calls above the lowered limit finish
    with trio.move_on_after(5) as waited:
        await limiter.acquire()
    assert waited.cancelled_caught  # one still in flight: a fourth waits
    limiter.release(got[0], "ok")
    for _ in range(5):
        limiter.release(await limiter.acquire(), "ok")
    assert limiter.limit == 1  # fixed: no AIMD increase
    limiter.set_limit(200)  # above the maximum: the maximum follows
    assert limiter.limit == limiter.maximum == 200
    with pytest.raises(ValueError, match="integer >= 1"):
        limiter.set_limit(0)

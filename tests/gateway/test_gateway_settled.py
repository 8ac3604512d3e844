"""A session's counts are taken only once its calls were counted: a runtime may end its turn
as soon as the last byte of an answer reached it, a moment before the gateway's task counted
that call (then an item's ``model.calls`` was 0 now and then). ``Gateway.settled`` waits for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from dsh_orchestra.gateway import Gateway, GatewayOptions, ResponseCache
from dsh_orchestra.testing._fake_model import FakeModelServer

from gateway_support import body, running_gateway


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_each_call_is_counted_once_its_answer_was_read(fake_model: FakeModelServer, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway stores each answer in the cache after the runtime has it all, and counts the
    call after that: a slow store (0.3 s here) leaves the count behind the answer, which
    ``settled`` waits for (without it ``calls`` was 0 for each item)."""
    cache = ResponseCache(tmp_path / "cache")
    store = cache.aput

    async def slow_store(*args: Any, **kwargs: Any) -> None:
        await trio.sleep(0.3)
        await store(*args, **kwargs)

    monkeypatch.setattr(cache, "aput", slow_store)
    options = GatewayOptions(cache=str(tmp_path / "cache"))
    with trio.fail_after(120):
        async with running_gateway(fake_model.base_url, options, cache=cache) as gw, \
                httpx.AsyncClient(trust_env=False) as client:
            for i in range(5):
                session = f"item-{i}"
                headers = {"x-api-key": gw.token, "x-deepseek-harness-session-id": session}
                response = await client.post(gw.base_url + "/v1/messages", content=json.dumps(body(f"hello {i}")),
                                             headers=headers)
                assert response.status_code == 200 and "message_stop" in response.text
                await gw.settled(session)  # what the batch does before it takes an item's counts
                stats = gw.take(session)
                assert (stats.calls, stats.upstream) == (1, 1), (i, stats)
                assert session not in gw.open
    cache.close()
    assert len(fake_model.requests) == 5


async def test_settled_waits_for_the_open_calls_and_at_most_its_wait(autojump_clock: trio.testing.MockClock) -> None:
    gw = Gateway(GatewayOptions(), upstream="http://127.0.0.1:9", api_key=None)
    await gw.settled("nobody")  # no call open: at once
    gw.open["item"] = 1
    returned: list[float] = []

    async def take() -> None:
        await gw.settled("item")
        returned.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take)
        await trio.sleep(0.5)
        assert not returned
        del gw.open["item"]  # what the end of the call does
        gw._ended.set()
        gw._ended = trio.Event()
    assert returned == [0.5]
    gw.open["stuck"] = 1
    start = trio.current_time()
    await gw.settled("stuck", wait=2.0)
    assert trio.current_time() - start == 2.0

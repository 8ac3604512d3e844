"""The response cache: the store (torn/damaged entries, processes), keys, record and replay."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import pytest
import trio

from dsh_orchestra.gateway import CacheError, GatewayOptions, ResponseCache, cache_key
from dsh_orchestra.gateway._cache import Entry
from dsh_orchestra.testing._fake_model import FakeModelServer, open_fake_model

from gateway_support import body, running_gateway


def test_the_key_leaves_out_volatile_fields_and_run_ids_but_keeps_the_epoch() -> None:
    one = body("hi", dsh_session_log={"session": {"id": "a", "createdAt": 1}}, metadata={"user_id": "u1"})
    two = body("hi", dsh_session_log={"session": {"id": "b", "createdAt": 2}}, metadata={"user_id": "u2"})
    assert cache_key(one, epoch=1) == cache_key(two, epoch=1)
    assert cache_key(one, epoch=1) != cache_key(one, epoch=2) != cache_key(one, epoch=None)
    assert cache_key(body("hi"), epoch=1) != cache_key(body("ho"), epoch=1)
    uuid1, uuid2 = "7f74380b-acd2-4262-98f9-5abdf0558c0b", "d25ec4f1-c41c-46a1-9122-05b52181c96b"
    child1 = body(f'started subagent {uuid1}; Your parent agent id is "item-{"a" * 24}"')
    child2 = body(f'started subagent {uuid2}; Your parent agent id is "item-{"b" * 24}"')
    assert cache_key(child1, epoch=1) == cache_key(child2, epoch=1)
    same_twice = body(f"{uuid1} {uuid1}")
    assert cache_key(same_twice, epoch=1) != cache_key(body(f"{uuid1} {uuid2}"), epoch=1)  # which id is which counts


def test_a_damaged_entry_is_a_miss_and_stats_count(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c")
    cache.put("k", Entry(body=b"event: message_stop\ndata: {}\n\n", headers=[("content-type", "text/event-stream")],
                         input_tokens=3, output_tokens=4))
    assert cache.get("k") is not None and cache.get("nothing") is None
    with sqlite3.connect(tmp_path / "c" / "responses.sqlite3") as db:  # another process writes half an answer
        db.execute("UPDATE entries SET body = ? WHERE key = 'k'", (b"event: mess",))
    assert cache.get("k") is None
    stats = cache.stats()
    assert (stats["entries"], stats["hits"], stats["misses"], stats["stored_tokens"]) == (1, 1, 2, 7)
    assert stats["hit_rate"] == pytest.approx(1 / 3)
    assert cache.prune() == 1 and cache.stats()["entries"] == 0
    cache.close()


def test_an_unusable_cache_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(CacheError, match="cannot be used"):
        ResponseCache(tmp_path / "file")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "responses.sqlite3").write_bytes(b"not a database" * 100)
    with pytest.raises(CacheError, match="not a database"):
        ResponseCache(tmp_path / "bad")


async def post(url: str, token: str, payload: object) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.post(url + "/v1/messages", content=json.dumps(payload), headers={"x-api-key": token})


async def test_use_record_and_replay_modes(tmp_path: Path, fake_model: FakeModelServer) -> None:
    directory = tmp_path / "cache"
    with trio.fail_after(60):
        cache = ResponseCache(directory)
        async with running_gateway(fake_model.base_url, GatewayOptions(cache=str(directory), cache_mode="record"), cache=cache) as gw:
            first = await post(gw.base_url, gw.token, body("ECHO one"))
            again = await post(gw.base_url, gw.token, body("ECHO one"))  # record: never read
        assert len(fake_model.requests) == 2 and first.status_code == 200
        async with running_gateway(fake_model.base_url, GatewayOptions(cache=str(directory), cache_mode="use"), cache=cache) as gw:
            hit = await post(gw.base_url, gw.token, body("ECHO one"))
            miss = await post(gw.base_url, gw.token, body("ECHO two"))
        assert len(fake_model.requests) == 3
        assert hit.text == again.text and hit.headers["content-type"] == "text/event-stream"
        assert (gw.totals.cache_hits, gw.totals.saved_tokens, gw.totals.upstream) == (1, 15, 1)
        async with running_gateway("http://127.0.0.1:9", GatewayOptions(cache=str(directory), cache_mode="replay"), cache=cache) as gw:
            replayed = await post(gw.base_url, gw.token, body("ECHO two"))
            absent = await post(gw.base_url, gw.token, body("ECHO three"))
        cache.close()
    assert replayed.text == miss.text
    key = cache_key(body("ECHO three"), epoch=0)
    assert absent.status_code == 400 and f"cache miss: request {key}" in absent.json()["error"]["message"]
    assert len(fake_model.requests) == 3  # nothing more went upstream


async def test_an_answer_ended_as_the_gateway_closes_is_still_stored(tmp_path: Path, fake_model: FakeModelServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The last call of a run: the runtime has the whole answer and the run closes the gateway
    at once. The store after the end must not be cancelled, or a replay of that item misses."""
    from dsh_orchestra.gateway import Gateway
    from dsh_orchestra.gateway._http import Peer

    cache = ResponseCache(tmp_path / "cache")
    gateway = Gateway(GatewayOptions(cache=str(tmp_path / "cache"), cache_mode="record"), upstream=fake_model.base_url,
                      api_key="sk-real", cache=cache)
    end = Peer.end

    async def end_then_close(peer: Peer) -> None:
        await end(peer)
        closing.cancel()  # the run closes its gateway as the answer's end is written

    monkeypatch.setattr(Peer, "end", end_then_close)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            closing = nursery.cancel_scope
            await nursery.start(gateway.run)
            nursery.start_soon(post, gateway.base_url, gateway.token, body("ECHO last"))
    assert cache.get(cache_key(body("ECHO last"), epoch=0)) is not None
    cache.close()


async def test_a_malformed_stream_is_passed_on_but_not_stored(tmp_path: Path) -> None:
    from dsh_orchestra.testing._script import parse_script

    script = parse_script({"rules": [{"name": "bad", "match": "BAD", "fail": "malformed"},
                                     {"name": "cut", "match": "CUT", "fail": "stream-cut"}]})
    cache = ResponseCache(tmp_path / "cache")
    async with open_fake_model(script) as model:
        with trio.fail_after(60):
            async with running_gateway(model.base_url, GatewayOptions(cache=str(tmp_path / "cache")), cache=cache) as gw:
                bad = await post(gw.base_url, gw.token, body("BAD"))
                cut = await post(gw.base_url, gw.token, body("CUT"))
    assert "{this is not json" in bad.text and "message_stop" not in cut.text
    assert cache.stats()["entries"] == 0
    cache.close()

"""The gateway's per-call path without a cache or a budget: bytes passed on unchanged, usage
still counted, no request hashing, one upstream client per runtime connection."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from dsh_orchestra.gateway import Gateway
from dsh_orchestra.gateway import _server
from dsh_orchestra.gateway._sse import SseReader, Usage
from dsh_orchestra.gateway._upstream import UpstreamClient
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import parse_script

from gateway_support import body, running_gateway


def headers(key: str, session: str) -> dict[str, str]:
    return {"x-api-key": key, "x-deepseek-harness-session-id": session, "anthropic-version": "2023-06-01"}


async def raw_answer(client: httpx.AsyncClient, url: str, key: str, prompt: str, session: str) -> bytes:
    async with client.stream("POST", url + "/v1/messages", headers=headers(key, session),
                             content=json.dumps(body(prompt))) as response:
        assert response.status_code == 200
        return b"".join([chunk async for chunk in response.aiter_raw()])


async def test_without_a_cache_the_stream_passes_byte_for_byte_and_usage_is_counted(
        fake_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_hashing(*args: object, **kwargs: object) -> str:
        raise AssertionError("the request was hashed without a cache")

    monkeypatch.setattr(_server, "cache_key", no_hashing)
    fake_model.script = parse_script({"rules": [{"name": "long", "match": "LONG", "reply": "y" * 64 * 300}]})
    with trio.fail_after(30):
        async with httpx.AsyncClient(trust_env=False) as client:
            direct = await raw_answer(client, fake_model.base_url, "k", "LONG", "d")
            async with running_gateway(fake_model.base_url) as gateway:
                through = await raw_answer(client, gateway.base_url, gateway.token, "LONG", "g")
    # the same bytes but for the message id the fake numbers per request
    assert through.replace(b"req_fake_000002", b"X") == direct.replace(b"req_fake_000001", b"X")
    usage = Usage()
    for event in SseReader().feed(direct):
        usage.update(event)
    stats = gateway.stats_of("g")
    assert usage.output_tokens > 0
    assert (stats.calls, stats.upstream, stats.errors) == (1, 1, 0)
    assert (stats.input_tokens, stats.output_tokens) == (usage.input_tokens, usage.output_tokens)
    assert stats.first_token_s > 0 and stats.duration_s >= stats.first_token_s
    assert gateway.limiter.successes == 1  # a clean stream: an "ok" outcome


async def test_each_runtime_connection_has_one_upstream_client_closed_with_it(
        fake_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[UpstreamClient] = []
    closed: list[trio.Event] = []  # set as each runtime connection's upstream side is closed
    original, original_close = Gateway.upstream_client, _server._Upstream.aclose

    def counted(self: Gateway) -> UpstreamClient:
        client = original(self)
        made.append(client)
        return client

    async def noted(self: _server._Upstream) -> None:
        await original_close(self)
        closed[-1].set()

    monkeypatch.setattr(Gateway, "upstream_client", counted)
    monkeypatch.setattr(_server._Upstream, "aclose", noted)
    with trio.fail_after(30):
        async with running_gateway(fake_model.base_url) as gateway:
            for connection in range(2):
                closed.append(trio.Event())
                async with httpx.AsyncClient(trust_env=False) as client:
                    for call in range(3):
                        await raw_answer(client, gateway.base_url, gateway.token, "hello", f"s{connection}-{call}")
                    # the first made and closed at the start (the TLS context, the pool's imports),
                    # before any connection is served; then one for this connection's three calls
                    assert made[0].closed and len(made) == 2 + connection
                    assert not made[-1].closed
                await closed[-1].wait()  # the runtime hung up: its upstream client is closed
                assert made[-1].closed
            # a connection that only ever got refused made no upstream client
            closed.append(trio.Event())
            async with httpx.AsyncClient(trust_env=False) as client:
                refused = await client.post(gateway.base_url + "/v1/messages", headers=headers("wrong", "x"),
                                            content=json.dumps(body()))
            assert refused.status_code == 401 and len(made) == 3
    assert len(fake_model.requests) == 6


def test_event_lines_are_split_at_line_ends_only() -> None:
    """A raw U+2028 inside the JSON of a usage event (str.splitlines would cut the line there)."""
    data = '{"usage":{"output_tokens":7},"note":"a\u2028b"}'.encode()
    events = SseReader().feed(b"event: message_delta\r\ndata: " + data + b"\r\n\r\n")
    usage = Usage()
    usage.update(events[0])
    assert events[0].data["note"] == "a\u2028b" and usage.output_tokens == 7

"""The gateway's HTTP service against the fake model: tokens, pass-through of the SSE stream."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from dsh_orchestra.gateway import GatewayOptions
from dsh_orchestra.testing._fake_model import FakeModelServer

from gateway_support import REAL_KEY, body, running_gateway


def headers(key: str, session: str = "s1") -> dict[str, str]:
    return {"x-api-key": key, "x-deepseek-harness-session-id": session, "anthropic-version": "2023-06-01"}


async def post(url: str, key: str, payload: object, session: str = "s1") -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.post(url + "/v1/messages", headers=headers(key, session), content=json.dumps(payload))


async def test_requests_without_the_token_are_refused_with_401(fake_model: FakeModelServer) -> None:
    with trio.fail_after(30):
        async with running_gateway(fake_model.base_url) as gateway:
            assert gateway.base_url.startswith("http://127.0.0.1:")
            for key in ("", "wrong", REAL_KEY, gateway.token + "x"):
                response = await post(gateway.base_url, key, body())
                assert response.status_code == 401
                assert response.json()["error"]["type"] == "authentication_error"
                assert gateway.token not in response.text
    assert fake_model.requests == []  # nothing reached the model


async def test_the_stream_passes_through_unchanged_with_the_real_key_upstream(fake_model: FakeModelServer) -> None:
    with trio.fail_after(30):
        direct = await post(fake_model.base_url, "direct", body("ECHO me"), session="d")
        async with running_gateway(fake_model.base_url) as gateway:
            through = await post(gateway.base_url, gateway.token, body("ECHO me"), session="g")
    assert through.status_code == 200 and through.headers["content-type"] == "text/event-stream"
    # the same frames, but for the message id the fake numbers per request
    assert through.text.replace("req_fake_000002", "X") == direct.text.replace("req_fake_000001", "X")
    assert [r.api_key for r in fake_model.requests] == ["direct", REAL_KEY]
    assert fake_model.requests[1].session_id == "g"  # the session header is passed on
    stats = gateway.stats_of("g")
    assert (stats.calls, stats.upstream, stats.input_tokens, stats.output_tokens) == (1, 1, 10, 5)


async def test_error_answers_pass_through_and_bad_requests_are_refused(fake_model: FakeModelServer) -> None:
    with trio.fail_after(30):
        async with running_gateway(fake_model.base_url) as gateway:
            async with httpx.AsyncClient(trust_env=False) as client:
                wrong = await client.get(gateway.base_url + "/v1/messages", headers=headers(gateway.token))
                notjson = await client.post(gateway.base_url + "/v1/messages", headers=headers(gateway.token), content=b"[1")
    assert wrong.status_code == 404 and notjson.status_code == 400
    assert "dsh-orchestra gateway" in notjson.json()["error"]["message"]


async def test_streams_arrive_as_they_are_sent(fake_model: FakeModelServer) -> None:
    """The first frames reach the client while the upstream is still streaming (not buffered)."""
    from dsh_orchestra.testing._script import parse_script

    fake_model.script = parse_script({"rules": [{"name": "long", "match": "LONG", "reply": "x" * 64 * 400}]})
    with trio.fail_after(30):
        async with running_gateway(fake_model.base_url) as gateway:
            async with httpx.AsyncClient(trust_env=False) as client:
                async with client.stream("POST", gateway.base_url + "/v1/messages", headers=headers(gateway.token),
                                         content=json.dumps(body("LONG"))) as response:
                    chunks = [chunk async for chunk in response.aiter_raw()]
    assert len(chunks) > 1
    assert b"".join(chunks).count(b"event: content_block_delta") == 400


@pytest.mark.parametrize("value", [0, "many", -1])
def test_bad_model_concurrency_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="model_concurrency"):
        GatewayOptions(model_concurrency=value)


def test_replay_needs_a_cache() -> None:
    with pytest.raises(ValueError, match="cache"):
        GatewayOptions(cache_mode="replay")

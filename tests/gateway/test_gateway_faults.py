"""Faults: an unreachable or refusing provider, a runtime that leaves mid-stream. Clear errors, no hang."""

from __future__ import annotations

import json
import ssl
from functools import partial
from typing import Awaitable, Callable

import httpx
import trio
import trio.testing

from dsh_orchestra.gateway import GatewayOptions
from dsh_orchestra.gateway._http import Peer

from gateway_support import body, running_gateway

START = b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"usage":{"input_tokens":7,"output_tokens":1}}}\n\n'
BLOCK = b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n'


async def serve_upstream(nursery: trio.Nursery, answer: Callable[[Peer], Awaitable[None]], *,
                         tls: ssl.SSLContext | None = None) -> str:
    """A provider answering each request with ``answer``; its base URL (https with ``tls``)."""
    async def handler(raw: trio.SocketStream) -> None:
        stream = raw if tls is None else trio.SSLStream(raw, tls, server_side=True)
        peer = Peer(stream)  # type: ignore[arg-type]
        try:
            while await peer.receive() is not None:
                await answer(peer)
                if not peer.reusable():
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    [listener] = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return f"{'http' if tls is None else 'https'}://127.0.0.1:{listener.socket.getsockname()[1]}"


async def post(url: str, token: str) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.post(url + "/v1/messages", content=json.dumps(body()), headers={"x-api-key": token})


async def test_an_unreachable_provider_is_a_502_after_the_retries() -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listener = (await nursery.start(partial(trio.serve_tcp, lambda s: s.aclose(), 0, host="127.0.0.1")))[0]
            port = listener.socket.getsockname()[1]
            nursery.cancel_scope.cancel()  # nothing listens there any more
        async with running_gateway(f"http://127.0.0.1:{port}", GatewayOptions(max_attempts=2)) as gateway:
            gateway.backoff = lambda attempt: 0.0  # type: ignore[method-assign]
            answer = await post(gateway.base_url, gateway.token)
    assert answer.status_code == 502
    assert "the model provider cannot be reached (ConnectError" in answer.json()["error"]["message"]
    assert gateway.totals.retries == 1 and gateway.limiter.in_flight == 0


async def test_a_401_from_the_provider_is_passed_on_as_it_came() -> None:
    async def refuse(peer: Peer) -> None:
        await peer.whole(401, b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}',
                         [(b"content-type", b"application/json")])

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream = await serve_upstream(nursery, refuse)
            async with running_gateway(upstream) as gateway:
                answer = await post(gateway.base_url, gateway.token)
            nursery.cancel_scope.cancel()
    assert answer.status_code == 401 and answer.json()["error"]["message"] == "invalid x-api-key"
    assert gateway.totals.errors == 1 and gateway.totals.retries == 0


async def test_a_runtime_leaving_mid_stream_frees_its_place_and_the_gateway_goes_on() -> None:
    release = trio.Event()
    cut = trio.Event()

    async def slow(peer: Peer) -> None:
        await peer.start(200, [(b"content-type", b"text/event-stream")])
        await peer.send(START + BLOCK + DELTA)
        await release.wait()
        try:
            for _ in range(200):
                await peer.send(DELTA)
                await trio.sleep(0.01)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            cut.set()  # the gateway closed the upstream stream too
            raise

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream = await serve_upstream(nursery, slow)
            async with running_gateway(upstream, GatewayOptions(model_concurrency=1)) as gateway:
                payload = json.dumps(body()).encode()
                client = await trio.open_tcp_stream("127.0.0.1", int(gateway.base_url.rsplit(":", 1)[1]))
                await client.send_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: " + gateway.token.encode()
                                      + b"\r\ncontent-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
                first = b""
                while b"content_block_delta" not in first:
                    first += await client.receive_some(65536)
                await client.aclose()  # the runtime goes away mid-stream
                release.set()
                await cut.wait()
                await trio.testing.wait_all_tasks_blocked()  # the gateway has finished with that call
                assert gateway.limiter.in_flight == 0
                release2 = await post(gateway.base_url, "wrong")  # still serving
            nursery.cancel_scope.cancel()
    assert release2.status_code == 401

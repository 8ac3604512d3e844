"""The gateway's upstream side (``_upstream``): a request leaves in one write, with its host and
length, and what is held is written before a read or a TLS start and dropped at a close."""

from __future__ import annotations

import json
import ssl
from typing import Any

import h11
import httpcore
import httpx
import pytest
import trio
import trustme
from httpcore._backends.trio import TrioStream  # the stream under the one-write wrapper

from dsh_orchestra.gateway._http import Peer
from dsh_orchestra.gateway._server import _json
from dsh_orchestra.gateway._upstream import OneWriteStream

from gateway_support import REAL_KEY, body, running_gateway
from test_gateway_faults import BLOCK, DELTA, START, serve_upstream


class Noted(httpcore.AsyncNetworkStream):
    """A network stream noting what is done to it, in order."""

    def __init__(self) -> None:
        self.done: list[tuple[str, Any]] = []

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's interface
        self.done.append(("write", (buffer, timeout)))

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        self.done.append(("read", timeout))
        return b"answer"

    async def aclose(self) -> None:
        self.done.append(("close", None))

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:  # noqa: ASYNC109
        self.done.append(("tls", server_hostname))
        return Noted()

    def get_extra_info(self, info: str) -> Any:
        return f"info:{info}"


async def test_writes_are_held_until_the_next_read_and_go_out_as_one() -> None:
    inner = Noted()
    stream = OneWriteStream(inner)
    await stream.write(b"head", timeout=60.0)
    await stream.write(b"", timeout=60.0)
    await stream.write(b"body", timeout=60.0)
    assert inner.done == []
    assert await stream.read(100, timeout=300.0) == b"answer"
    assert inner.done == [("write", (b"headbody", 60.0)), ("read", 300.0)]
    assert await stream.read(100) == b"answer"  # nothing held: a read alone
    assert inner.done[2:] == [("read", None)]
    assert stream.get_extra_info("is_readable") == "info:is_readable"


async def test_what_is_held_is_written_before_a_tls_start_and_dropped_at_a_close() -> None:
    inner = Noted()
    stream = OneWriteStream(inner)
    await stream.write(b"CONNECT", timeout=5.0)
    secured = await stream.start_tls(ssl.create_default_context(), "example.test")
    assert inner.done == [("write", (b"CONNECT", 5.0)), ("tls", "example.test")]
    assert isinstance(secured, OneWriteStream)
    await secured.write(b"never sent")
    await secured.aclose()
    assert secured._stream.done == [("close", None)]  # type: ignore[attr-defined]


async def test_a_forwarded_call_reaches_the_provider_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a real gateway and sockets: each call is one write upstream, with host and length."""
    writes: list[tuple[TrioStream, bytes]] = []  # every connection's, the test client's too
    original = TrioStream.write

    async def noted(self: TrioStream, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        writes.append((self, buffer))
        await original(self, buffer, timeout)

    monkeypatch.setattr(TrioStream, "write", noted)
    seen: list[tuple[h11.Request, bytes | None]] = []

    async def answer(peer: Peer) -> None:
        await peer.whole(200, b'{"ok":true}', [(b"content-type", b"application/json")])

    original_receive = Peer.receive

    async def noted_receive(self: Peer) -> tuple[h11.Request, bytes | None] | None:
        received = await original_receive(self)
        if received is not None:
            seen.append(received)
        return received

    monkeypatch.setattr(Peer, "receive", noted_receive)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream = await serve_upstream(nursery, answer)
            async with running_gateway(upstream) as gateway, httpx.AsyncClient(trust_env=False) as client:
                sent = json.dumps(body("one write")).encode()
                for _ in range(2):
                    answered = await client.post(gateway.base_url + "/v1/messages", content=sent,
                                                 headers={"x-api-key": gateway.token})
                    assert answered.status_code == 200 and answered.json() == {"ok": True}
            nursery.cancel_scope.cancel()
    key = REAL_KEY.encode()
    upstream_streams = {id(stream) for stream, data in writes if key in data}
    upstream_writes = [data for stream, data in writes if id(stream) in upstream_streams]
    assert len(upstream_writes) == 2  # one per call: head and body together
    port = upstream.rsplit(":", 1)[1]
    upstream_requests = [(request, data) for request, data in seen if dict(request.headers).get(b"x-api-key") == key]
    assert len(upstream_requests) == 2
    for (request, data), written in zip(upstream_requests, upstream_writes, strict=True):
        headers = dict(request.headers)
        assert headers[b"host"] == f"127.0.0.1:{port}".encode()
        assert headers[b"content-length"] == str(len(sent)).encode() and data == sent
        assert written.startswith(b"POST /v1/messages HTTP/1.1\r\n") and written.endswith(sent)


def test_a_body_is_read_as_json_allows_it_even_where_orjson_refuses() -> None:
    """orjson first; a lone surrogate escape or an integer over 64 bits is still JSON (the
    runtime's JSON.stringify can write the first), so such a call is forwarded, not refused."""
    assert _json(b'{"text":"\\ud800","n":123456789012345678901234567890}') == {
        "text": "\ud800", "n": 123456789012345678901234567890}
    assert _json(b'{"a":[1,2.5,null,true]}') == {"a": [1, 2.5, None, True]}
    assert _json(b"not json") is None and _json(b"\xff") is None


async def test_a_streamed_answer_over_tls_comes_through_whole_and_the_request_in_one_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider on https (a test CA): the TLS start, one write per request through the TLS
    stream, the SSE answer passed on byte for byte."""
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    stream_body = START + BLOCK + DELTA + b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    writes: list[tuple[TrioStream, bytes]] = []
    original = TrioStream.write

    async def noted(self: TrioStream, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        writes.append((self, buffer))
        await original(self, buffer, timeout)

    monkeypatch.setattr(TrioStream, "write", noted)

    async def answer(peer: Peer) -> None:
        await peer.start(200, [(b"content-type", b"text/event-stream")], stream_body, end=True)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream = await serve_upstream(nursery, answer, tls=server_context)
            async with running_gateway(upstream) as gateway, httpx.AsyncClient(trust_env=False) as client:
                gateway._ssl = client_context  # trust the test CA (the gateway makes its context once)
                for _ in range(2):
                    async with client.stream("POST", gateway.base_url + "/v1/messages", content=json.dumps(body()),
                                             headers={"x-api-key": gateway.token}) as answered:
                        received = b"".join([chunk async for chunk in answered.aiter_raw()])
                    assert answered.status_code == 200 and received == stream_body
            nursery.cancel_scope.cancel()
    assert gateway.totals.upstream == 2 and gateway.totals.errors == 0
    key = REAL_KEY.encode()
    # the gateway's TLS connection to the provider: the wrapped stream gets one write per call
    upstream_writes = [data for stream, data in writes if isinstance(stream._stream, trio.SSLStream) and key in data]
    assert len(upstream_writes) == 2
    assert all(data.startswith(b"POST /v1/messages HTTP/1.1\r\n") and data.endswith(json.dumps(body()).encode())
               for data in upstream_writes)

"""The gateway's side towards the provider: httpcore, the connection pool under httpx, on trio.

The gateway forwards each call as it came, so it uses the pool directly: no client-level
cookies, redirects or auth flow, no second Request/Response model per call. Its network backend
sends a request's head and body in one write (:class:`OneWriteStream`). Knows nothing of models.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any, Final

import httpcore

UPSTREAM_ERRORS: Final = (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
                          httpcore.UnsupportedProtocol)
"""What a failed exchange with the provider raises: no connection, a timeout, a malformed answer."""
TIMEOUTS: Final = {"connect": 10.0, "read": 300.0, "write": 60.0, "pool": None}
"""Seconds per step of a call (httpcore's ``timeout`` extension); ``read`` is per read."""
KEEPALIVE: Final = 4
"""Idle upstream connections a pool keeps (one runtime connection needs one)."""


class OneWriteStream(httpcore.AsyncNetworkStream):
    """A network stream that holds what is written until the next read, then writes it all at
    once: httpcore writes a request's head and its body apart, and reads the answer after both,
    so the provider gets the request in one write and wakes once for it, not twice."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._held: list[bytes] = []
        self._timeout: float | None = None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's interface
        if buffer:
            self._held.append(buffer)
            self._timeout = timeout

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if self._held:
            await self.flush()
        return await self._stream.read(max_bytes, timeout)

    async def flush(self) -> None:
        """Write what is held, in one write."""
        held, self._held = self._held, []
        await self._stream.write(held[0] if len(held) == 1 else b"".join(held), self._timeout)

    async def aclose(self) -> None:
        self._held = []
        await self._stream.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:  # noqa: ASYNC109
        if self._held:
            await self.flush()
        return OneWriteStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class OneWriteBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, its connections wrapped in :class:`OneWriteStream`."""

    def __init__(self) -> None:
        self._backend = httpcore.TrioBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None, socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        return OneWriteStream(await self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109
                                  socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        return OneWriteStream(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class Answer:
    """The provider's answer to one call: ``status``, ``headers`` (raw pairs) and the body."""

    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        self.status: int = response.status
        self.headers: list[tuple[bytes, bytes]] = response.headers

    def header(self, name: bytes) -> str | None:
        """The first value of header ``name`` (lower case), any case in the answer."""
        return next((v.decode("latin-1") for k, v in self.headers if k.lower() == name), None)

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (read it once)."""
        return self._response.aiter_stream()

    async def aread(self) -> bytes:
        return await self._response.aread()

    async def aclose(self) -> None:
        await self._response.aclose()


class UpstreamClient:
    """One pool of kept-alive connections to the provider's ``url`` (``…/v1/messages``)."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None) -> None:
        self._url = httpcore.URL(url)
        default = {b"http": 80, b"https": 443}.get(self._url.scheme)
        port = self._url.port
        self._host = self._url.host if port is None or port == default else b"%b:%d" % (self._url.host, port)
        self._pool = httpcore.AsyncConnectionPool(ssl_context=ssl_context, max_connections=None,
                                                  max_keepalive_connections=KEEPALIVE, network_backend=OneWriteBackend())
        self.closed = False

    async def post(self, headers: list[tuple[bytes, bytes]], body: bytes) -> Answer:
        """Send ``body`` with ``headers`` (plus host and content-length); the answer once its head is read."""
        framing = [(b"host", self._host), (b"content-length", b"%d" % len(body))]
        request = httpcore.Request(b"POST", self._url, headers=[*framing, *headers], content=body,
                                   extensions={"timeout": TIMEOUTS})
        return Answer(await self._pool.handle_async_request(request))

    async def aclose(self) -> None:
        self.closed = True
        await self._pool.aclose()

"""Gateway: the loopback HTTP service every runtime of a run uses as its DEEPSEEK_BASE_URL.

Owns token checks, the upstream clients (``._upstream``), retries of rate-limited calls under
the shared ``AdaptiveLimiter``, the cache lookups and stores, and the counters. It starts
with ``await nursery.start(gateway.run)`` and stops when its scope is cancelled.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import random
import re
import secrets
import ssl
from typing import Any, Final

import attrs
import h11
import httpx
import orjson
import trio

from ._budget import CallBudget, call_cost
from ._cache import Entry, ResponseCache, cache_key
from ._http import Peer, Relay, header, passed_headers
from ._limiter import AUTO_MAX, AUTO_START, AdaptiveLimiter
from ._options import GatewayOptions
from ._sse import COUNTED, SseReader, Usage, overloaded_event
from ._upstream import UPSTREAM_ERRORS, Answer, UpstreamClient

LOOPBACK: Final = "127.0.0.1"
SESSION_HEADER: Final = b"x-deepseek-harness-session-id"
LIMITED_STATUS: Final = frozenset({429, 529})
BACKOFF_BASE: Final = 1.0
"""Seconds before the first retry of a limited call (then doubling), jittered to 50-100 %."""
BACKOFF_MAX: Final = 30.0
_FORWARD_SKIP: Final = frozenset({b"host", b"x-api-key", b"authorization", b"content-length", b"connection",
                                  b"accept-encoding", b"transfer-encoding", b"keep-alive"})
USAGE_EVENTS: Final = frozenset({"message_start", "message_delta"})
SETTLE_WAIT: Final = 2.0
"""Seconds :meth:`Gateway.settled` waits at most for a session's calls to be counted."""
PARENT: Final = re.compile(r'Your parent agent id is "([^"]+)"')
JUDGE_SESSION_PREFIX: Final = "judge-"
"""A judge's grading session (``dsh_orchestra.eval.Judge``): its calls count in the run's totals
and budget only, so no one takes its counts and the gateway keeps none for it."""

log = logging.getLogger("dsh_orchestra.gateway")


@attrs.define
class CallStats:
    """Counters of one session's (or a whole run's) model calls."""

    calls: int = 0  # answered, upstream or from the cache
    upstream: int = 0  # calls that reached the provider and were answered
    cache_hits: int = 0
    retries: int = 0  # limited answers absorbed (retried inside the gateway)
    errors: int = 0  # calls answered with an error
    input_tokens: int = 0
    output_tokens: int = 0
    saved_tokens: int = 0  # tokens of the cache hits (not paid again)
    cost_usd: float | None = None  # of the upstream calls, at the run's price (None: no price)
    saved_cost_usd: float | None = None  # of the cache hits, at the run's price
    first_token_s: float = 0.0  # summed over calls
    duration_s: float = 0.0  # summed over calls

    def to_json(self) -> dict[str, Any]:
        """The ``model`` object of a result line: counts, tokens, and mean times per call."""
        timed = self.upstream or 1
        return {"calls": self.calls, "upstream_calls": self.upstream, "cache_hits": self.cache_hits,
                "retries": self.retries, "errors": self.errors, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "saved_tokens": self.saved_tokens,
                "cost_usd": _usd(self.cost_usd), "saved_cost_usd": _usd(self.saved_cost_usd),
                "time_to_first_token_s": round(self.first_token_s / timed, 6) if self.upstream else None,
                "call_duration_s": round(self.duration_s / timed, 6) if self.upstream else None}


def limiter_for(options: GatewayOptions) -> AdaptiveLimiter:
    """The limiter ``options`` describe: ``model_concurrency`` (AIMD for ``auto``) and ``model_rate``."""
    adaptive = options.model_concurrency == "auto"
    start = AUTO_START if adaptive else int(options.model_concurrency)
    return AdaptiveLimiter(start, adaptive=adaptive, maximum=max(start, AUTO_MAX), minimum=1, rate=options.model_rate)


def _usd(value: float | None) -> float | None:
    return round(value, 9) if value is not None else None


class Gateway:
    """The model gateway of one run (see the module docstring and docs/gateway.md).

    ``upstream`` is the provider's base URL (``/v1/messages`` is appended); ``api_key`` the
    real key (None: none is sent). Each runtime presents :attr:`token` as its API key.
    ``limiter``: the gate of upstream calls (default :func:`limiter_for` the options; the Ray
    node gateways pass one their quota coordinator sets).
    """

    def __init__(self, options: GatewayOptions | None = None, *, upstream: str, api_key: str | None,
                 cache: ResponseCache | None = None, rng: random.Random | None = None,
                 limiter: AdaptiveLimiter | None = None) -> None:
        self.options = options or GatewayOptions()
        self.upstream = upstream.rstrip("/")
        self._messages_url = self.upstream + "/v1/messages"
        self.token = "dsho-gw-" + secrets.token_urlsafe(24)
        self._api_key = api_key
        self.cache = cache
        self.limiter = limiter or limiter_for(self.options)
        self.totals = self.new_stats()
        self.budget = CallBudget(self.options.max_total_tokens, self.options.max_total_cost, self.options.price)
        self.sessions: dict[str, CallStats] = {}
        self.epochs: dict[str, int] = {}  # session id -> epoch (batch items); children inherit
        self.roots: dict[str, str] = {}  # subagent session id -> the session it was spawned from (at the top)
        self.children: dict[str, list[str]] = {}  # the session at the top -> its subagents (forgotten with it)
        self._rng = rng or random.Random()
        self._port: int | None = None
        self._ssl: ssl.SSLContext | None = None  # built once, shared by the connections' upstream clients
        self.open: dict[str, int] = {}  # root session -> its calls not yet counted to the end
        self._ended = trio.Event()  # set (and replaced) as each call ends

    def __repr__(self) -> str:
        return f"Gateway(upstream={self.upstream!r}, port={self._port})"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` once :meth:`run` has started."""
        if self._port is None:
            raise RuntimeError("the gateway is not listening yet; start it with nursery.start(gateway.run)")
        return f"http://{LOOPBACK}:{self._port}"

    def new_stats(self) -> CallStats:
        """Zero counters; with a price, the costs start at 0.0 (None: no price)."""
        cost = 0.0 if self.options.price is not None else None
        return CallStats(cost_usd=cost, saved_cost_usd=cost)

    def tag(self, session_id: str, *, epoch: int) -> None:
        """Key the cache of ``session_id``'s calls (and its subagents') by ``epoch``."""
        self.epochs[session_id] = epoch

    def stats_of(self, session_id: str) -> CallStats:
        """The counters of a session and its subagents (a zero one if they made no call)."""
        return self.sessions.get(session_id) or self.new_stats()

    async def settled(self, session_id: str, *, wait: float = SETTLE_WAIT) -> None:
        """Return once no call of ``session_id`` (or its subagents) is still being counted, or
        after ``wait`` seconds. A runtime may end its turn (and its item be taken) as soon as the
        last byte of an answer reached it, a moment before the gateway counted that call."""
        if session_id not in self.open:
            return
        with trio.move_on_after(wait):
            while session_id in self.open:
                await self._ended.wait()

    def take(self, session_id: str) -> CallStats:
        """:meth:`stats_of`, forgotten here with its subagents (an item's line is written once)."""
        self.epochs.pop(session_id, None)
        for child in self.children.pop(session_id, ()):
            self.roots.pop(child, None)
            self.epochs.pop(child, None)
        return self.sessions.pop(session_id, None) or self.new_stats()

    def summary(self) -> dict[str, Any]:
        """Run totals: calls, hits, hit rate, tokens, tokens saved, 429s absorbed, the limit over time."""
        totals = self.totals
        start = self.limiter.history[0][0]
        return {**totals.to_json(), "hit_rate": round(totals.cache_hits / totals.calls, 6) if totals.calls else None,
                "concurrency": {"mode": "auto" if self.limiter.adaptive else "fixed", "final": self.limiter.limit,
                                "min": min(limit for _, limit in self.limiter.history),
                                "max": max(limit for _, limit in self.limiter.history),
                                "changes": [[round(t - start, 3), limit] for t, limit in self.limiter.history[-100:]]},
                "budget": self.budget.to_json() if self.budget.limited else None}

    async def run(self, *, task_status: trio.TaskStatus[Gateway] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 and serve until cancelled; ``task_status.started(self)`` once bound."""
        listeners = await trio.open_tcp_listeners(0, host=LOOPBACK)
        try:
            self._port = listeners[0].socket.getsockname()[1]
            task_status.started(self)  # the runtimes may spawn now: a connection waits in the backlog meanwhile
            await trio.lowlevel.checkpoint()  # let the caller go on (to spawning them) before the TLS context
            await self.upstream_client().aclose()  # the TLS context and the first pool's imports: not in a call
            await trio.serve_listeners(self._serve, listeners)
        finally:
            for listener in listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()

    def upstream_client(self) -> UpstreamClient:
        """A new upstream client (one per runtime connection, see :class:`_Upstream`)."""
        if self._ssl is None:  # made once (about 0.06 s: the CA bundle), after the gateway is listening
            self._ssl = httpx.create_ssl_context(trust_env=False)
        return UpstreamClient(self._messages_url, self._ssl)

    async def _serve(self, stream: trio.SocketStream) -> None:
        peer = Peer(stream)
        upstream = _Upstream(self)
        try:
            while (received := await peer.receive()) is not None:
                await self._respond(peer, upstream, *received)
                if not peer.reusable():
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError) as exc:
            log.debug("gateway: a runtime's connection ended: %s", type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - one call's failure (e.g. the provider cut its stream) never stops the gateway
            log.warning("gateway: a model call failed: %s: %s", type(exc).__name__, exc)
            if peer.connection.our_state is h11.SEND_RESPONSE:
                with trio.move_on_after(5):
                    try:
                        await peer.error(502, "api_error", f"the call failed: {type(exc).__name__}: {exc}")
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
        finally:
            with trio.CancelScope(shield=True):
                await upstream.aclose()
            await stream.aclose()

    async def _respond(self, peer: Peer, upstream: _Upstream, request: h11.Request, body: bytes | None) -> None:
        presented = header(request, b"x-api-key") or (header(request, b"authorization") or "").removeprefix("Bearer ")
        if not hmac.compare_digest(presented.encode(), self.token.encode()):
            await peer.error(401, "authentication_error", "this request carries no valid gateway token")
            return
        target = request.target.split(b"?", 1)[0]
        if request.method != b"POST" or target != b"/v1/messages":
            await peer.error(404, "not_found_error", f"no route for {request.method.decode()} {target.decode(errors='replace')}")
            return
        if body is None:
            await peer.error(413, "request_too_large", "the request body is over 64 MiB")
            return
        payload = _json(body)
        if not isinstance(payload, dict):
            await peer.error(400, "invalid_request_error", "the request body must be a JSON object")
            return
        session = header(request, SESSION_HEADER) or ""
        epoch = self._resolve(session, payload)
        root = self.roots.get(session, session)
        if root.startswith(JUDGE_SESSION_PREFIX):
            stats = self.new_stats()  # counted in the totals and the budget; no one takes a judge's counts
        else:
            stats = self.sessions.get(root) or self.sessions.setdefault(root, self.new_stats())
        self.open[root] = self.open.get(root, 0) + 1
        try:
            await _Call(self, peer, upstream, request, body, payload, root, stats, epoch).run()
        finally:
            left = self.open.pop(root) - 1
            if left:
                self.open[root] = left
            self._ended.set()
            self._ended = trio.Event()

    def _resolve(self, session: str, payload: dict[str, Any]) -> int | None:
        """Map a subagent to its root session (its first message names its parent); its epoch."""
        if session not in self.epochs and session not in self.roots:
            parent = PARENT.search(_first_text(payload))
            if parent is not None:
                root = self.roots.get(parent.group(1), parent.group(1))
                self.roots[session] = root
                self.children.setdefault(root, []).append(session)
                if root in self.epochs:
                    self.epochs[session] = self.epochs[root]
        if self.options.cache_epochs == "shared":
            return None
        return self.epochs.get(session, 0)

    def forward_headers(self, request: h11.Request) -> list[tuple[bytes, bytes]]:
        """The request's headers to send upstream: without host, credentials, framing and encoding ones; identity encoding asked."""
        headers = [(k, v) for k, v in request.headers if k not in _FORWARD_SKIP]
        headers.append((b"accept-encoding", b"identity"))
        if self._api_key is not None:
            headers.append((b"x-api-key", self._api_key.encode()))
        return headers

    def pause(self, attempt: int, retry_after: float | None) -> float:
        """Before retry ``attempt``: the provider's ``retry-after`` when it sent one (the limiter
        holds every new call that long too, and the retry goes to the head of the line), else
        :meth:`backoff`. Waiting longer than the provider asked left the quota unused (the
        goodput benchmark: 68 % of a 2/s quota with the exponential backoff taken as a floor)."""
        if retry_after is not None:
            return retry_after
        return self.backoff(attempt)

    def backoff(self, attempt: int) -> float:
        """The pause before retry ``attempt`` (1, 2, ...): BACKOFF_BASE doubling, at most
        BACKOFF_MAX, times a random 0.5-1.0."""
        return float(min(BACKOFF_MAX, BACKOFF_BASE * 2.0 ** (attempt - 1)) * (0.5 + self._rng.random() / 2))


def _json(body: bytes) -> Any:
    """The request body decoded (None: not JSON): orjson, or the standard library for what
    orjson refuses and JSON allows (a lone surrogate escape, an integer over 64 bits)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            return json.loads(body)
        except ValueError:
            return None


def _first_text(payload: dict[str, Any]) -> str:
    """The text blocks of the first message (where the runtime names a subagent's parent)."""
    messages = payload.get("messages")
    first = messages[0] if isinstance(messages, list) and messages and isinstance(messages[0], dict) else {}
    content = first.get("content")
    blocks = [{"text": content}] if isinstance(content, str) else content if isinstance(content, list) else []
    return "\n".join(b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str))


def retry_after(answer: Answer) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds; an HTTP date is ignored)."""
    for name, scale in ((b"retry-after-ms", 0.001), (b"retry-after", 1.0)):
        value = answer.header(name)
        try:
            seconds = float(value) * scale if value is not None else math.nan
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


class _Upstream:
    """The upstream client of one runtime connection, made at its first forwarded call.

    A runtime's connection carries one call at a time, so its own client (one kept-alive
    upstream connection) serves it: one client shared by every connection made httpcore's pool
    scan all its idle connections (a readability poll each) at every request, half the
    gateway's CPU at 64 streams (docs/benchmarks.md, "Gateway per-call cost").
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._client: UpstreamClient | None = None

    def get(self) -> UpstreamClient:
        if self._client is None:
            self._client = self._gateway.upstream_client()
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


class _Retry(Exception):
    """An attempt that was rate-limited (or could not reach the provider): try again."""

    def __init__(self, reason: str, wait: float | None, *, limited: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait = wait
        self.limited = limited  # a rate-limit or overload answer (False: the provider was not reached)
        self.stale = False  # limited, to a call started before the limiter's latest slow-down: no attempt spent


class _Call:
    """One ``/v1/messages`` request from a runtime, answered from the cache or the provider."""

    def __init__(self, gateway: Gateway, peer: Peer, upstream: _Upstream, request: h11.Request, body: bytes,
                 payload: dict[str, Any], session: str, stats: CallStats, epoch: int | None) -> None:
        self.gateway = gateway
        self.peer = peer
        self.upstream = upstream
        self.request = request
        self.body = body
        self.stats = stats
        self.root = session  # the item's session (a subagent's calls count to the session at its top)
        self.key = cache_key(payload, epoch=epoch) if gateway.cache is not None else ""  # only a cache needs it
        self.started = trio.current_time()
        self.first_token: float | None = None
        self.usage = Usage()

    def _count(self, field: str, amount: float = 1) -> None:
        for stats in (self.stats, self.gateway.totals):
            setattr(stats, field, getattr(stats, field) + amount)

    def _cost(self, field: str, usage: Usage) -> None:
        """Add ``usage``'s cost at the run's price to ``field`` (left None without a price)."""
        price = self.gateway.options.price
        if price is not None:
            cost = call_cost(usage, price)
            for stats in (self.stats, self.gateway.totals):
                setattr(stats, field, (getattr(stats, field) or 0.0) + cost)

    async def _refuse(self) -> None:
        """The budget is reached: answer 400 (the runtime does not retry it); the item is cut short."""
        self._count("errors")
        await self.peer.error(400, "invalid_request_error", self.gateway.budget.refuse(self.root))

    async def run(self) -> None:
        gateway, options = self.gateway, self.gateway.options
        cache = gateway.cache
        if cache is not None and options.cache_mode in ("use", "replay"):
            entry = await cache.aget(self.key)
            if entry is not None:
                await self._replay(entry)
                return
            if options.cache_mode == "replay":
                self._count("errors")
                await self.peer.error(400, "invalid_request_error",
                                      f"cache miss: request {self.key} is not in the cache (replay mode sends nothing upstream)")
                return
        attempt = tries = 0  # attempt: the tries that count against max_attempts
        while True:
            attempt += 1
            tries += 1
            if gateway.budget.reached:  # a retry is a further call too
                await self._refuse()
                return
            try:
                if not await self._attempt(last=attempt >= options.max_attempts,
                                           final=tries >= 2 * options.max_attempts, retry=tries > 1):
                    return
                break
            except _Retry as retry:
                self._count("retries")
                if retry.stale:  # sent before the gateway slowed down: not the provider's refusal of this call
                    attempt -= 1
                pause = gateway.pause(max(1, attempt), retry.wait)
                log.info("gateway: %s; retry %d of %d in %.1f s", retry.reason, attempt, options.max_attempts - 1, pause)
                await trio.sleep(pause)
        self._count("calls")
        self._count("duration_s", trio.current_time() - self.started)
        if self.first_token is not None:
            self._count("first_token_s", self.first_token - self.started)

    async def _replay(self, entry: Entry) -> None:
        self._count("calls")
        self._count("cache_hits")
        self._count("saved_tokens", entry.input_tokens + entry.output_tokens)
        self._cost("saved_cost_usd", Usage(input_tokens=entry.input_tokens, output_tokens=entry.output_tokens))
        await self.peer.start(200, [(k.encode(), v.encode()) for k, v in entry.headers], entry.body, end=True)  # one write

    async def _attempt(self, *, last: bool, final: bool = False, retry: bool = False) -> bool:
        """One try upstream (``retry``: at the head of the line); False when the budget refused it
        (answered, nothing sent). A limited answer is passed on when ``final``, or when ``last``
        unless the call was stale (started in a window before the limiter's current one)."""
        gateway = self.gateway
        limiter = gateway.limiter
        ticket = await limiter.acquire(front=retry)
        budget = gateway.budget
        if budget.reached:  # reached while this call waited for a place
            limiter.release(ticket, "other")
            await self._refuse()
            return False
        outcome = "other"
        hint: float | None = None  # a limited answer's retry-after (the limiter learns its pacing from it)
        budget.in_flight += 1  # from here until it ends, the call may overshoot the budget
        try:
            try:
                response = await self.upstream.get().post(gateway.forward_headers(self.request), self.body)
            except UPSTREAM_ERRORS as exc:
                reason = f"the model provider cannot be reached ({type(exc).__name__}: {exc})"
                if not (last or final):
                    raise _Retry(reason, None, limited=False) from None
                self._count("errors")
                await self.peer.error(502, "api_error", reason)
                return True
            try:
                outcome = await self._relay(response, last=final or (last and ticket >= limiter.window))
            except _Retry as retry:
                outcome = "limited" if retry.limited else "other"
                hint = retry.wait
                retry.stale = retry.limited and ticket < limiter.window  # before release opens a new window
                raise
            finally:
                await response.aclose()
        finally:
            budget.in_flight -= 1
            limiter.release(ticket, outcome, retry_after=hint)
        return True

    async def _relay(self, response: Answer, *, last: bool) -> str:
        limiter = self.gateway.limiter
        if response.status in LIMITED_STATUS:
            wait = retry_after(response)
            if wait is not None:
                limiter.hold(wait)
            if not last:
                raise _Retry(f"the provider answered {response.status}", wait)
        if response.status != 200:
            data = await response.aread()
            self._count("errors")
            await self.peer.whole(response.status, data, passed_headers(response.headers))
            return "limited" if response.status in LIMITED_STATUS else "other"
        return await self._stream(response, last=last)

    async def _stream(self, response: Answer, *, last: bool) -> str:
        """Pass the SSE stream through; hold back ``message_start`` until the next event shows
        whether the provider is overloaded after all (then retry, nothing sent yet). Chunks are
        kept only when the cache stores answers; otherwise they are only split into events, and
        only the usage and error events decoded. The chunks received together are written
        together (:class:`Relay`, in a task of its own)."""
        gateway = self.gateway
        storing = gateway.cache is not None and gateway.options.cache_mode in ("use", "record")
        reader = SseReader(None if storing else COUNTED)  # storing: every event decoded, so only clean streams are stored
        relay = Relay(self.peer)
        scan = _Scan(self, response, reader, relay, storing, last=last)
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.run)
            try:
                await self._pass(response, scan)
            except Exception as exc:  # noqa: BLE001 - raised below, outside the nursery (not in an exception group)
                failure = exc
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if relay.error is not None:  # the runtime hung up during the last write
            raise relay.error
        complete = scan.stopped and not reader.pending.strip()
        clean = not scan.errored
        cache = gateway.cache
        if cache is not None and storing and complete and clean:
            headers = [(k.decode(), v.decode("latin-1")) for k, v in passed_headers(response.headers)]
            with trio.CancelScope(shield=True):  # the runtime has the answer: a run closing now must not lose it
                await cache.aput(self.key, Entry(body=b"".join(scan.stored), headers=headers,
                                                 input_tokens=self.usage.input_tokens, output_tokens=self.usage.output_tokens))
        return "ok" if clean else "limited" if scan.overloaded else "other"

    async def _pass(self, response: Answer, scan: _Scan) -> None:
        """Read the stream to its end, handing each chunk to the relay; count the call; end the answer."""
        stop: BaseException | None = None  # raised once the stream was closed and its iterators ran out
        relay = scan.relay
        try:
            async for chunk in response.chunks():
                if stop is not None:
                    continue
                try:
                    scan.chunk(chunk)
                except _Retry as exc:
                    stop = exc
                if stop is None and relay.error is not None:  # the runtime hung up
                    stop = relay.error
                if stop is not None:  # close the stream; its (nested) iterators then end instead of being dropped
                    await response.aclose()
        except UPSTREAM_ERRORS:
            if stop is None:
                raise
        if stop is not None:
            raise stop
        self._count("upstream")  # counted before the runtime sees the end (it may look at the counts then)
        self._count("input_tokens", self.usage.input_tokens)
        self._count("output_tokens", self.usage.output_tokens)
        self._cost("cost_usd", self.usage)
        if not scan.sent_head:
            scan.head()
        relay.end()


class _Scan:
    """What one upstream stream showed so far, chunk by chunk: usage (charged to the budget as
    it grows), the first token, ``message_stop``, errors; and whether the head was sent."""

    def __init__(self, call: _Call, response: Answer, reader: SseReader, relay: Relay, storing: bool, *,
                 last: bool) -> None:
        self.call = call
        self.response = response
        self.reader = reader
        self.relay = relay
        self.storing = storing  # keep the chunks, and count an undecodable event as an error
        self.last = last
        self.held: list[bytes] = []  # chunks up to the first event after message_start
        self.stored: list[bytes] = []
        self.sent_head = False
        self.stopped = False  # message_stop seen
        self.errored = False  # an error event (or, storing, an event whose data is not JSON)
        self.overloaded = False

    def chunk(self, chunk: bytes) -> None:
        """Count one chunk and hand it to the relay (held back until the first event after ``message_start``)."""
        call = self.call
        events = self.reader.feed(chunk)
        for event in events:
            name = event.name
            if name in USAGE_EVENTS:
                before = attrs.evolve(call.usage)
                call.usage.update(event)
                call.gateway.budget.charge(before, call.usage)
            elif name == "content_block_delta":
                if call.first_token is None:
                    call.first_token = trio.current_time()
            elif name == "message_stop":
                self.stopped = True
            elif name == "error":
                self.errored = True
                if overloaded_event(event):
                    self.overloaded = True
                    if not self.sent_head and not self.last:
                        raise _Retry("the provider is overloaded (in-band error)", retry_after(self.response))
            if self.storing and event.data is None and name != "ping":
                self.errored = True
        if self.storing:
            self.stored.append(chunk)
        if self.sent_head:
            self.relay.send(chunk)
            return
        self.held.append(chunk)
        if any(e.name not in ("message_start", "ping") for e in events):
            self.head()

    def head(self) -> None:
        """Hand the relay the response head and the chunks held so far."""
        self.sent_head = True
        self.relay.start(200, passed_headers(self.response.headers))
        for chunk in self.held:
            self.relay.send(chunk)
        self.held.clear()


"""A scripted model server: the Anthropic Messages streaming API on loopback, driven by a Script.

It lets the real ``dsh`` runtime run offline (``DEEPSEEK_BASE_URL=server.base_url``). Owns the
reading of a request (which prompt it answers), the per-session turn state, the SSE encoding
and a small HTTP/1.1 server (trio + h11) bound to 127.0.0.1 only. It imports only ``_script``
and the shared ``_h11`` reader from dsh_orchestra; the library layers never import it.
"""

from __future__ import annotations

import itertools
from functools import partial
import json
import logging
import math
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, Literal, TypeAlias

import attrs
import h11
import trio

from .._h11 import receive_request
from ._script import (
    DEFAULT_AFTER_SUBAGENTS,
    DEFAULT_SCRIPT,
    Behaviour,
    FailMode,
    Script,
    load_script,
    render,
)

LOOPBACK: Final = "127.0.0.1"
MAX_BODY: Final = 64 * 1024 * 1024
SESSION_HEADER: Final = b"x-deepseek-harness-session-id"
# Text blocks the runtime (0.2.1-rc.2) adds to user messages; never the prompt.
CONTEXT_PREFIXES: Final = (
    "Current runtime context.", "Your parent agent id is ", "The working directory ")
NOTICE: Final = re.compile(r"Background subagent (\S+) ")  # "... finished ...", "... failed ..."
CLOSING: Final = "Its closing message:"  # followed by one text block: the child's closing text
NO_CLOSING: Final = "It left no closing message."
STARTED: Final = re.compile(r"started subagent ([\w-]+)")
_CHUNK: Final = 64

_log = logging.getLogger(__name__)

Kind: TypeAlias = Literal["prompt", "tool-results", "subagents-finished"]


@attrs.frozen(kw_only=True)
class Incoming:
    """What the last message of a request is about; its newest meaningful block sets ``kind``."""

    kind: Kind
    text: str = ""  # the prompt text, for kind "prompt"
    started: tuple[str, ...] = ()  # child ids named by "started subagent <id>" tool results
    finished: tuple[str, ...] = ()  # child ids named by "Background subagent <id> ..." notices


def read_request(messages: Any) -> Incoming:
    """Classify the last message of a ``/v1/messages`` request's ``messages``.

    The runtime merges consecutive user messages, so the last one can hold old failed prompts,
    the new prompt, runtime-context blocks, working-directory notices and subagent notices.
    Context blocks are skipped; a notice owns its "Its closing message:" block and the one text
    block after it. The newest remaining item wins: a prompt text block, a tool result, or a
    notice.
    """
    last = messages[-1] if isinstance(messages, list) and messages else {}
    is_user = isinstance(last, dict) and last.get("role") == "user"
    content = last.get("content", []) if is_user else []
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    newest = Incoming(kind="prompt")
    started: list[str] = []
    finished: list[str] = []
    index = 0
    while index < len(blocks):
        block = blocks[index]
        index += 1
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            started += STARTED.findall(_result_text(block.get("content")))
            newest = Incoming(kind="tool-results")
            continue
        text = block.get("text")
        if block.get("type") != "text" or not isinstance(text, str):
            continue
        if text.startswith(CONTEXT_PREFIXES):
            continue
        notice = NOTICE.match(text)
        if notice is None:
            newest = Incoming(kind="prompt", text=text)
            continue
        finished.append(notice.group(1))
        newest = Incoming(kind="subagents-finished")
        follow = [b.get("text") if isinstance(b, dict) else None for b in blocks[index : index + 2]]
        if follow[:1] == [NO_CLOSING]:
            index += 1
        elif follow[:1] == [CLOSING]:
            index += 2 if len(follow) == 2 and isinstance(follow[1], str) else 1
    return attrs.evolve(newest, started=tuple(started), finished=tuple(finished))


def _result_text(content: Any) -> str:
    parts = [content] if isinstance(content, str) else content if isinstance(content, list) else []
    texts = [p if isinstance(p, str) else p.get("text") if isinstance(p, dict) else None
             for p in parts]
    return "\n".join(t for t in texts if isinstance(t, str))


@attrs.frozen(kw_only=True)
class _Turn:
    rule: str | None
    prompt: str
    behaviour: Behaviour


@attrs.define(kw_only=True)
class ModelState:
    """What the server remembers between requests (changed only by :func:`decide`)."""

    active: dict[str, _Turn] = attrs.Factory(dict)  # session id -> its latest prompt's turn
    parents: dict[str, _Turn] = attrs.Factory(dict)  # child session id -> the spawning turn
    inline: dict[str, tuple[str, Behaviour]] = attrs.Factory(dict)  # child prompt -> behaviour
    ids: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))


@attrs.frozen(kw_only=True)
class Decision:
    """How to answer one request: Anthropic content blocks and a stop reason, or a failure."""

    kind: Kind
    rule: str | None  # the rule's name; "<rule> spawn[i]" for inline children; None: default
    prompt: str
    content: tuple[dict[str, Any], ...]
    stop_reason: Literal["end_turn", "tool_use", "max_tokens"] = "end_turn"
    fail: FailMode | None = None
    delay: float = 0.0


def decide(script: Script, body: Mapping[str, Any], state: ModelState, *,
           session_id: str | None) -> Decision:
    """Choose the answer to one request body and update ``state``. No I/O."""
    incoming = read_request(body.get("messages"))
    key = session_id or ""
    active = state.active.get(key)
    for child in incoming.started:
        if active is not None:
            state.parents.setdefault(child, active)
    if incoming.kind == "tool-results":
        default = Behaviour(reply=script.default_reply)
        turn = active or _Turn(rule=None, prompt="", behaviour=default)
        return Decision(kind=incoming.kind, rule=turn.rule, prompt=turn.prompt,
                        content=_answer(turn.behaviour, turn.prompt))
    if incoming.kind == "subagents-finished":
        mapped = (state.parents[c] for c in reversed(incoming.finished) if c in state.parents)
        spawner = next(mapped, active)
        text = DEFAULT_AFTER_SUBAGENTS if spawner is None else render(
            spawner.behaviour.after_subagents, prompt=spawner.prompt)
        return Decision(kind=incoming.kind, rule=spawner.rule if spawner else None,
                        prompt=spawner.prompt if spawner else "",
                        content=({"type": "text", "text": text},))
    rule: str | None
    if incoming.text in state.inline:
        rule, behaviour = state.inline[incoming.text]
    elif (found := script.rule_for(incoming.text)) is not None:
        rule, behaviour = found.name, found.behaviour
    else:
        rule, behaviour = None, Behaviour(reply=script.default_reply)
    state.active[key] = _Turn(rule=rule, prompt=incoming.text, behaviour=behaviour)
    calls: list[dict[str, Any]] = []
    for index, spawn in enumerate(behaviour.spawn):
        if spawn.behaviour is not None:
            state.inline[spawn.prompt] = (f"{rule} spawn[{index}]", spawn.behaviour)
        arguments = {"description": spawn.description, "prompt": spawn.prompt}
        calls.append(_tool_use(state, "subagent", arguments))
    calls += [_tool_use(state, tool.name, dict(tool.input)) for tool in behaviour.tools]
    if calls:
        return Decision(kind="prompt", rule=rule, prompt=incoming.text, content=tuple(calls),
                        stop_reason="tool_use", delay=behaviour.delay)
    return Decision(kind="prompt", rule=rule, prompt=incoming.text,
                    content=_answer(behaviour, incoming.text), fail=behaviour.fail,
                    stop_reason="max_tokens" if behaviour.max_tokens else "end_turn",
                    delay=behaviour.delay)


def _answer(behaviour: Behaviour, prompt: str) -> tuple[dict[str, Any], ...]:
    text = {"type": "text", "text": render(behaviour.reply, prompt=prompt)}
    if behaviour.thinking is None:
        return (text,)
    return {"type": "thinking", "thinking": behaviour.thinking}, text


def _tool_use(state: ModelState, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    use_id = f"toolu_fake_{next(state.ids):06d}"
    return {"type": "tool_use", "id": use_id, "name": name, "input": arguments}


def sse_frames(decision: Decision, *, model: str, message_id: str) -> list[bytes]:
    """The SSE frames of a 200 answer, including the overloaded/malformed/stream-cut failures."""
    start = _frame("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})
    if decision.fail == "overloaded":
        return [start, _frame("error", _error("overloaded_error", "Overloaded"))]
    if decision.fail == "malformed":
        return [start, b"event: content_block_start\ndata: {this is not json\n\n"]
    frames = [start]
    for index, block in enumerate(decision.content):
        frames += _block_frames(index, block)
    if decision.fail == "stream-cut":
        return frames[:3]  # message_start, the first block's start and delta; no message_stop
    delta = {"stop_reason": decision.stop_reason, "stop_sequence": None}
    frames.append(_frame("message_delta", {
        "type": "message_delta", "delta": delta, "usage": {"output_tokens": 5}}))
    frames.append(_frame("message_stop", {"type": "message_stop"}))
    return frames


def error_body(decision: Decision) -> tuple[int, dict[str, Any]]:
    """Status and JSON body for ``fail = "http-500"`` or ``"http-400"``."""
    status, kind = (500, "api_error") if decision.fail == "http-500" else (
        400, "invalid_request_error")
    return status, _error(kind, f"scripted HTTP {status} from rule {decision.rule!r}")


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _block_frames(index: int, block: dict[str, Any]) -> list[bytes]:
    kind = block["type"]
    if kind == "tool_use":
        start = {**block, "input": {}}
        kind, text = "input_json", json.dumps(block["input"])
        field = "partial_json"
    elif kind == "text":
        start, text, field = {"type": "text", "text": ""}, block["text"], "text"
    else:
        start = {"type": "thinking", "thinking": "", "signature": ""}
        text, field = block["thinking"], "thinking"
    deltas = [{"type": f"{kind}_delta", field: text[i : i + _CHUNK]}
              for i in range(0, len(text), _CHUNK)]
    head = {"type": "content_block_start", "index": index, "content_block": start}
    return [
        _frame("content_block_start", head),
        *(_frame("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": delta}) for delta in deltas),
        _frame("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _frame(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@attrs.frozen(kw_only=True)
class RequestRecord:
    """One received ``/v1/messages`` request and how it was answered."""

    session_id: str | None
    kind: Kind
    rule: str | None
    prompt: str
    outcome: str  # the stop reason sent, or the fail mode
    api_key: str | None = attrs.field(default=None, eq=False)  # the x-api-key header received (a test double keeps it)


def parse_rate(text: str) -> float:
    """``R/s``, ``R/min`` or ``R`` (per second) as requests per second.

    Raises:
        ValueError: not a positive rate.
    """
    number, _, unit = text.strip().partition("/")
    scale = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 1 / 60}.get(unit.strip())
    try:
        rate = float(number) * scale if scale is not None else math.nan
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"--rate-limit must be a positive rate like 20/s or 600/min, not {text!r}")
    return rate


class Quota:
    """A token bucket: ``rate`` requests per second, bursts up to one second's worth (at least 1)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.updated = trio.current_time()

    def take(self) -> float:
        """0.0 if a request may go now (it is counted), else the seconds until one may."""
        now = trio.current_time()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class FakeModelServer:
    """The scripted model on 127.0.0.1; ``await nursery.start(server.run)`` returns it listening.

    Every connection is served by its own task, so a slow client or a ``delay`` holds up only
    its own request. ``rate_limit`` (requests per second): above it a request is answered 429
    with ``retry-after`` and ``retry-after-ms`` (counted in ``rate_limited``, not in ``requests``).
    ``concurrency_limit``: a request arriving while that many are being answered is answered
    429 too (``retry-after-ms: 100``). ``in_flight``, ``peak_in_flight`` and ``spans`` (``(start,
    end, session id)`` of every answered request, trio's clock) measure what reached the model.
    A request stops counting just before the last bytes of its answer are written: a client
    that has read its answer to the end can never find it still counted.
    """

    def __init__(self, script: Script = DEFAULT_SCRIPT, *, host: str = LOOPBACK,
                 port: int = 0, rate_limit: float | None = None, concurrency_limit: int | None = None) -> None:
        if host != LOOPBACK:
            raise ValueError(f"the fake model listens on {LOOPBACK} only, not {host!r}")
        if type(port) is not int or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer in 0..65535 (0 picks a free one), "
                             f"not {port!r}")
        self.script = script
        self.host = host
        self.requests: list[RequestRecord] = []
        self.state = ModelState()
        self._wanted_port = port
        self._port: int | None = None
        self._ran = False
        self._responses = itertools.count(1)
        self.rate_limit = rate_limit
        self.concurrency_limit = concurrency_limit
        self.rate_limited = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.spans: list[tuple[float, float, str | None]] = []
        self._quota: Quota | None = None

    @property
    def port(self) -> int:
        """The bound port (once :meth:`run` has started)."""
        if self._port is None:
            raise RuntimeError("the fake model server is not listening yet; "
                               "start it with nursery.start(server.run)")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, the value for ``DEEPSEEK_BASE_URL`` (no ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    async def run(self, *,
                  task_status: trio.TaskStatus[FakeModelServer] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled; calls ``task_status.started(self)`` once bound.

        Raises:
            OSError: the port cannot be bound.
            RuntimeError: the server already ran (it runs once).
        """
        if self._ran:
            raise RuntimeError("a FakeModelServer runs only once; make a new one")
        self._ran = True
        listeners = await trio.open_tcp_listeners(self._wanted_port, host=self.host)
        try:
            self._port = listeners[0].socket.getsockname()[1]
            task_status.started(self)
            await trio.serve_listeners(self._serve_connection, listeners)
        finally:
            for listener in listeners:
                await listener.aclose()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while (received := await receive_request(stream, connection, max_body=MAX_BODY)) is not None:
                await self._respond(stream, connection, *received)
                if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                    break
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError) as exc:
            _log.debug("fake model connection ended: %r", exc)
        finally:
            await stream.aclose()

    async def _respond(self, stream: trio.SocketStream, connection: h11.Connection,
                       request: h11.Request, body: bytes | None) -> None:
        request_id = f"req_fake_{next(self._responses):06d}"
        target = request.target.split(b"?", 1)[0]
        payload = _json_object(body)
        if request.method != b"POST" or target != b"/v1/messages":
            route = f"{request.method.decode()} {target.decode(errors='replace')}"
            status, error = 404, _error("not_found_error", f"no route for {route}")
        elif body is None:
            status, error = 413, _error("request_too_large", f"body exceeds {MAX_BODY} bytes")
        elif payload is None:
            status, error = 400, _error("invalid_request_error", "body must be a JSON object")
        elif self.concurrency_limit is not None and self.in_flight >= self.concurrency_limit:
            self.rate_limited += 1
            await _send_json(stream, connection, 429, _error("rate_limit_error", "too many requests in flight (fake quota)"),
                             request_id, extra=[("retry-after", "1"), ("retry-after-ms", "100")])
            return
        elif (wait := self._over_quota()) > 0:
            self.rate_limited += 1
            await _send_json(stream, connection, 429, _error("rate_limit_error", "rate limited (fake quota)"),
                             request_id, extra=[("retry-after", str(math.ceil(wait))),
                                                ("retry-after-ms", str(math.ceil(wait * 1000)))])
            return
        else:
            session_id = next((value.decode(errors="replace") for name, value in request.headers
                               if name == SESSION_HEADER), None)
            start = trio.current_time()
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            ended = False

            def end() -> None:  # before the answer's last write (that write yields to other tasks)
                nonlocal ended
                if not ended:
                    ended = True
                    self.in_flight -= 1
                    self.spans.append((start, trio.current_time(), session_id))

            try:
                await self._answer(stream, connection, request, payload, request_id, end)
            finally:
                end()
            return
        await _send_json(stream, connection, status, error, request_id)

    def _over_quota(self) -> float:
        if self.rate_limit is None:
            return 0.0
        if self._quota is None:
            self._quota = Quota(self.rate_limit)
        return self._quota.take()

    async def _answer(self, stream: trio.SocketStream, connection: h11.Connection,
                      request: h11.Request, payload: dict[str, Any], request_id: str, end: Callable[[], None]) -> None:
        session_id = next((value.decode(errors="replace") for name, value in request.headers
                           if name == SESSION_HEADER), None)
        decision = decide(self.script, payload, self.state, session_id=session_id)
        outcome = decision.fail or decision.stop_reason
        api_key = next((value.decode(errors="replace") for name, value in request.headers
                        if name == b"x-api-key"), None)
        self.requests.append(RequestRecord(session_id=session_id, kind=decision.kind,
                                           rule=decision.rule, prompt=decision.prompt,
                                           outcome=outcome, api_key=api_key))
        _log.debug("fake model: session %s, %s, rule %s -> %s",
                   session_id, decision.kind, decision.rule, outcome)
        await trio.sleep(decision.delay)
        if decision.fail in ("http-500", "http-400"):
            status, error = error_body(decision)
            end()
            await _send_json(stream, connection, status, error, request_id)
            return
        await _send(stream, connection, h11.Response(status_code=200, headers=[
            ("content-type", "text/event-stream"), ("cache-control", "no-cache"),
            ("request-id", request_id)]))
        model = payload.get("model")
        frames = sse_frames(decision, model=model if isinstance(model, str) else "fake",
                            message_id=f"msg_{request_id}")
        for frame in frames:
            await _send(stream, connection, h11.Data(data=frame))
        end()
        await _send(stream, connection, h11.EndOfMessage())


def _json_object(body: bytes | None) -> dict[str, Any] | None:
    try:
        payload = json.loads(body) if body is not None else None
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


async def _send(stream: trio.SocketStream, connection: h11.Connection, event: h11.Event) -> None:
    data = connection.send(event)
    if data:
        await stream.send_all(data)


async def _send_json(stream: trio.SocketStream, connection: h11.Connection, status: int,
                     body: dict[str, Any], request_id: str,
                     extra: list[tuple[str, str]] | None = None) -> None:
    data = json.dumps(body).encode()
    await _send(stream, connection, h11.Response(status_code=status, headers=[
        ("content-type", "application/json"), ("content-length", str(len(data))),
        ("request-id", request_id), *(extra or [])]))
    await _send(stream, connection, h11.Data(data=data))
    await _send(stream, connection, h11.EndOfMessage())


@asynccontextmanager
async def open_fake_model(script: Script = DEFAULT_SCRIPT,
                          **kwargs: Any) -> AsyncIterator[FakeModelServer]:
    """Run a :class:`FakeModelServer` (``kwargs``: ``host``, ``port``) for the block's duration.

    Opens a nursery, so errors (such as ``OSError`` for a busy port) arrive in an ExceptionGroup.
    """
    server = FakeModelServer(script, **kwargs)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        yield server
        nursery.cancel_scope.cancel(reason="open_fake_model block exited")


def fake_model_main(port: int, script_path: str | None, rate_limit: str | None = None, *,
                    concurrency_limit: int | None = None, stats: str | None = None) -> int:
    """Serve ``script_path`` (or the default script) on ``port`` until SIGINT or SIGTERM;
    ``rate_limit`` (``R/s``, ``R/min``) answers 429 above that rate, ``concurrency_limit`` above
    that many requests in flight. ``stats``: a file to write, at exit, what reached the model
    (JSON: answered, rate_limited, peak_in_flight, first_start_s, last_start_s, last_end_s, the
    answered requests' ``starts_s``, all on trio's clock, and ``monotonic_offset_s``: add it to
    get ``time.monotonic()``, to line them up with another process's timestamps).

    Prints ``listening on http://127.0.0.1:PORT`` once ready. Returns 0 after a signal, 1 when
    the port cannot be bound, 2 when the script cannot be read or parsed.
    """
    try:
        script = DEFAULT_SCRIPT if script_path is None else load_script(script_path)
        rate = None if rate_limit is None else parse_rate(rate_limit)
    except (OSError, ValueError) as exc:
        print(f"dsh-orchestra fake-model: {exc}", file=sys.stderr)
        return 2
    status = 0
    try:
        trio.run(partial(_serve_until_signal, script, port, rate, concurrency_limit=concurrency_limit, stats=stats))
    except* OSError as group:  # binding failed; open_fake_model raises through a nursery
        print(f"dsh-orchestra fake-model: cannot listen on {LOOPBACK}:{port}: "
              f"{group.exceptions[0]}", file=sys.stderr)
        status = 1
    return status


async def _serve_until_signal(script: Script, port: int, rate: float | None = None, *,
                              concurrency_limit: int | None = None, stats: str | None = None) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_fake_model(script, port=port, rate_limit=rate, concurrency_limit=concurrency_limit) as server:
            print(f"listening on {server.base_url}", flush=True)
            async for _ in signals:
                break
    if stats is not None:
        spans = server.spans
        data = {"answered": len(spans), "rate_limited": server.rate_limited, "peak_in_flight": server.peak_in_flight,
                "first_start_s": min((s for s, _, _ in spans), default=None),
                "last_start_s": max((s for s, _, _ in spans), default=None),
                "last_end_s": max((e for _, e, _ in spans), default=None),
                "starts_s": sorted(s for s, _, _ in spans),
                "monotonic_offset_s": time.monotonic() - trio.current_time()}
        await trio.Path(stats).write_text(json.dumps(data), encoding="utf-8")

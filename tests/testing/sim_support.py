"""Helpers of the simulator tests: replay a recorded transcript, normalise the wire, explain diffs.

A transcript (``$DSH_TRANSCRIPTS``, default the copies in tests/protocol/transcripts) is replayed frame by frame
against the simulator by a raw client: each client frame is sent only after the responses the
original client had already received at that point, with the sanitised paths (``/workspace``,
``/elsewhere``, ``/dsh-home``) mapped to real directories. Both wire logs are then reduced to
comparable items and compared; a difference is explained position by position.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import trio

from dsh_orchestra.protocol import LineFramer
from dsh_orchestra.testing._script import DEFAULT_SCRIPT, Script, parse_script
from dsh_orchestra.testing._simulator import open_simulator
from dsh_orchestra.transport import Connection

_IN_REPO = Path(__file__).parent.parent / "protocol" / "transcripts"
TRANSCRIPTS = Path(os.environ.get("DSH_TRANSCRIPTS", _IN_REPO))
IGNORED_EVENTS = frozenset({"session-log-deepseek/delivery-accepted", "llm/retry", "llm/retry-started"})
"""Plugin bookkeeping the simulator does not emit, and retry detail (collapsed, see below)."""

_CHILD_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

TRANSCRIPT_SCRIPT = """
# The keyword model the transcripts were recorded with (transcripts/README.md), as a scenario.
default_reply = "Hello from the fake model"

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "Tool finished: subagent"
after_subagents = "Hello from the fake model"

[[rules.spawn]]
description = "child task"
prompt = "CHILD: reply child-done"
reply = "child-done"

[[rules]]
name = "fail500"
match = "FAIL500"
fail = "http-500"

[[rules]]
name = "badsse"
match = "BADSSE"
fail = "malformed"

[[rules]]
name = "think"
match = "THINK"
thinking = "Let me think briefly."
reply = "Thought about it."

[[rules]]
name = "slow2"
match = "SLOW2"
delay = 2.0

[[rules]]
name = "slow1"
match = "SLOW1"
delay = 1.0

[[rules]]
name = "readfile"
match = "READFILE"
reply = "Tool finished: read"

[[rules.tools]]
name = "read"
input = { file_path = "hello.txt" }

[[rules]]
name = "bashesc"
match = "BASHESC"
reply = "Tool finished: bash"

[[rules.tools]]
name = "bash"
input = { description = "Probe the approval path", command = "echo escalated-run", sandbox_permissions = "danger-full-access", justification = "Probe how the runtime asks for approval." }
"""


def load_transcript(name: str) -> list[dict[str, Any]]:
    """The entries ``{dir, t, frame}`` of one transcript file."""
    with open(TRANSCRIPTS / name, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def _key(request_id: Any) -> str:
    return json.dumps(request_id)


class RawClient:
    """Writes frames as given and records every frame the server sends, in wire order.

    Server requests (``approval/request``, ``user-question/ask``) are answered with
    ``answer(method, params)`` (a result object), recorded like everything else.
    """

    def __init__(self, stream: trio.abc.Stream, answer: Callable[[str, dict[str, Any]], Any] | None = None) -> None:
        self.stream = stream
        self.frames: list[dict[str, Any]] = []
        self.responses: dict[str, dict[str, Any]] = {}
        self.closed = False
        self._answer = answer
        self._framer = LineFramer()
        self._progress = trio.Event()
        self._lock = trio.Lock()

    async def send(self, frame: Any) -> None:
        """Send one frame (a JSON string frame is sent as that raw line)."""
        await self.send_batch([frame])

    async def send_batch(self, frames: list[Any]) -> None:
        """Send frames in one write, as a client that did not wait between them."""
        data = b"".join((f.encode() if isinstance(f, str) else orjson.dumps(f)) + b"\n" for f in frames)
        async with self._lock:
            await self.stream.send_all(data)

    async def read(self) -> None:
        """Read until the server closes its end."""
        while True:
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.closed = True
                self._wake()
                return
            self._framer.receive_data(data)
            for frame in self._framer.frames():
                self.frames.append(frame)
                if "id" in frame and "method" in frame:
                    result = self._answer(frame["method"], frame.get("params", {})) if self._answer else None
                    reply = {"jsonrpc": "2.0", "id": frame["id"]}
                    reply.update({"result": result} if result is not None else
                                 {"error": {"code": -32601, "message": f"method not found: {frame['method']}"}})
                    await self.send(reply)
                elif "id" in frame:
                    self.responses[_key(frame["id"])] = frame
            self._wake()

    def _wake(self) -> None:
        event, self._progress = self._progress, trio.Event()
        event.set()

    async def wait_for(self, request_ids: list[Any]) -> None:
        """Return once every response in ``request_ids`` arrived (or the stream closed)."""
        while not all(_key(i) in self.responses for i in request_ids) and not self.closed:
            await self._progress.wait()

    async def wait_closed(self) -> None:
        while not self.closed:
            await self._progress.wait()


def substitute(text: str, paths: Mapping[str, str]) -> str:
    for placeholder, real in paths.items():
        text = text.replace(placeholder, real)
    return text


async def replay(entries: list[dict[str, Any]], client: RawClient, paths: Mapping[str, str],
                 hooks: Mapping[Any, Callable[[], None]] | None = None) -> None:
    """Send the transcript's client frames with the original client's causality.

    Before each client frame, wait for the responses that preceded it in the recording;
    ``hooks[id]()`` runs just before the request with that id is sent. Ends after the last
    response (and, after a ``shutdown``, once the server closed its end).
    """
    hooks = hooks or {}
    answered: list[Any] = []
    batch: list[Any] = []  # frames the original client wrote without waiting in between
    for entry in entries:
        frame = entry["frame"]
        if entry["dir"] == "s2c":
            if isinstance(frame, dict) and "id" in frame and "method" not in frame:
                answered.append(frame["id"])
            continue
        hook = hooks.get(frame.get("id")) if isinstance(frame, dict) else None
        if batch and (hook is not None or not all(_key(i) in client.responses for i in answered)):
            await client.send_batch(batch)
            batch = []
        await client.wait_for(answered)
        if hook is not None:
            hook()
        batch.append(frame if isinstance(frame, str) else json.loads(substitute(json.dumps(frame), paths)))
    if batch:
        await client.send_batch(batch)
    await client.wait_for(answered)
    if any(isinstance(e["frame"], dict) and e["frame"].get("method") == "shutdown" for e in entries):
        await client.wait_closed()


def items(frames: list[dict[str, Any]], requests: Mapping[str, dict[str, Any]],
          paths: Mapping[str, str] | None = None) -> list[tuple[Any, ...]]:
    """Reduce server frames to comparable items, in wire order.

    ``("event", session, type)``, ``("status", session, status)``, ``(method, parent, child)``
    for subagent edges, ``(method, session)`` for other notifications, ``("request", method)``
    for server requests and ``("response", method, session, outcome)`` for responses, where
    outcome is ``ok`` or ``error <code>: <message>``. Child session ids become ``child-1``, ...;
    ignored event types are dropped and repeated ``assistant/attempt`` events (retries) collapse.
    ``requests`` maps ``json.dumps(id)`` to the client request it answers.
    """
    reverse = {real: placeholder for placeholder, real in (paths or {}).items()}
    labels: dict[str, str] = {}

    def label(session: Any) -> Any:
        if isinstance(session, str) and _CHILD_ID.match(session):
            return labels.setdefault(session, f"child-{len(labels) + 1}")
        return session

    out: list[tuple[Any, ...]] = []
    for frame in frames:
        method, params = frame.get("method"), frame.get("params") or {}
        if method is not None and "id" in frame:
            out.append(("request", method))
        elif method == "session.event":
            kind = params["event"]["type"]
            item = ("event", label(params["sessionId"]), kind)
            if kind in IGNORED_EVENTS or (kind == "assistant/attempt" and out and out[-1] == item):
                continue
            out.append(item)
        elif method == "session.status":
            out.append(("status", label(params["sessionId"]), params["status"]))
        elif method in ("subagent.started", "subagent.finished"):
            out.append((method, label(params["parentSessionId"]), label(params["childSessionId"])))
        elif method is not None:
            out.append((method, label(params.get("sessionId"))))
        else:
            request = requests.get(_key(frame.get("id")), {})
            error = frame.get("error")
            outcome = "ok" if error is None else f"error {error.get('code')}: {substitute(error.get('message', ''), reverse)}"
            session = (request.get("params") or {}).get("sessionId") if isinstance(request.get("params"), dict) else None
            out.append(("response", request.get("method"), label(session), outcome))
    return out


def client_requests(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``json.dumps(id)`` -> client request frame, for :func:`items`."""
    return {_key(e["frame"]["id"]): e["frame"] for e in entries
            if e["dir"] == "c2s" and isinstance(e["frame"], dict) and "method" in e["frame"]
            and e["frame"].get("id") is not None}


def transcript_items(entries: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The items of the recorded server frames."""
    frames = [e["frame"] for e in entries if e["dir"] == "s2c"]
    return items(frames, client_requests(entries))


def explain(expected: list[tuple[Any, ...]], actual: list[tuple[Any, ...]], *, what: str) -> str:
    """A readable account of how ``actual`` (simulator) differs from ``expected`` (real)."""
    lines = [f"{what}: the simulator's wire differs from the real runtime's recording"]
    matcher = difflib.SequenceMatcher(a=expected, b=actual, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        before = f"after {expected[a0 - 1]}" if a0 else "at the start"
        if tag == "delete":
            lines.append(f"  missing in the simulator {before}: {expected[a0:a1]}")
        elif tag == "insert":
            lines.append(f"  extra in the simulator {before}: {actual[b0:b1]}")
        else:
            lines.append(f"  {before}: the real runtime sent {expected[a0:a1]}, the simulator sent {actual[b0:b1]}")
    lines.append("  full comparison (- real, + simulator):")
    lines += ["    " + line for line in difflib.ndiff([repr(i) for i in expected], [repr(i) for i in actual])
              if not line.startswith("?")]
    return "\n".join(lines)


def assert_same(expected: list[tuple[Any, ...]], actual: list[tuple[Any, ...]], *, what: str) -> None:
    """Fail with :func:`explain` when the two item lists differ."""
    if expected != actual:
        raise AssertionError(explain(expected, actual, what=what))


def per_session(sequence: list[tuple[Any, ...]]) -> dict[Any, list[tuple[Any, ...]]]:
    """Split items by the session they concern (for runs whose sessions interleave freely)."""
    out: dict[Any, list[tuple[Any, ...]]] = {}
    for item in sequence:
        session = item[2] if item[0] == "response" else item[1] if len(item) > 1 else None
        out.setdefault(session, []).append(item)
    return out


# ---- a raw Connection client of the in-process simulator ------------------------------

INIT = {"provider": "deepseek-official", "model": "deepseek-v4-flash"}


class SimClient:
    """A raw client ``Connection`` plus the log of every notification, in wire order."""

    def __init__(self, runtime: Any, connection: Any) -> None:
        self.runtime = runtime
        self.connection = connection
        self.log: list[Any] = []
        connection.add_sink(self.log.extend)

    async def request(self, method: str, params: Any = None) -> Any:
        return await self.connection.request(method, params)

    async def prompt(self, session: str, text: str) -> str:
        result = await self.request("session/prompt", {"sessionId": session, "contentBlocks": [{"type": "text", "text": text}]})
        return str(result["messageId"])

    async def wait(self, session: str) -> Any:
        return await self.request("session/wait", {"sessionId": session})

    async def run(self, session: str, text: str) -> str:
        message_id = await self.prompt(session, text)
        await self.wait(session)
        return message_id

    def events(self, session: str | None = None) -> list[dict[str, Any]]:
        """The events notified for ``session`` (every session when None), in order."""
        return [n.params["event"] for n in self.log if n.method == "session.event"
                and (session is None or n.params["sessionId"] == session)]

    def types(self, session: str) -> list[str]:
        return [event["type"] for event in self.events(session)]

    def of_type(self, session: str | None, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events(session) if event["type"] == kind]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        return [n.params for n in self.log if n.method == method]

    def final_text(self, session: str) -> str:
        messages = self.of_type(session, "assistant/message")
        content = messages[-1]["data"]["message"]["content"] if messages else []
        return "".join(block["text"] for block in content if block["type"] == "text")

    def turn_ends(self, session: str) -> list[dict[str, Any]]:
        return [event["data"]["reason"] for event in self.of_type(session, "turn/end")]


@asynccontextmanager
async def sim_client(script: Script | None = None, *, store: Any = None, cwd: str | None = None, init: dict[str, Any] | None = None,
                     initialize: bool = True, handlers: Mapping[str, Any] | None = None,
                     **options: Any) -> AsyncIterator[SimClient]:
    """An in-process simulator and a raw client Connection to it (initialized unless told not to)."""
    async with open_simulator(script or DEFAULT_SCRIPT, store=store, **options) as (runtime, stream):
        async with trio.open_nursery() as nursery:
            connection = Connection(stream, name="test client")
            client = SimClient(runtime, connection)
            for method, handler in (handlers or {}).items():
                connection.register(method, handler)
            await nursery.start(connection.run)
            if initialize:
                await client.request("initialize", {"cwd": cwd or os.getcwd(), **INIT, **(init or {})})
            yield client
            nursery.cancel_scope.cancel()


def script_of(text: str) -> Script:
    """Parse a TOML scenario given inline."""
    return parse_script(tomllib.loads(text), source="test scenario")

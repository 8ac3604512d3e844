"""An in-process stand-in runtime for the session-layer tests: memory streams, no process.

The server side is the project's own :class:`Connection` with handlers that mimic the real
0.2.1-rc.2 runtime closely enough for the session layer: a new session's first three events,
the prompt's receipt splice before the prompt response, one turn per queued prompt with no
idle between queued turns, ``session.status`` per agent, and a ``session/wait`` that answers
only when the root is idle and its children settled. Prompts choose behaviour by keyword:

* ``SPAWN``: turn 1 starts a child (``subagent.started``, the child's own events and status),
  the root goes idle, the child finishes, the root runs turn 2 ("after subagents"), then
  ``subagent.finished`` (after the parent already restarted, as observed).
* ``FAIL``: the turn ends ``{kind: "error", error: {code: "SERVER", ...}}``.
* ``SLOW``: the turn takes ``slow_seconds``.
* ``HANGUP``: the runtime closes its end of the stream in the middle of the turn.
* ``MALFORMED``: one ``session.event`` of the turn has a string ``seq``.
* anything else: the reply is ``echo: <prompt text>``.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.testing

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.transport import Connection, RpcError

ERROR = -32603


@attrs.define
class _Session:
    id: str
    seq: itertools.count[int] = attrs.Factory(itertools.count)
    queue: list[tuple[str, str]] = attrs.Factory(list)  # (message id, prompt text)
    running: bool = False
    children_active: int = 0
    turn: int = 0
    changed: trio.Event = attrs.Factory(trio.Event)
    cwd: str = "/workspace"

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    @property
    def settled(self) -> bool:
        return not self.running and not self.queue and self.children_active == 0


class ScriptedRuntime:
    """Serve the protocol subset above; ``spec()`` gives a RuntimeSpec that connects to it."""

    def __init__(self, *, slow_seconds: float = 30.0, persisted: tuple[str, ...] = ()) -> None:
        self.slow_seconds = slow_seconds
        self.persisted = set(persisted)
        self.sessions: dict[str, _Session] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[tuple[str, dict[str, Any]]] = []  # every notification, in wire order
        self._connection: Connection | None = None
        self._nursery: trio.Nursery | None = None
        self._server_stream: Any = None

    def spec(self, **kwargs: Any) -> RuntimeSpec:
        return RuntimeSpec(connect=self._connect, name="scripted", **kwargs)

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Any]:
        client, server = trio.testing.memory_stream_pair()
        self._server_stream = server
        connection = Connection(server, name="scripted client")
        for method, handler in {
            "initialize": self._initialize, "session/prompt": self._prompt, "session/wait": self._wait,
            "session/resume": self._resume, "session/working-directory/get": self._get_cwd,
            "session/working-directory/set": self._set_cwd, "shutdown": self._shutdown,
            "session/query": self._unknown_method,
        }.items():
            connection.register(method, self._logged(method, handler))
        async with trio.open_nursery() as nursery:
            self._connection, self._nursery = connection, nursery
            await nursery.start(connection.run)
            yield client
            nursery.cancel_scope.cancel()

    def _logged(self, method: str, handler: Any) -> Any:
        async def handle(params: dict[str, Any]) -> Any:
            self.requests.append((method, params))
            return await handler(params)
        return handle

    # ---- helpers ------------------------------------------------------------------------------

    async def _notify(self, method: str, params: dict[str, Any]) -> None:
        assert self._connection is not None
        self.sent.append((method, params))
        await self._connection.notify(method, params)

    async def _event(self, session: _Session, kind: str, data: dict[str, Any] | None = None) -> None:
        event = {"type": kind, "seq": next(session.seq), "time": 0, "data": data or {}}
        await self._notify("session.event", {"sessionId": session.id, "event": event})

    async def _status(self, session: _Session, status: str) -> None:
        await self._notify("session.status", {"sessionId": session.id, "status": status})

    async def _open(self, session_id: str) -> _Session:
        if not session_id:
            raise RpcError(ERROR, "cannot encode an empty path segment")
        if session_id in self.persisted:
            raise RpcError(ERROR, f'session "{session_id}" already exists')
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = _Session(session_id)
            for kind in ("permission/preset", "sandbox/mode", "approval/policy"):
                await self._event(session, kind)
        return session

    # ---- handlers -----------------------------------------------------------------------------

    async def _initialize(self, params: dict[str, Any]) -> Any:
        return {"serverInfo": {"name": "scripted-runtime", "version": "0"}}

    async def _shutdown(self, params: dict[str, Any]) -> Any:
        return {}

    async def _unknown_method(self, params: dict[str, Any]) -> Any:  # what 0.2.1-rc.2 answers
        raise RpcError(ERROR, "unknown DeepSeek Harness SDK runtime method: session/query")

    async def _resume(self, params: dict[str, Any]) -> Any:
        session_id = params.get("sessionId")
        if session_id in self.sessions:
            raise RpcError(ERROR, f"SDK session is already open or opening: {session_id}")
        if session_id not in self.persisted:
            raise RpcError(ERROR, f'session "{session_id}" not found')
        self.persisted.discard(session_id)
        self.sessions[session_id] = _Session(session_id, seq=itertools.count(18), turn=1)
        return {}

    async def _get_cwd(self, params: dict[str, Any]) -> Any:
        return {"cwd": (await self._open(params["sessionId"])).cwd}

    async def _set_cwd(self, params: dict[str, Any]) -> Any:
        session = await self._open(params["sessionId"])
        path = params["path"]
        session.cwd = path if path.startswith("/") else f"{session.cwd.rstrip('/')}/{path}"
        await self._event(session, "working-directory/change", {"cwd": session.cwd})
        return {"cwd": session.cwd}

    async def _prompt(self, params: dict[str, Any]) -> Any:
        session = await self._open(params["sessionId"])
        blocks = params["contentBlocks"]
        text = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        message_id = str(uuid.uuid4())
        message = {"id": message_id, "role": "user", "content": blocks, "source": {"kind": "user"}}
        await self._event(session, "agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [message]})
        session.queue.append((message_id, text))
        if not session.running:
            session.running = True
            await self._status(session, "running")
            assert self._nursery is not None
            self._nursery.start_soon(self._drive, session)
        return {"messageId": message_id}

    async def _wait(self, params: dict[str, Any]) -> Any:
        session = self.sessions.get(params.get("sessionId", ""))
        if session is None:
            raise RpcError(ERROR, f"unknown SDK session: {params.get('sessionId')}")
        while not session.settled:
            await session.changed.wait()
        return {}

    # ---- turns --------------------------------------------------------------------------------

    async def _drive(self, session: _Session) -> None:
        while session.queue:
            message_id, text = session.queue.pop(0)
            await self._turn(session, message_id, text)
        session.running = False
        await self._status(session, "idle")
        session.poke()

    async def _turn(self, session: _Session, message_id: str, text: str,
                    source: str = "user", reply: str | None = None) -> None:
        session.turn += 1
        turn = session.turn
        await self._event(session, "turn/start", {"turn": turn})
        await self._event(session, "agent/inbox/spliced", {"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []})
        await trio.lowlevel.checkpoint()
        await self._event(session, "step/start", {"turn": turn, "step": 1})
        await self._event(session, "user/message", {"id": message_id, "role": "user",
                                                   "content": [{"type": "text", "text": text}], "source": {"kind": source}})
        if "HANGUP" in text and source == "user":
            await trio.sleep(0.05)
            await self._server_stream.send_stream.aclose()
            await trio.sleep_forever()
        if "MALFORMED" in text and source == "user":
            await self._notify("session.event", {"sessionId": session.id, "event": {"type": "x", "seq": "seven"}})
        if "SLOW" in text and source == "user":
            await trio.sleep(self.slow_seconds)
        if "FAIL" in text and source == "user":
            error = {"message": "fake model: internal server error", "code": "SERVER", "status": 500}
            await self._event(session, "assistant/attempt", {"turn": turn, "step": 1, "stream": []})
            await self._event(session, "step/end", {"turn": turn, "step": 1})
            await self._event(session, "turn/end", {"turn": turn, "reason": {"kind": "error", "error": error}})
            return
        if "SPAWN" in text and source == "user":
            await self._spawn(session, turn)
            return
        await self._assistant(session, turn, reply if reply is not None else f"echo: {text}")
        await self._event(session, "step/end", {"turn": turn, "step": 1})
        await self._event(session, "turn/end", {"turn": turn, "reason": {"kind": "completed"}})

    async def _assistant(self, session: _Session, turn: int, text: str) -> None:
        message = {"id": str(uuid.uuid4()), "role": "assistant", "content": [{"type": "text", "text": text}],
                   "source": {"kind": "model", "provider": "deepseek-official", "model": "fake"}}
        await self._event(session, "assistant/message", {"turn": turn, "step": 1, "message": message, "stream": []})

    async def _spawn(self, root: _Session, turn: int) -> None:
        child = _Session(str(uuid.uuid4()), seq=itertools.count(3))
        self.sessions[child.id] = child
        root.children_active += 1
        await self._event(root, "tool/call", {"turn": turn, "step": 1, "callId": "c1", "name": "subagent", "arguments": "{}"})
        await self._notify("subagent.started", {"parentSessionId": root.id, "childSessionId": child.id})
        await self._event(child, "agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [
            {"id": str(uuid.uuid4()), "role": "user", "content": [], "source": {"kind": "user"}}]})
        await self._status(child, "running")
        await self._event(root, "tool/result", {"turn": turn, "step": 1, "message": {"id": "r1", "role": "tool", "content": []}})
        await self._assistant(root, turn, "Tool finished: c1")
        await self._event(root, "step/end", {"turn": turn, "step": 1})
        await self._event(root, "turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        assert self._nursery is not None
        self._nursery.start_soon(self._child, root, child)

    async def _child(self, root: _Session, child: _Session) -> None:
        await trio.sleep(0.05)  # the root goes idle first, as observed
        await self._event(child, "turn/start", {"turn": 1})
        await self._assistant(child, 1, "child-done")
        await self._event(child, "turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        await self._status(child, "idle")
        notice = str(uuid.uuid4())
        await self._event(root, "agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [
            {"id": notice, "role": "user", "content": [], "source": {"kind": "subagent-settled"}}]})
        root.children_active -= 1
        root.running = True
        await self._status(root, "running")
        await self._notify("subagent.finished", {
            "provider": "spawn", "agentId": child.id, "parentSessionId": root.id, "childSessionId": child.id,
            "status": "ok", "stopReason": "completed", "lastAssistantMessage": [{"type": "text", "text": "child-done"}]})
        await self._turn(root, notice, "Background subagent finished", source="subagent-settled",
                         reply="after subagents")
        root.running = False
        await self._status(root, "idle")
        root.poke()

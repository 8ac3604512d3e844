"""A fast fake runtime for W3 (many sessions): session/prompt + session/wait, 50 events each.

Stdlib only (orjson when available). Speaks newline-delimited JSON-RPC on stdin/stdout:

* ``initialize``: answers a ``serverInfo``; ``shutdown``: answers ``{}`` and exits 0;
* ``session/prompt``: writes the receipt (``agent/inbox/spliced`` inserting the new message
  id), ``session.status running`` and ``turn/start``, then answers ``{messageId}``. The rest
  of the turn is streamed afterwards, interleaved round-robin with every other active session
  (one notification per session per round, whenever no request is waiting on stdin):
  ``step/start``, the prompt's ``user/message``, filler events (real 300-1,500 byte frames
  from the transcripts, re-addressed to the session: system messages, retries, tool calls and
  results, context messages, splices), an ``assistant/message`` saying ``done <session id>``,
  ``step/end``, ``turn/end {kind: completed}`` and ``session.status idle``: 50 notifications
  per prompt in all (``--events``);
* ``session/wait``: answered ``{}`` right after that session's idle (at once if it is idle);
* anything else: ``{}``.

It exits on stdin EOF. Its own CPU is not part of any client's figure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import select
import sys
import uuid
from collections import deque
from pathlib import Path
from typing import Any

try:
    from orjson import dumps as _dumps, loads
except ImportError:  # pragma: no cover
    loads = json.loads

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

EVENTS_FILE = Path(__file__).resolve().parent / "data" / "session_events.jsonl"
FILLER_TYPES = {"system/message", "assistant/attempt", "llm/retry", "approval/asked", "tool/call",
                "tool/result", "user/message", "agent/inbox/spliced"}
FIXED = 9  # receipt, running, turn/start, step/start, user/message, assistant, step/end, turn/end, idle


def filler_events() -> list[dict[str, Any]]:
    """Event objects that do not change a turn's outcome (no user prompt, no assistant message)."""
    out = []
    for line in EVENTS_FILE.read_bytes().splitlines():
        event = json.loads(line)["params"]["event"]
        if event["type"] not in FILLER_TYPES:
            continue
        if event["type"] == "user/message" and event["data"].get("source", {}).get("kind") == "user":
            continue
        out.append(event)
    return out


class Fake:
    def __init__(self, events_per_prompt: int) -> None:
        self.filler = itertools.cycle(filler_events())
        self.filler_count = max(0, events_per_prompt - FIXED)
        self.out = bytearray()
        self.active: deque[tuple[str, deque[bytes]]] = deque()
        self.seqs: dict[str, itertools.count[int]] = {}
        self.idle: set[str] = set()
        self.waits: dict[str, list[Any]] = {}

    def frame(self, value: dict[str, Any]) -> bytes:
        return _dumps(value) + b"\n"

    def event(self, session_id: str, kind: str, data: dict[str, Any]) -> bytes:
        seq = next(self.seqs[session_id])
        return self.frame({"jsonrpc": "2.0", "method": "session.event", "params": {
            "sessionId": session_id, "event": {"type": kind, "seq": seq, "time": 1796109037500, "data": data}}})

    def status(self, session_id: str, status: str) -> bytes:
        return self.frame({"jsonrpc": "2.0", "method": "session.status",
                           "params": {"sessionId": session_id, "status": status}})

    def reply(self, request_id: Any, result: Any) -> None:
        self.out += self.frame({"jsonrpc": "2.0", "id": request_id, "result": result})

    def prompt(self, request_id: Any, params: dict[str, Any]) -> None:
        sid = params["sessionId"]
        self.seqs.setdefault(sid, itertools.count(3))
        self.idle.discard(sid)
        message_id = str(uuid.uuid4())
        message = {"id": message_id, "role": "user", "content": params.get("contentBlocks", []),
                   "source": {"kind": "user"}}
        self.out += self.event(sid, "agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [message]})
        self.out += self.status(sid, "running")
        self.out += self.event(sid, "turn/start", {"turn": 1})
        self.reply(request_id, {"messageId": message_id})
        rest: deque[bytes] = deque()
        rest.append(self.event(sid, "step/start", {"turn": 1, "step": 1}))
        rest.append(self.event(sid, "user/message", message))
        for _ in range(self.filler_count):
            filler = next(self.filler)
            rest.append(self.event(sid, filler["type"], filler["data"]))
        rest.append(self.event(sid, "assistant/message", {"turn": 1, "step": 1, "message": {
            "id": str(uuid.uuid4()), "role": "assistant", "content": [{"type": "text", "text": f"done {sid}"}],
            "source": {"kind": "model", "provider": "deepseek-official", "model": "fake"}}, "stream": []}))
        rest.append(self.event(sid, "step/end", {"turn": 1, "step": 1}))
        rest.append(self.event(sid, "turn/end", {"turn": 1, "reason": {"kind": "completed"}}))
        rest.append(self.status(sid, "idle"))
        self.active.append((sid, rest))

    def wait(self, request_id: Any, params: dict[str, Any]) -> None:
        sid = params.get("sessionId", "")
        if sid in self.idle or sid not in self.seqs:
            self.reply(request_id, {})
        else:
            self.waits.setdefault(sid, []).append(request_id)

    def tick(self) -> None:
        """One round: the next notification of every active session."""
        for _ in range(len(self.active)):
            sid, rest = self.active.popleft()
            self.out += rest.popleft()
            if rest:
                self.active.append((sid, rest))
            else:
                self.idle.add(sid)
                for request_id in self.waits.pop(sid, []):
                    self.reply(request_id, {})

    def flush(self) -> None:
        data, self.out = self.out, bytearray()
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50, help="notifications per prompt (>= 9)")
    fake = Fake(parser.parse_args().events)
    buffer = b""
    while True:
        timeout = 0 if fake.active else None
        readable, _, _ = select.select([0], [], [], timeout)
        if readable:
            data = os.read(0, 1 << 20)
            if not data:
                return 0
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                try:
                    frame = loads(raw)
                except ValueError:
                    continue
                if not isinstance(frame, dict) or "id" not in frame or "method" not in frame:
                    continue
                method, request_id, params = frame["method"], frame["id"], frame.get("params") or {}
                if method == "session/prompt":
                    fake.prompt(request_id, params)
                elif method == "session/wait":
                    fake.wait(request_id, params)
                elif method == "initialize":
                    fake.reply(request_id, {"serverInfo": {"name": "w3-fake-runtime", "version": "0"}})
                elif method == "shutdown":
                    fake.reply(request_id, {})
                    fake.flush()
                    return 0
                else:
                    fake.reply(request_id, {})
        else:
            fake.tick()
        fake.flush()


if __name__ == "__main__":
    sys.exit(main())

"""Replays a recorded wire transcript through the session layer's pure parts, without processes.

``replay(name)`` does for every ``session/prompt`` in the transcript what ``Session.run`` does:
subscribe to the session tree (a real :class:`SessionRouter`) when the prompt is sent, learn the
``messageId`` from the prompt's response, and when the next ``session/wait`` response for that
session arrives, feed everything buffered so far to a :class:`TurnCollector`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import trio

from dsh_orchestra.protocol import SESSION_PROMPT, SESSION_WAIT
from dsh_orchestra.session import SessionRouter, TurnCollector, TurnResult
from dsh_orchestra.transport import Notification, Subscription

TRANSCRIPTS = Path(os.environ.get("DSH_TRANSCRIPTS", Path(__file__).parent.parent / "protocol" / "transcripts"))


def records(name: str) -> list[dict[str, Any]]:
    """The transcript's lines as dicts (``dir``, ``t``, ``frame``)."""
    path = TRANSCRIPTS / name
    assert path.is_file(), f"recorded transcript {path} is missing (tests/protocol/transcripts holds copies)"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def notifications(name: str) -> list[Notification]:
    """Every server-to-client notification of the transcript, in wire order."""
    out = []
    for record in records(name):
        frame = record["frame"]
        if record["dir"] == "s2c" and isinstance(frame, dict) and "method" in frame and "id" not in frame:
            out.append(Notification(frame["method"], frame.get("params") or {}))
    return out


@attrs.define
class _Run:
    session_id: str
    prompt_text: str
    subscription: Subscription
    message_id: str | None = None


@attrs.frozen
class Replayed:
    """One prompt of the transcript and the TurnResult the session layer computed for it."""

    session_id: str
    prompt_text: str
    message_id: str
    result: TurnResult


def replay(name: str) -> list[Replayed]:
    """Run every prompt of transcript ``name`` through a router and a collector, in prompt order."""
    router = SessionRouter()
    requests: dict[Any, tuple[str, dict[str, Any]]] = {}
    runs: dict[Any, _Run] = {}  # prompt request id -> run
    done: list[Replayed] = []
    for record in records(name):
        frame = record["frame"]
        if not isinstance(frame, dict):
            continue
        if record["dir"] == "c2s":
            if "method" in frame and "id" in frame:
                params = frame.get("params") or {}
                requests[frame["id"]] = (frame["method"], params)
                if frame["method"] == SESSION_PROMPT:
                    text = " ".join(b.get("text", "") for b in params.get("contentBlocks") or [])
                    runs[frame["id"]] = _Run(params["sessionId"], text, router.subscribe(params["sessionId"]))
            continue
        if "method" in frame and "id" not in frame:
            router.push(Notification(frame["method"], frame.get("params") or {}))
            continue
        method, params = requests.get(frame.get("id"), ("", {}))
        if method == SESSION_PROMPT:
            run = runs[frame["id"]]
            if "error" in frame:
                run.subscription.close()
                del runs[frame["id"]]
            else:
                run.message_id = frame["result"]["messageId"]
        elif method == SESSION_WAIT and "result" in frame:
            for request_id, run in list(runs.items()):
                if run.session_id != params.get("sessionId") or run.message_id is None:
                    continue
                collector = TurnCollector(run.session_id, run.message_id)
                while True:
                    try:
                        collector.feed(run.subscription.receive_nowait())
                    except trio.WouldBlock:
                        break
                run.subscription.close()
                del runs[request_id]
                done.append(Replayed(run.session_id, run.prompt_text, run.message_id,
                                     collector.result(duration=0.0)))
    return done

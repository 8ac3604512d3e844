"""A fake runtime process for the foundation benchmarks: stdlib only, as fast as it can be.

Speaks newline-delimited JSON-RPC on stdin/stdout like ``dsh --profile sdk``:

* ``bench/blast`` ``{"count": N}``: answers ``{}`` at once, then writes N pre-encoded
  ``session.event`` notifications (real frames from the transcripts, 300-1,500 bytes,
  cycled) in large writes, as fast as the pipe takes them;
* ``session/prompt`` (W1 through the session API): answers ``{"messageId": "m-<n>"}``; a text
  ``blast N`` is followed by N ``session.event`` notifications of that session (the same real
  frames, their ``sessionId`` rewritten) written as fast as the pipe takes them; ``pace N U``
  by N of them written one at a time every U microseconds, each stamped with the sender's
  ``time.monotonic_ns()`` in ``params.event.data.sentNs`` just before its write (latency);
* ``initialize``: answers a ``serverInfo``;
* ``shutdown``: answers ``{}`` and exits 0;
* any other request: answers ``{}`` at once (the W2 round-trip peer).

It exits on stdin EOF. Notifications from the client are ignored, like the real runtime.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import BLAST, event_lines  # noqa: E402

try:  # the peer's own parsing cost is part of every client's figure; keep it small
    from orjson import loads
except ImportError:  # pragma: no cover
    loads = json.loads

WRITE_CHUNK = 1 << 20


def write_all(data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def blast(count: int, lines: list[bytes]) -> None:
    cycle = b"".join(lines)
    repeat = max(1, WRITE_CHUNK // len(cycle))
    chunk, per_chunk = cycle * repeat, len(lines) * repeat
    full, rest = divmod(count, per_chunk)
    for _ in range(full):
        write_all(chunk)
    rest_cycles, rest_lines = divmod(rest, len(lines))
    write_all(cycle * rest_cycles + b"".join(lines[:rest_lines]))


def session_lines(lines: list[bytes], session_id: str) -> list[bytes]:
    """The frames with ``params.sessionId`` set to ``session_id``."""
    out = []
    for line in lines:
        frame = loads(line)
        frame["params"]["sessionId"] = session_id
        out.append(json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    return out


def pace(count: int, interval_us: int, lines: list[bytes], session_id: str) -> None:
    """``count`` single writes every ``interval_us``, each stamped just before it is written."""
    frames = [loads(line) for line in session_lines(lines, session_id)]
    for frame in frames:
        frame["params"]["event"].setdefault("data", {})
    step = interval_us * 1000
    due = time.monotonic_ns()
    for index in range(count):
        frame = frames[index % len(frames)]
        due += step
        while (now := time.monotonic_ns()) < due:
            delay = (due - now) / 1e9
            if delay > 0.0002:
                time.sleep(delay - 0.0001)
        frame["params"]["event"]["data"]["sentNs"] = time.monotonic_ns()
        write_all(json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")


def prompt(frame: dict, lines: list[bytes], counter: list[int]) -> None:
    params = frame.get("params") or {}
    session_id = params.get("sessionId", "s1")
    counter[0] += 1
    request_id = json.dumps(frame["id"])
    write_all(f'{{"jsonrpc":"2.0","id":{request_id},"result":{{"messageId":"m-{counter[0]}"}}}}\n'.encode())
    blocks = params.get("contentBlocks") or [{}]
    words = str(blocks[0].get("text", "")).split()
    if words[:1] == ["blast"]:
        blast(int(words[1]), session_lines(lines, session_id))
    elif words[:1] == ["pace"]:
        pace(int(words[1]), int(words[2]), lines, session_id)


def main() -> int:
    lines = event_lines()
    counter = [0]
    stdin = sys.stdin.buffer
    while True:
        raw = stdin.readline()
        if not raw:
            return 0
        try:
            frame = loads(raw)
        except ValueError:
            continue
        if not isinstance(frame, dict) or "id" not in frame or "method" not in frame:
            continue
        method, request_id = frame["method"], json.dumps(frame["id"])
        if method == "session/prompt":
            prompt(frame, lines, counter)
            continue
        result = '{"serverInfo":{"name":"fake-runtime","version":"0"}}' if method == "initialize" else "{}"
        write_all(f'{{"jsonrpc":"2.0","id":{request_id},"result":{result}}}\n'.encode())
        if method == BLAST:
            params = frame.get("params") or {}
            blast(int(params.get("count", 100_000)), lines)
        elif method == "shutdown":
            return 0


if __name__ == "__main__":
    sys.exit(main())

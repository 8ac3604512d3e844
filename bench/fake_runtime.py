"""A fake runtime process for the foundation benchmarks: stdlib only, as fast as it can be.

Speaks newline-delimited JSON-RPC on stdin/stdout like ``dsh --profile sdk``:

* ``bench/blast`` ``{"count": N}``: answers ``{}`` at once, then writes N pre-encoded
  ``session.event`` notifications (real frames from the transcripts, 300-1,500 bytes,
  cycled) in large writes, as fast as the pipe takes them;
* ``initialize``: answers a ``serverInfo``;
* ``shutdown``: answers ``{}`` and exits 0;
* any other request: answers ``{}`` at once (the W2 round-trip peer).

It exits on stdin EOF. Notifications from the client are ignored, like the real runtime.
"""

from __future__ import annotations

import json
import os
import sys

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


def main() -> int:
    lines = event_lines()
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
        result = '{"serverInfo":{"name":"fake-runtime","version":"0"}}' if method == "initialize" else "{}"
        write_all(f'{{"jsonrpc":"2.0","id":{request_id},"result":{result}}}\n'.encode())
        if method == BLAST:
            params = frame.get("params") or {}
            blast(int(params.get("count", 100_000)), lines)
        elif method == "shutdown":
            return 0


if __name__ == "__main__":
    sys.exit(main())

"""A stand-in runtime that floods its stdout on request (stdlib only; the frame-limit tests).

Run as ``python flood_runtime.py``. It answers ``initialize``; ``test/endless`` is never
answered: it writes one line without a newline, forever (until the pipe breaks or a signal
ends it); ``test/oversized`` ``{"size": N}`` writes one notification line of about N bytes,
newline included, and is never answered. It ignores stdin EOF while it writes (it is busy
writing), so only the signals of the close ladder end it.
"""

from __future__ import annotations

import json
import os
import sys

CHUNK = b"x" * (1 << 20)


def write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def main() -> int:
    for raw in sys.stdin.buffer:
        frame = json.loads(raw)
        method, request_id = frame.get("method"), frame.get("id")
        if method == "initialize":
            write_all(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {}}).encode() + b"\n")
        elif method == "test/endless":
            write_all(b'{"jsonrpc":"2.0","method":"x","params":{"pad":"')
            while True:
                write_all(CHUNK)
        elif method == "test/oversized":
            size = int(frame["params"]["size"])
            write_all(b'{"jsonrpc":"2.0","method":"x","params":{"pad":"')
            for _ in range(size // len(CHUNK) + 1):
                write_all(CHUNK)
            write_all(b'"}}\n')
        elif method == "shutdown":
            write_all(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {}}).encode() + b"\n")
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

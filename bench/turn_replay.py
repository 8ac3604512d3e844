"""One real-runtime turn replayed frame by frame: client instructions per turn, deterministic.

    valgrind --tool=callgrind --trace-children=no python bench/turn_replay.py --client ours --turns 5
    valgrind --tool=callgrind --trace-children=no python bench/turn_replay.py --client ours --turns 25

``bench/data/w4_turn.jsonl`` is one sequential W4 turn as the real runtime 0.2.1-rc.2 wrote it
(scripted model): four notifications and the ``session/prompt`` reply, then seven
notifications and the ``session/wait`` reply. A stdlib peer process (this file with
``--peer``) answers ``initialize``, and for each prompt / wait writes those frames, each on its
own, ``--spacing-ms`` apart (20 ms: every frame is one read of the client even under
callgrind, which the real runtime's 0.2–15 ms gaps do not guarantee), with the session and
message ids rewritten. The client is ``ours`` (``Session.run`` over
``open_runtime(RuntimeSpec(command=...))``) or ``raw`` (the connection's two requests).

The difference of two runs' instruction totals divided by the difference of their turns is
the client's cost per turn (startup cancels out). One JSON line: frames, lent reads, CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TURN = Path(__file__).resolve().parent / "data" / "w4_turn.jsonl"
PROMPT = "Reply with one short sentence."
REPLY = "Hello from the fake model"


def peer(spacing: float) -> None:
    """The replaying runtime: stdin requests, stdout frames."""
    lines = TURN.read_bytes().splitlines()
    session = json.loads(lines[0])["params"]["sessionId"].encode()
    message = json.loads(lines[4])["result"]["messageId"].encode()
    before, after = lines[:4], lines[5:12]
    prompts = 0
    ids = (session, message)

    def write(line: bytes, pause: bool = True) -> None:
        os.write(1, line + b"\n")
        if pause:
            time.sleep(spacing)

    def answer(ident: Any, result: Any) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()

    for raw in sys.stdin.buffer:
        request = json.loads(raw)
        ident, method, params = request.get("id"), request.get("method"), request.get("params") or {}
        if ident is None:
            continue
        if method == "session/prompt":
            prompts += 1
            ids = (params["sessionId"].encode(), b"m-%032d" % prompts)
            for line in before:
                write(line.replace(session, ids[0]).replace(message, ids[1]))
            write(answer(ident, {"messageId": ids[1].decode()}))
        elif method == "session/wait":
            for line in after:
                write(line.replace(session, ids[0]).replace(message, ids[1]))
            write(answer(ident, {}))
        elif method == "initialize":
            write(answer(ident, {"serverInfo": {"name": "turn-replay", "version": "0"}}), pause=False)
        else:
            write(answer(ident, {}), pause=False)
            if method == "shutdown":
                return


def client(kind: str, turns: int, spacing_ms: float) -> dict[str, Any]:
    import trio

    from dsh_orchestra.protocol import SESSION_PROMPT, SESSION_WAIT, EmptyResult, PromptResult
    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.session import open_runtime

    async def main(home: str) -> dict[str, Any]:
        command = (sys.executable, __file__, "--peer", "--spacing-ms", str(spacing_ms))
        spec = RuntimeSpec(command=command, dsh_home=home, env={"DSH_TELEMETRY_MODE": "DISABLED"})
        async with open_runtime(spec) as runtime:
            session = runtime.session()
            cpu = time.process_time()
            for _ in range(turns):
                if kind == "raw":
                    connection = runtime.connection
                    await connection.request(SESSION_PROMPT, {"sessionId": session.id, "contentBlocks": [
                        {"type": "text", "text": PROMPT}]}, PromptResult)
                    await connection.request(SESSION_WAIT, {"sessionId": session.id}, EmptyResult)
                else:
                    result = await session.run(PROMPT)
                    if result.final_response != REPLY:
                        raise AssertionError(f"unexpected turn: {result.final_response!r}")
            cpu = time.process_time() - cpu
            stats = runtime.connection.statistics()
        return {"workload": "turn-replay", "client": kind, "turns": turns, "frames": stats.frames_received,
                "lent_reads": stats.lent_reads, "cpu_ms_per_turn": cpu * 1000 / max(turns, 1)}

    with tempfile.TemporaryDirectory() as home:
        return trio.run(main, home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("ours", "raw"), default="ours")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--spacing-ms", type=float, default=20.0)
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.turns < 1 or args.spacing_ms < 0:
        parser.error("--turns must be at least 1 and --spacing-ms not negative")
    if args.peer:
        peer(args.spacing_ms / 1000)
    else:
        print(json.dumps(client(args.client, args.turns, args.spacing_ms)))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()

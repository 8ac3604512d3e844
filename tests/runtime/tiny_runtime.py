"""A tiny stand-in runtime process for the runtime-actor tests (stdlib only).

Run as ``python tiny_runtime.py MODE``. It speaks newline-delimited JSON-RPC on stdio.

Modes:

* ``ok``: answers ``initialize`` (once the file ``TINY_INIT_GATE`` exists, when that names
  one; the ``initialize`` is recorded before), ``shutdown`` (then
  exits 0), ``test/crash`` (writes ``params.stderr`` to stderr, exits ``params.code``),
  ``test/spawn`` (starts a grandchild sleeper in its process group, answers its pid),
  ``test/stderr`` (writes ``params.text`` to stderr), ``test/hang*`` (never answered);
  anything else ``{}``. Exits 0 on stdin EOF. The grandchild of ``test/spawn`` inherits
  stdout, so after a crash the pipe stays open (no EOF) until the group is killed.
* ``stubborn``: like ``ok`` but never answers ``shutdown`` and ignores stdin EOF; with
  ``TINY_IGNORE_TERM=1`` it also ignores SIGTERM (only SIGKILL ends it).
* ``silent``: never answers anything (a hung handshake).
* ``reject``: echoes ``DEEPSEEK_API_KEY`` and ``MY_SERVICE_TOKEN`` to stderr, then answers
  ``initialize`` with an error whose message holds the key too.
* ``die``: writes ``fatal: key=<DEEPSEEK_API_KEY>`` to stderr and exits 3 before answering.
* ``flaky``: the first start (counted in the file ``TINY_COUNTER``) behaves like ``die``,
  later ones like ``ok``.

With ``TINY_RECORD=<path>`` every start appends one JSON line: the ``initialize`` params,
the process cwd, argv and the environment variables named in ``TINY_ENV_NAMES``. With
``TINY_SHUTDOWN_MARK=<path>`` the ``ok`` mode creates that file once it answered ``shutdown``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def send(frame: dict) -> None:
    sys.stdout.write(json.dumps(frame, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def record(params: dict) -> None:
    path = os.environ.get("TINY_RECORD")
    if not path:
        return
    names = [n for n in os.environ.get("TINY_ENV_NAMES", "").split(",") if n]
    line = {"initialize": params, "cwd": os.getcwd(), "argv": sys.argv, "pid": os.getpid(),
            "env": {n: os.environ.get(n) for n in names}}
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")


def die() -> None:
    sys.stderr.write(f"fatal: key={os.environ.get('DEEPSEEK_API_KEY')}\n")
    sys.stderr.flush()
    sys.exit(3)


def main() -> int:
    mode = sys.argv[1]
    if mode == "flaky":
        counter = os.environ["TINY_COUNTER"]
        starts = int(open(counter).read() or "0") if os.path.exists(counter) else 0
        with open(counter, "w") as file:
            file.write(str(starts + 1))
        mode = "die" if starts == 0 else "ok"
    if mode == "die":
        die()
    if mode == "stubborn" and os.environ.get("TINY_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "reject":
        sys.stderr.write(f"using key {os.environ.get('DEEPSEEK_API_KEY')} "
                         f"and token {os.environ.get('MY_SERVICE_TOKEN')}\n")
        sys.stderr.flush()
    for raw in sys.stdin:
        try:
            frame = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(frame, dict) or "id" not in frame or "method" not in frame:
            continue
        if mode == "silent":
            continue
        method, request_id, params = frame["method"], frame["id"], frame.get("params") or {}
        if method == "initialize":
            record(params)
            if mode == "reject":
                key = os.environ.get("DEEPSEEK_API_KEY")
                send({"jsonrpc": "2.0", "id": request_id,
                      "error": {"code": -32603, "message": f"bad credentials {key}"}})
                continue
            gate = os.environ.get("TINY_INIT_GATE")
            while gate and not os.path.exists(gate):
                time.sleep(0.01)
            send({"jsonrpc": "2.0", "id": request_id,
                  "result": {"serverInfo": {"name": "tiny-runtime", "version": "0"}}})
        elif method == "shutdown":
            if mode == "stubborn":
                continue
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
            if mark := os.environ.get("TINY_SHUTDOWN_MARK"):
                open(mark, "w").close()
            return 0
        elif method == "test/crash":
            sys.stderr.write(params.get("stderr", "") + "\n")
            sys.stderr.flush()
            os._exit(int(params.get("code", 1)))
        elif method.startswith("test/hang"):
            continue
        elif method == "test/stderr":
            sys.stderr.write(params["text"] + "\n")
            sys.stderr.flush()
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif method == "test/spawn":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            send({"jsonrpc": "2.0", "id": request_id, "result": {"pid": child.pid}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
    if mode == "stubborn":  # stdin EOF: keep running until a signal
        while True:
            time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())

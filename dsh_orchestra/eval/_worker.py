"""The scorer worker process (``python -m dsh_orchestra.eval._worker``; see ``_workers``).

Reads length-prefixed pickled requests ``(function, item, result)`` on stdin and answers each
with length-prefixed JSON: ``{"record": ...}`` (checked and capped) or ``{"error": "..."}``.
What the scorer prints goes to stderr (file descriptor 1 is stderr here; replies go to a
private copy of the original stdout), and it reads nothing (stdin is /dev/null for it).
"""

from __future__ import annotations

import inspect
import os
import pickle
import struct
import sys
from typing import Any, BinaryIO, Callable

import orjson

_HEADER = struct.Struct("!I")


def _read(stream: BinaryIO, count: int) -> bytes | None:
    data = b""
    while len(data) < count:
        chunk = stream.read(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _score(functions: dict[str, Callable[..., Any]], function: str, item: Any, result: Any) -> dict[str, Any]:
    from ._apply import _is_async, load_function
    from ._checked import USER_ERRORS, checked_record, describe_error

    try:
        fn = functions.get(function)
        if fn is None:
            fn = functions[function] = load_function(function)
        if _is_async(fn):
            import trio

            value = trio.run(_awaited, fn, item, result)
        else:
            value = fn(item, result)
            if inspect.isawaitable(value):
                import trio

                value = trio.run(_await, value)
        return {"record": checked_record(value, function)}
    except USER_ERRORS as exc:
        return {"error": describe_error(exc)}


async def _awaited(fn: Callable[..., Any], item: Any, result: Any) -> Any:
    return await fn(item, result)


async def _await(value: Any) -> Any:
    return await value


def main() -> None:
    """Serve requests until stdin ends."""
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # what user code prints goes to stderr
    sys.stdout = sys.stderr
    from . import _apply, _checked  # noqa: F401 - imported before "ready": not on a call's clock

    ready = orjson.dumps({"ready": True})
    replies.write(_HEADER.pack(len(ready)) + ready)
    functions: dict[str, Callable[..., Any]] = {}
    me = os.getpid()
    while True:
        header = _read(requests, _HEADER.size)
        if header is None:
            return
        payload = _read(requests, _HEADER.unpack(header)[0])
        if payload is None:
            return
        try:
            function, item, result = pickle.loads(payload)
            reply = _score(functions, function, item, result)
            if os.getpid() != me:  # a fork of the scorer's returned here: it must not answer
                os._exit(0)
            encoded = orjson.dumps(reply)
        except Exception as exc:  # noqa: BLE001 - a request that cannot be served is that call's error
            encoded = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"})
        replies.write(_HEADER.pack(len(encoded)) + encoded)


if __name__ == "__main__":
    main()

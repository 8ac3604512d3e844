"""Helpers of the gateway tests: a gateway in front of the fake model, and a request body."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import trio

from dsh_orchestra.gateway import Gateway, GatewayOptions, ResponseCache

REAL_KEY = "sk-real-key-for-gateway-tests-0123456789"
BASE_ENV = {"DSH_TELEMETRY_MODE": "DISABLED", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
"""As tests/conftest.py's (not imported from there: another directory's conftest may own that name)."""


def body(prompt: str = "hello", **extra: Any) -> dict[str, Any]:
    """A /v1/messages body like the runtime's (volatile extensions included)."""
    return {"model": "deepseek-v4-flash", "stream": True, "max_tokens": 1000, "system": "sys",
            "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}], **extra}


@asynccontextmanager
async def running_gateway(upstream: str, options: GatewayOptions | None = None, *, api_key: str | None = REAL_KEY,
                          cache: ResponseCache | None = None) -> AsyncIterator[Gateway]:
    gateway = Gateway(options, upstream=upstream, api_key=api_key, cache=cache)
    async with trio.open_nursery() as nursery:
        await nursery.start(gateway.run)
        yield gateway
        nursery.cancel_scope.cancel()


def write_dataset(path: Path, items: list[dict[str, Any]]) -> Path:
    """A JSONL dataset of ``items``."""
    import json

    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return path

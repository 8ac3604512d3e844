"""The gateway's start: it reports listening before it makes its TLS context (about 0.06 s
of loading the CA bundle), so the runtimes it routes can be spawned meanwhile; the context is
still made once and shared by every runtime connection's upstream client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from dsh_orchestra.gateway import Gateway
from dsh_orchestra.testing._fake_model import FakeModelServer

from gateway_support import REAL_KEY, body


class _Status:
    """A task status that records when the gateway said it was listening."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.listening = trio.Event()

    def started(self, value: Any = None) -> None:
        self.order.append("listening")
        self.listening.set()


async def test_the_gateway_listens_before_its_tls_context_and_makes_it_once(
        fake_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    made: list[object] = []
    real = httpx.create_ssl_context

    def recorded(*args: Any, **kwargs: Any) -> Any:
        order.append("tls")
        context = real(*args, **kwargs)
        made.append(context)
        return context

    monkeypatch.setattr(httpx, "create_ssl_context", recorded)
    gateway = Gateway(upstream=fake_model.base_url, api_key=REAL_KEY)
    status = _Status(order)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: gateway.run(task_status=status))  # type: ignore[arg-type]
            await status.listening.wait()
            url = gateway.base_url  # known once listening
            answers = []
            for session in ("a", "b"):  # two runtime connections, one upstream client each
                async with httpx.AsyncClient(trust_env=False) as client:
                    response = await client.post(
                        url + "/v1/messages", content=json.dumps(body("hello")),
                        headers={"x-api-key": gateway.token, "x-deepseek-harness-session-id": session})
                    answers.append(response.status_code)
            nursery.cancel_scope.cancel()
    assert answers == [200, 200]
    assert order == ["listening", "tls"]  # listening first; the context once, shared
    assert len(made) == 1

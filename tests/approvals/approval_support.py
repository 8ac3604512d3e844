"""Helpers of the approvals and questions tests: the shared scenario, the wire recorder, event access."""

from __future__ import annotations

import tomllib
from typing import Any

import orjson
import trio

from dsh_orchestra.testing._script import parse_script
from dsh_orchestra.testing._simulator import SimulatedRuntime


def _escalation(n: int) -> str:
    return (f'{{ name = "bash", input = {{ description = "step {n}", command = "true", '
            f'sandbox_permissions = "danger-full-access", justification = "step {n}" }} }}')


SCRIPT = f"""
[[rules]]
name = "deploy"
match = "DEPLOY"
reply = "deploy was {{outcome}}"
approval = {{ tool = "bash", reason = "needs network" }}

[[rules]]
name = "write"
match = "WRITE"
reply = "write was {{outcome}}"
approval = {{ tool = "write", reason = "outside the workspace" }}

[[rules]]
name = "triple"
match = "TRIPLE"
reply = "three steps done"
tools = [{_escalation(1)}, {_escalation(2)}, {_escalation(3)}]

[[rules]]
name = "parent"
match = "DELEGATE"
reply = "delegated"
after_subagents = "child reported"
spawn = [{{ description = "child deploys", prompt = "DEPLOY from the child" }}]

[[rules]]
name = "choose"
match = "CHOOSE"
reply = "picked {{answer}}"
question = {{ id = "env", question = "Which environment?", options = ["staging", "production"], header = "Deploy", detail = "staging is safe" }}

[[rules]]
name = "many"
match = "MANY"
reply = "picked {{answer}}"
question = {{ id = "langs", question = "Which languages?", options = ["python", "rust", "go"], multi_select = true }}

[[rules]]
name = "free"
match = "FREE"
reply = "named {{answer}}"
question = {{ id = "name", question = "What is the release called?" }}

[[rules]]
name = "slow-question"
match = "SLOWQ"
reply = "answered {{answer}}"
question = {{ id = "env", question = "Which environment?", options = ["staging", "production"], timeout = 0.3 }}
"""


class SimWire:
    """What passed between the client and one in-process simulator."""

    def __init__(self) -> None:
        self.runtime: SimulatedRuntime | None = None
        self.to_sim = bytearray()
        self.from_sim = bytearray()

    @staticmethod
    def _frames(data: bytes | bytearray) -> list[dict[str, Any]]:
        out = []
        for line in bytes(data).split(b"\n"):
            if line.strip():
                try:
                    frame = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(frame, dict):
                    out.append(frame)
        return out

    def sent(self) -> list[dict[str, Any]]:
        """Frames the client sent."""
        return self._frames(self.to_sim)

    def received(self) -> list[dict[str, Any]]:
        """Frames the simulator sent."""
        return self._frames(self.from_sim)

    def server_requests(self, method: str) -> list[dict[str, Any]]:
        """The simulator's requests of ``method``."""
        return [f for f in self.received() if f.get("method") == method and "id" in f]

    def replies_to(self, request_id: Any) -> list[dict[str, Any]]:
        """The client's responses to the simulator's request ``request_id``."""
        return [f for f in self.sent() if "method" not in f and f.get("id") == request_id]

    def initialize_params(self) -> dict[str, Any]:
        """The params of the client's ``initialize``."""
        frames = [f for f in self.sent() if f.get("method") == "initialize"]
        assert len(frames) == 1, frames
        params: dict[str, Any] = frames[0].get("params", {})
        return params


def script_of(text: str) -> Any:
    """A Script from TOML text."""
    return parse_script(tomllib.loads(text), source="<test>")


class RecordingStream(trio.abc.HalfCloseableStream):
    """A stream that copies every byte in both directions into a SimWire."""

    def __init__(self, inner: Any, wire: SimWire) -> None:
        self._inner = inner
        self._wire = wire

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._wire.to_sim += bytes(data)
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data: bytes = await self._inner.receive_some(max_bytes)
        self._wire.from_sim += data
        return data

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def aclose(self) -> None:
        await self._inner.aclose()


def tool_results(result: Any) -> list[dict[str, Any]]:
    """The ``tool/result`` event data of a TurnResult's root events."""
    return [e["data"] for e in result.events if e["type"] == "tool/result"]


def events_of(result: Any, kind: str) -> list[dict[str, Any]]:
    """The data of the root events of type ``kind``."""
    return [e["data"] for e in result.events if e["type"] == kind]


def result_text(data: dict[str, Any]) -> str:
    """The text of a tool/result's content."""
    return "".join(b.get("text", "") for b in data["message"]["content"] if isinstance(b, dict))

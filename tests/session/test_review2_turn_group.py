"""Adversarial cases for turn groups (review of the session's performance changes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from scripted_runtime import ScriptedRuntime

from dsh_orchestra.session import Runtime, TurnGroup, TurnResult, open_runtime
from dsh_orchestra.transport import Notification


@pytest.fixture
def scripted() -> ScriptedRuntime:
    return ScriptedRuntime()


@pytest.fixture
async def runtime(scripted: ScriptedRuntime) -> AsyncIterator[Runtime]:
    async with open_runtime(scripted.spec()) as opened:
        yield opened


async def cancelled_start_then_outcomes(runtime: Runtime, turns: TurnGroup, session_id: str) -> dict[str, Any]:
    """``turns.start`` cancelled at once (``session_id``), then every outcome the group gives."""
    with trio.CancelScope() as scope:
        scope.cancel()
        await turns.start(runtime.session(session_id), "hello")
    assert scope.cancelled_caught
    return {session.id: outcome async for session, outcome in turns}


async def test_a_start_cancelled_before_its_prompt_went_out_leaves_no_turn_in_flight(runtime: Runtime) -> None:
    """A cancelled ``start`` must not leave a turn that never settles: the iteration ends."""
    with trio.fail_after(10):
        async with runtime.turns() as turns:
            await turns.start(runtime.session("kept"), "hello")
            outcomes = await cancelled_start_then_outcomes(runtime, turns, "cancelled")
        assert set(outcomes) == {"kept"} and outcomes["kept"].ok
    assert turns.in_flight == 0 and not runtime.router._subscriptions
    assert not runtime.abandoned  # nothing of its prompt went out: the session is untouched
    assert runtime.connection.statistics().pending_requests == 0


async def test_a_start_cancelled_while_sending_a_wait_does_not_lose_that_turn(runtime: Runtime) -> None:
    """``start`` first sends the session/wait of turns whose prompt was answered; cancelled
    there, that turn still settles (its wait goes out later)."""
    with trio.fail_after(10):
        async with runtime.turns() as turns:
            await turns.start(runtime.session("first"), "hello")
            while not turns._to_wait:  # its prompt answered, its wait not sent
                await trio.testing.wait_all_tasks_blocked()
            outcomes = await cancelled_start_then_outcomes(runtime, turns, "second")
        assert set(outcomes) == {"first"} and outcomes["first"].ok
    assert turns.in_flight == 0 and runtime.connection.statistics().pending_requests == 0


async def test_two_groups_a_run_and_an_events_subscriber_on_one_runtime(runtime: Runtime) -> None:
    """Two turn groups, a ``session.run`` and a ``session.events()`` subscriber on a group's
    session, all at once: each turn gets its own outcome, the subscriber every notification
    of its session in wire order, and nothing stays attached or pending."""
    outcomes: dict[str, Any] = {}
    seen: list[Notification] = []

    async def group(prefix: str) -> None:
        async with runtime.turns() as turns:
            for name, prompt in (("spawn", "SPAWN it"), ("hello", f"hello {prefix}")):
                await turns.start(runtime.session(f"{prefix}-{name}"), prompt)
            async for session, outcome in turns:
                outcomes[session.id] = outcome

    async def run() -> None:
        outcomes["run"] = await runtime.session("run").run("hello run")

    with trio.fail_after(10):
        with runtime.session("g1-hello").events() as events:
            async with trio.open_nursery() as nursery:
                for job in (partial(group, "g1"), partial(group, "g2"), run):
                    nursery.start_soon(job)
            while events.pending():
                seen.append(events.receive_nowait())
    assert set(outcomes) == {"g1-spawn", "g1-hello", "g2-spawn", "g2-hello", "run"}
    assert all(isinstance(outcome, TurnResult) and outcome.ok for outcome in outcomes.values())
    assert outcomes["g1-hello"].final_response == "echo: hello g1" and outcomes["run"].final_response == "echo: hello run"
    assert outcomes["g1-spawn"].subagents and outcomes["g2-spawn"].final_response == "after subagents"
    # the subscriber saw every event of its session, in order, and the group's result holds
    # the turn's part of them
    seqs = [n.params["event"]["seq"] for n in seen if n.method == "session.event"]
    assert seqs == list(range(len(seqs))) and len(seqs) >= len(outcomes["g1-hello"].events)
    assert [e["seq"] for e in outcomes["g1-hello"].events] == seqs[-len(outcomes["g1-hello"].events):]
    assert not runtime.router._subscriptions and runtime.connection.statistics().pending_requests == 0


class _GatedSend(trio.abc.SendStream):
    """The client's send side, held shut while ``gate`` is set (a peer not reading)."""

    def __init__(self, inner: trio.abc.SendStream) -> None:
        self.inner = inner
        self.gate: trio.Event | None = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.gate is not None:
            await self.gate.wait()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_group_closed_while_a_wait_is_written_forgets_that_request(scripted: ScriptedRuntime) -> None:
    """``close()`` from another task while a turn's session/wait is being written: once the
    write ends, its request is forgotten (not left pending until the turn ends)."""
    gated: list[_GatedSend] = []
    inner_connect = scripted._connect

    @asynccontextmanager
    async def connect() -> AsyncIterator[Any]:
        async with inner_connect() as client:
            gated.append(_GatedSend(client.send_stream))
            yield trio.StapledStream(gated[0], client.receive_stream)

    scripted._connect = connect  # type: ignore[method-assign]
    with trio.fail_after(10):
        async with open_runtime(scripted.spec()) as runtime:
            turns = runtime.turns()
            await turns.start(runtime.session("slow"), "SLOW")  # its wait is answered in 30 s
            while not turns._to_wait:  # the prompt answered, the wait not sent
                await trio.testing.wait_all_tasks_blocked()
            gate = gated[0].gate = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(turns._send_waits)  # what start() or the iteration does first
                await trio.testing.wait_all_tasks_blocked()  # ... blocked in the write
                turns.close()
                gated[0].gate = None
                gate.set()
            await trio.testing.wait_all_tasks_blocked()
            assert runtime.abandoned == {"slow"} and turns.in_flight == 0
            assert runtime.connection.statistics().pending_requests == 0

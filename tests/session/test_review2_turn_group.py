"""Adversarial cases for turn groups (review of the session's performance changes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from scripted_runtime import ScriptedRuntime

from dsh_orchestra.session import Runtime, TurnResult, open_runtime
from dsh_orchestra.transport import Notification


@pytest.fixture
def scripted() -> ScriptedRuntime:
    return ScriptedRuntime()


@pytest.fixture
async def runtime(scripted: ScriptedRuntime) -> AsyncIterator[Runtime]:
    async with open_runtime(scripted.spec()) as opened:
        yield opened


async def test_a_start_cancelled_before_its_prompt_went_out_leaves_no_turn_in_flight(runtime: Runtime) -> None:
    """A cancelled ``start`` must not leave a turn that never settles: the iteration ends."""
    with trio.fail_after(10):
        async with runtime.turns() as turns:
            await turns.start(runtime.session("kept"), "hello")
            with trio.CancelScope() as scope:
                scope.cancel()
                await turns.start(runtime.session("cancelled"), "hello")
            assert scope.cancelled_caught
            outcomes = {session.id: outcome async for session, outcome in turns}
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
            with trio.CancelScope() as scope:
                scope.cancel()
                await turns.start(runtime.session("second"), "hello")
            assert scope.cancelled_caught
            outcomes = {session.id: outcome async for session, outcome in turns}
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

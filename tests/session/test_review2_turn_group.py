"""Adversarial cases for turn groups (review of the session's performance changes)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from scripted_runtime import ScriptedRuntime

from dsh_orchestra.session import Runtime, open_runtime


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

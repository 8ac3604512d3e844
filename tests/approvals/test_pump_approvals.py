"""Approvals while a ``session.events()`` subscriber reads the simulator process's pipe itself.

The simulator runs as a process (real pipes, so the reading is lent); no MockClock, every test
is bounded by ``trio.fail_after`` and sleeps never.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Callable

import trio
import trio.testing

from dsh_orchestra.approvals import ALLOWED_ONCE, ApprovalRequest, Decision, allow
from dsh_orchestra.protocol import TransportClosedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime, Session, open_runtime
from dsh_orchestra.transport import Subscription

LIMIT = 60  # seconds; each test takes about one


@asynccontextmanager
async def watched(spec: RuntimeSpec, policy: Any, name: str) -> AsyncIterator[tuple[Runtime, Session, Subscription, trio.Nursery]]:
    """(runtime, session, its events(), a nursery) on the simulator process, within LIMIT."""
    with trio.fail_after(LIMIT):
        async with open_runtime(spec, approvals=policy) as runtime:
            session = runtime.session(name)
            with session.events() as events:
                async with trio.open_nursery() as nursery:
                    yield runtime, session, events, nursery


async def closed_into(errors: list[BaseException], wait: Callable[[], Awaitable[Any]]) -> None:
    """Await ``wait()``; keep the TransportClosedError it raises in ``errors``."""
    try:
        await wait()
    except TransportClosedError as exc:
        errors.append(exc)


async def test_a_policy_waiting_for_what_the_subscriber_reads_is_answered(
    process_sim: Callable[..., RuntimeSpec],
) -> None:
    """The approval request is read by the subscriber's task; the policy waits until the
    subscriber has seen an event, and the subscriber keeps reading meanwhile: no deadlock."""
    seen = trio.Event()

    async def after_an_event(request: ApprovalRequest) -> Decision:
        await seen.wait()
        return allow("after an event")

    methods: list[str] = []
    async with watched(process_sim(), after_an_event, "pumped") as (runtime, session, events, nursery):

        async def consume() -> None:
            async for event in events:
                methods.append(event.method)
                seen.set()

        nursery.start_soon(consume)
        # the first wait only asks for the pipe; the following ones read it
        result = await session.run("TRIPLE")
        nursery.cancel_scope.cancel()
        assert runtime.connection.statistics().lent_reads > 0
    assert [r.outcome for r in result.approvals] == [ALLOWED_ONCE] * 3
    assert result.final_response == "three steps done"
    assert methods


async def test_a_subscriber_that_stops_receiving_does_not_hold_up_the_run(
    process_sim: Callable[..., RuntimeSpec],
) -> None:
    """The subscriber reads the pipe for a while, then stops calling receive() while the
    turn goes on and while another runs: the reader task takes the pipe back, the approvals
    are answered and the replies arrive."""
    async def quick(request: ApprovalRequest) -> Decision:
        await trio.lowlevel.checkpoint()
        return allow("ok")

    async with watched(process_sim(), quick, "idle") as (runtime, session, events, nursery):

        async def consume_then_stop() -> None:
            while runtime.connection.statistics().lent_reads == 0:
                await events.receive()

        async with trio.open_nursery() as consumers:
            consumers.start_soon(consume_then_stop)
            first = await session.run("TRIPLE")
            consumers.cancel_scope.cancel()
        lent = runtime.connection.statistics().lent_reads
        second = await session.run("TRIPLE")  # nobody receives now
        assert events.pending() > 0
    assert lent > 0
    assert [r.outcome for r in first.approvals] == [ALLOWED_ONCE] * 3
    assert [r.outcome for r in second.approvals] == [ALLOWED_ONCE] * 3


async def test_the_runtime_dying_while_a_subscriber_reads_fails_every_waiter(
    process_sim: Callable[..., RuntimeSpec],
) -> None:
    """SIGKILL while a task reads the pipe itself (the subscriber, or the run's request
    waiting for its reply), the other waits, and a policy waits: the subscriber and the run
    both get TransportClosedError, nothing hangs."""
    entered = trio.Event()

    async def forever(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    errors: list[BaseException] = []

    async def consume(events: Subscription) -> None:
        async for _ in events:
            pass

    async with watched(process_sim(), forever, "killed") as (runtime, session, events, nursery):
        nursery.start_soon(closed_into, errors, partial(consume, events))
        nursery.start_soon(closed_into, errors, partial(session.run, "DEPLOY now"))
        await entered.wait()
        await trio.testing.wait_all_tasks_blocked()  # a task waits in the pipe
        assert runtime.actor.connection is not None and runtime.actor.connection.statistics().lent_reads > 0
        assert runtime.actor.pid is not None
        os.kill(runtime.actor.pid, signal.SIGKILL)
    assert len(errors) == 2 and all(isinstance(e, TransportClosedError) for e in errors)

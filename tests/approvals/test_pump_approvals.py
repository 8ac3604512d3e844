"""Approvals while a ``session.events()`` subscriber reads the simulator process's pipe itself.

The simulator runs as a process (real pipes, so the reading is lent); no MockClock, every test
is bounded by ``trio.fail_after`` and sleeps never.
"""

from __future__ import annotations

import os
import signal
from typing import Callable

import trio
import trio.testing

from dsh_orchestra.approvals import ALLOWED_ONCE, ApprovalRequest, Decision, allow
from dsh_orchestra.protocol import TransportClosedError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime

LIMIT = 60  # seconds; each test takes about one


async def test_a_policy_waiting_for_what_the_subscriber_reads_is_answered(
    process_sim: Callable[..., RuntimeSpec],
) -> None:
    """The approval request is read by the subscriber's task; the policy waits until the
    subscriber has seen an event, and the subscriber keeps reading meanwhile: no deadlock."""
    seen = trio.Event()

    async def after_an_event(request: ApprovalRequest) -> Decision:
        await seen.wait()
        return allow("after an event")

    with trio.fail_after(LIMIT):
        async with open_runtime(process_sim(), approvals=after_an_event) as runtime:
            session = runtime.session("pumped")
            methods: list[str] = []
            with session.events() as events:
                async with trio.open_nursery() as nursery:

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

    with trio.fail_after(LIMIT):
        async with open_runtime(process_sim(), approvals=quick) as runtime:
            session = runtime.session("idle")
            with session.events() as events:
                async with trio.open_nursery() as nursery:

                    async def consume_then_stop() -> None:
                        while runtime.connection.statistics().lent_reads == 0:
                            await events.receive()

                    nursery.start_soon(consume_then_stop)
                    first = await session.run("TRIPLE")
                    nursery.cancel_scope.cancel()
                lent = runtime.connection.statistics().lent_reads
                second = await session.run("TRIPLE")  # nobody receives now
                assert events.pending() > 0
    assert lent > 0
    assert [r.outcome for r in first.approvals] == [ALLOWED_ONCE] * 3
    assert [r.outcome for r in second.approvals] == [ALLOWED_ONCE] * 3


async def test_the_runtime_dying_while_a_subscriber_reads_fails_every_waiter(
    process_sim: Callable[..., RuntimeSpec],
) -> None:
    """SIGKILL while a subscriber waits in the pipe, a run waits for its reply and a policy
    waits: the subscriber and the run both get TransportClosedError, nothing hangs."""
    entered = trio.Event()

    async def forever(request: ApprovalRequest) -> Decision:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    errors: list[BaseException] = []
    with trio.fail_after(LIMIT):
        async with open_runtime(process_sim(), approvals=forever) as runtime:
            session = runtime.session("killed")
            with session.events() as events:
                async with trio.open_nursery() as nursery:

                    async def consume() -> None:
                        try:
                            async for _ in events:
                                pass
                        except TransportClosedError as exc:
                            errors.append(exc)

                    async def run() -> None:
                        try:
                            await session.run("DEPLOY now")
                        except TransportClosedError as exc:
                            errors.append(exc)

                    nursery.start_soon(consume)
                    nursery.start_soon(run)
                    await entered.wait()
                    await trio.testing.wait_all_tasks_blocked()  # the subscriber waits in the pipe
                    assert events.pipe_wait
                    assert runtime.actor.pid is not None
                    os.kill(runtime.actor.pid, signal.SIGKILL)
    assert len(errors) == 2 and all(isinstance(e, TransportClosedError) for e in errors)

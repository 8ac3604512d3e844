"""The bounded subscription on its own: buffering, overflow, errors, batches, scheduling."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from dsh_orchestra.protocol import SubscriberOverflowError, TransportClosedError
from dsh_orchestra.transport import Notification, Subscription


def note(index: int) -> Notification:
    return Notification("session.status", {"index": index})


async def test_receive_in_order_then_the_error_after_the_buffer_drains() -> None:
    subscription = Subscription("s", capacity=5)
    for index in range(3):
        subscription.push(note(index))
    subscription.fail(TransportClosedError("runtime went away"))
    subscription.push(note(99))  # nothing is buffered after a failure
    assert [(await subscription.receive()).params["index"] for _ in range(3)] == [0, 1, 2]
    with pytest.raises(TransportClosedError, match="runtime went away") as first:
        await subscription.receive()
    with pytest.raises(TransportClosedError) as second:
        subscription.receive_nowait()
    assert first.value is not second.value  # each raise gets its own exception


async def test_overflow_drops_the_buffer_and_detaches() -> None:
    detached: list[Subscription] = []
    subscription = Subscription("slow", capacity=3, on_close=detached.append)
    for index in range(4):
        subscription.push(note(index))
    assert subscription.pending() == 0 and detached == [subscription]
    with pytest.raises(SubscriberOverflowError, match="'slow'"):
        await subscription.receive()
    subscription.close()
    assert detached == [subscription]  # on_close runs once


async def test_a_waiting_receiver_is_woken_by_push(autojump_clock: trio.testing.MockClock) -> None:
    subscription = Subscription("s")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _push_later(subscription, note(1)))
        assert (await subscription.receive()).params == {"index": 1}


async def _push_later(subscription: Subscription, notification: Notification, delay: float = 1) -> None:
    await trio.sleep(delay)
    subscription.push(notification)


async def test_several_tasks_can_wait_on_one_subscription(autojump_clock: trio.testing.MockClock) -> None:
    subscription = Subscription("shared")
    got: list[int] = []

    async def consumer() -> None:
        got.append((await subscription.receive()).params["index"])

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(consumer)
        await trio.testing.wait_all_tasks_blocked()
        for index in range(3):
            await trio.sleep(1)
            subscription.push(note(index))
    assert sorted(got) == [0, 1, 2]


async def test_close_wakes_a_waiter_with_closed_resource_error(autojump_clock: trio.testing.MockClock) -> None:
    subscription = Subscription("s")

    async def close_later() -> None:
        await trio.sleep(1)
        subscription.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close_later)
        with pytest.raises(trio.ClosedResourceError):
            await subscription.receive()


async def test_receive_is_a_cancel_point_and_loses_nothing() -> None:
    subscription = Subscription("s")
    subscription.push(note(0))
    with trio.CancelScope() as scope:
        scope.cancel()
        await subscription.receive()
    assert scope.cancelled_caught
    assert subscription.pending() == 1
    with trio.CancelScope() as scope:
        scope.cancel()
        await subscription.receive_batch()
    assert subscription.pending() == 1
    assert (await subscription.receive()).params["index"] == 0


async def test_receive_lets_other_tasks_run_while_draining_a_full_buffer() -> None:
    """A schedule point at least every SCHEDULE_EVERY items (and each time it has to wait)."""
    subscription = Subscription("s", capacity=10_000)
    for index in range(2048):
        subscription.push(note(index))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        for index in range(2048):
            assert (await subscription.receive()).params["index"] == index
        ran = ticks - before
        nursery.cancel_scope.cancel()
    assert ran >= 2048 // Subscription.SCHEDULE_EVERY - 1


async def test_strict_scheduling_can_be_asked_for() -> None:
    class EveryTime(Subscription):
        SCHEDULE_EVERY = 1

    subscription = EveryTime("strict")
    for index in range(10):
        subscription.push(note(index))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        for _ in range(10):
            await subscription.receive()
        ran = ticks - before
        nursery.cancel_scope.cancel()
    assert ran >= 9


async def test_receive_batch() -> None:
    subscription = Subscription("s")
    for index in range(10):
        subscription.push(note(index))
    assert [n.params["index"] for n in await subscription.receive_batch(max_items=4)] == [0, 1, 2, 3]
    assert [n.params["index"] for n in await subscription.receive_batch()] == [4, 5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="max_items must be >= 1"):
        await subscription.receive_batch(0)


async def test_receive_batch_waits_for_the_first_item(autojump_clock: trio.testing.MockClock) -> None:
    subscription = Subscription("s")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_push_later, subscription, note(5))
        assert [n.params["index"] for n in await subscription.receive_batch(3)] == [5]


async def test_receive_nowait_and_async_iteration() -> None:
    subscription = Subscription("s")
    with pytest.raises(trio.WouldBlock):
        subscription.receive_nowait()
    subscription.push(note(0))
    subscription.push(note(1))
    subscription.fail(TransportClosedError("gone"))
    seen = []
    with pytest.raises(TransportClosedError):
        async for notification in subscription:
            seen.append(notification.params["index"])
    assert seen == [0, 1]


async def test_a_filter_and_the_capacity_rule() -> None:
    subscription = Subscription("even", capacity=2, filter=lambda n: n.params["index"] % 2 == 0)
    for index in range(4):  # 0 and 2 kept, 1 and 3 filtered out: capacity not exceeded
        subscription.push(note(index))
    assert subscription.pending() == 2
    with pytest.raises(ValueError, match="capacity must be > 0"):
        Subscription("x", capacity=0)


@pytest.mark.parametrize("capacity", [1, 3, 5, 6, 100])
def test_push_many_is_push_one_by_one(capacity: int) -> None:
    """Same buffer, same overflow (at the first one past capacity), nothing after a close or
    a failure, a filter asked about each one in order."""
    asked: list[int] = []

    def even(notification: Notification) -> bool:
        asked.append(notification.params["index"])
        return notification.params["index"] % 2 == 0

    def outcome(many: bool, closed: bool = False, **options: Any) -> tuple[list[Any], list[int]]:
        asked.clear()
        subscription = Subscription("s", capacity=capacity, **options)
        batches = [[note(index) for index in range(start, start + 2)] for start in range(0, 6, 2)]
        for number, batch in enumerate(batches):
            if number == 2 and closed:
                subscription.close()
            if many:
                subscription.push_many(batch)
            else:
                for notification in batch:
                    subscription.push(notification)
        out: list[Any] = []
        while True:
            try:
                out.append(subscription.receive_nowait().params["index"])
            except trio.WouldBlock:
                return out, list(asked)
            except (SubscriberOverflowError, trio.ClosedResourceError) as exc:
                return [*out, type(exc).__name__], list(asked)

    for options in ({}, {"filter": even}):
        assert outcome(True, **options) == outcome(False, **options)
    assert outcome(True, closed=True) == outcome(False, closed=True) == (["ClosedResourceError"], [])


async def test_push_many_wakes_a_waiting_receive() -> None:
    subscription = Subscription("s")
    async with trio.open_nursery() as nursery:
        got: list[Notification] = []

        async def consumer() -> None:
            got.append(await subscription.receive())

        nursery.start_soon(consumer)
        await trio.testing.wait_all_tasks_blocked()
        subscription.push_many([note(0), note(1)])
    assert got == [note(0)] and subscription.pending() == 1

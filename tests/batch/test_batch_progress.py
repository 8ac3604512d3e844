"""The progress display, in virtual time: periodic lines, the bar's fields, nothing when off."""

from __future__ import annotations

import io

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.batch._progress import Counters, Progress


async def test_lines_are_periodic_and_say_everything(autojump_clock: MockClock) -> None:
    stream = io.StringIO()
    counters = Counters(total=100, done=0, pending_approvals=lambda: 4)
    progress = Progress(counters, mode="auto", stream=stream, interval=10, clock=trio.current_time)
    assert progress.mode == "lines"  # a StringIO is not a terminal
    async with trio.open_nursery() as nursery:
        nursery.start_soon(progress.run)  # prints at t = 10, 20
        await trio.sleep(0.5)  # items finish at t = 0.5, 1.5, ... (never together with a tick)
        for _ in range(25):
            await trio.sleep(1)
            counters.done += 1
            progress.update()  # per item: must not print more than once per interval
        counters.failed, counters.retries = 1, 2
        nursery.cancel_scope.cancel()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == "batch: 9/100 done, 0 failed, 0 retries, 4 approvals pending, 0.9 items/s, ETA 101 s"
    assert lines[1] == "batch: 19/100 done, 0 failed, 0 retries, 4 approvals pending, 0.9 items/s, ETA 85 s"
    progress.close()
    last = stream.getvalue().splitlines()[-1]
    assert last == "batch: 25/100 done, 1 failed, 2 retries, 4 approvals pending, 1.0 items/s, ETA 76 s"


async def test_resumed_items_do_not_count_towards_the_rate(autojump_clock: MockClock) -> None:
    stream = io.StringIO()
    counters = Counters(total=60, done=50, resumed=50)
    progress = Progress(counters, mode="lines", stream=stream, interval=10, clock=trio.current_time)
    await trio.sleep(5)
    counters.done = 55
    progress.update(force=True)
    assert stream.getvalue() == "batch: 55/60 done, 0 failed, 0 retries, 0 approvals pending, 1.0 items/s, ETA 5 s\n"


def test_bar_fields() -> None:
    stream = io.StringIO()
    counters = Counters(total=8, done=2, resumed=2, pending_approvals=lambda: 1)
    progress = Progress(counters, mode="bar", stream=stream)
    counters.done, counters.failed, counters.retries = 6, 1, 3
    progress.update(force=True)
    progress.close()
    text = stream.getvalue()
    assert "batch:" in text and "6/8" in text and "item/s" in text
    assert "approvals=1" in text and "failed=1" in text and "retries=3" in text
    assert "\r" in text


@pytest.mark.parametrize("force", [False, True])
def test_none_prints_nothing(force: bool) -> None:
    stream = io.StringIO()
    progress = Progress(Counters(total=3), mode="none", stream=stream)
    progress.update(force=force)
    progress.close()
    assert stream.getvalue() == ""


async def test_none_ticker_returns_at_once() -> None:
    with trio.fail_after(1):
        await Progress(Counters(total=1), mode="none", stream=io.StringIO()).run()


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="auto, bar, lines or none"):
        Progress(Counters(), mode="fancy")

"""Supervisor: keep one thing running (a runtime of the pool, a Ray actor): start it, wait for
it to end, start it again after a pause, give up after repeated failed starts.

The thing itself is a ``start`` callback that runs it to its end and says how it ended
(``Ended``); the supervisor owns the loop, the counts and the backoff between attempts.
Used by ``RuntimePool`` (one per slot) and by the Ray executor (one per actor slot).
"""

from __future__ import annotations

import enum
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

import trio

from ..protocol import OrchestraError
from ._retry import Backoff



class Ended(enum.Enum):
    """How one run of the supervised thing ended."""

    FAILED = "failed"  # it did not start: counts towards giving up; pause, then start again
    CRASHED = "crashed"  # it started, then died: pause, then start again
    RECYCLED = "recycled"  # it was retired on purpose: start again at once
    DONE = "done"  # nothing more to do: stop supervising


class Supervisor:
    """Runs ``start`` again and again until it returns ``Ended.DONE``, ``stop`` is set, or it
    failed ``max_failures`` starts in a row (None: never give up).

    ``start`` calls ``ready()`` once the thing is up: that resets the failed-start count and
    the backoff (the next pause is ``backoff.first`` again). ``on_change`` is called after
    each end is counted.
    """

    def __init__(self, backoff: Backoff, stop: trio.Event, *, max_failures: int | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.backoff = backoff
        self.on_change = on_change  # called once each end is counted (watchers see the new counts)
        self.stop = stop
        self.max_failures = max_failures
        self.starts = 0  # calls of start
        self.failures = 0  # failed starts in a row
        self.restarts = 0  # pauses taken after a failure or crash
        self.ready_once = False
        self._retry = 0

    @property
    def gave_up(self) -> bool:
        """True once ``max_failures`` starts in a row failed."""
        return self.max_failures is not None and self.failures >= self.max_failures

    def ready(self) -> None:
        """The thing started: forget earlier failures."""
        self.ready_once = True
        self.failures = 0
        self._retry = 0

    async def run(self, start: Callable[[], Awaitable[Ended]]) -> Ended:
        """Supervise until done, stopped (both: ``DONE``) or given up (``FAILED``)."""
        while not self.stop.is_set():
            self.starts += 1
            ended = await start()
            if ended is Ended.DONE or self.stop.is_set():
                return Ended.DONE
            if ended is Ended.FAILED:
                self.failures += 1
            if self.on_change is not None:
                self.on_change()
            if self.gave_up:
                return Ended.FAILED
            if ended is Ended.RECYCLED:
                continue
            self.restarts += 1
            await self.backoff.sleep(self._retry, until=self.stop)
            self._retry += 1
        return Ended.DONE


@asynccontextmanager
async def serving(run: Callable[..., Awaitable[Any]], close: Callable[[], Awaitable[None]]) -> AsyncIterator[Any]:
    """Start the service ``run`` (``nursery.start``), yield what it passes to ``started()``,
    then ``await close()`` and wait for it to end.

    Raises:
        OrchestraError: ``run`` failed before it started (raised bare, outside the nursery).
        ExceptionGroup: errors inside the block, or ``run`` failing later (use except*).
    """
    failure: OrchestraError | None = None
    async with trio.open_nursery() as nursery:
        try:
            value = await nursery.start(run)
        except OrchestraError as exc:  # nothing started: raised outside the nursery, bare
            failure = exc
        else:
            try:
                yield value
            finally:
                await close()
    if failure is not None:
        raise failure

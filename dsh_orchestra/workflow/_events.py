"""Live workflow events: what ``open_workflow``'s ``run.events()`` yields, and the channel they travel in.

The engine emits without waiting: each subscriber has a bounded buffer, and one that falls
``capacity`` behind fails alone with SubscriberOverflowError (the workflow never waits for a
reader). Pure data and a trio channel; no I/O.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

import attrs
import trio

from .._params import Param, ParamValueError
from ..protocol import SubscriberOverflowError
from ._result import StepError

EventKind = Literal["started", "finished", "failed", "skipped", "cancelled", "interrupted", "resumed", "turn"]


@attrs.frozen(kw_only=True)
class WorkflowEvent:
    """One thing that happened in a run.

    ``kind``: ``started`` (a step began), ``finished`` (it succeeded), ``failed``, ``skipped``,
    ``cancelled``, ``interrupted`` (one of its branches waits for an answer: ``interrupt`` holds
    the id and question), ``resumed`` (reused from the checkpoint without running), or
    ``turn`` (a session's notification, with ``turn_events=True``: ``notification`` holds it).
    ``step`` is the step's path (``sub[1]/review`` inside a subworkflow); ``index`` the fan-out
    item for item-level events; ``time`` seconds since the run started.
    """

    kind: EventKind
    step: str
    time: float
    index: int | None = None
    error: StepError | None = None
    reason: str | None = None
    interrupt: Any = None
    session_id: str | None = None
    notification: Any = None


class EventChannel(trio.abc.ReceiveChannel[WorkflowEvent]):
    """A bounded buffer of events; iteration ends when the run ends."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ParamValueError(Param("capacity", capacity, spelled="capacity"), f" must be >= 1, not {capacity!r}")
        self.capacity = capacity
        self._items: deque[WorkflowEvent] = deque()
        self._waiter: trio.Event | None = None
        self._ended = False
        self._error: BaseException | None = None

    def push(self, event: WorkflowEvent) -> None:
        """Buffer ``event`` (never blocks); past ``capacity`` the channel fails."""
        if self._ended or self._error is not None:
            return
        if len(self._items) >= self.capacity:
            self._items.clear()
            self._error = SubscriberOverflowError("workflow events", self.capacity)
        else:
            self._items.append(event)
        self._wake()

    def end(self) -> None:
        """No more events: a reader gets what is buffered, then the end of the channel."""
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    async def receive(self) -> WorkflowEvent:
        """The next event.

        Raises:
            trio.EndOfChannel: the run ended and every event was read.
            SubscriberOverflowError: this reader fell ``capacity`` events behind.
        """
        while True:
            if self._error is not None:
                raise self._error
            if self._items:
                await trio.lowlevel.checkpoint()
                return self._items.popleft()
            if self._ended:
                raise trio.EndOfChannel
            self._waiter = trio.Event()
            await self._waiter.wait()

    async def aclose(self) -> None:
        """Stop receiving (later events are dropped)."""
        self._ended = True
        self._items.clear()
        await trio.lowlevel.checkpoint()


class EventHub:
    """The run's event fan-out to every subscribed channel."""

    def __init__(self, *, turn_events: bool = False) -> None:
        self.channels: list[EventChannel] = []
        self.turn_events = turn_events
        self.start = 0.0

    def subscribe(self, capacity: int) -> EventChannel:
        """A new channel that gets every later event."""
        channel = EventChannel(capacity)
        self.channels.append(channel)
        return channel

    @property
    def listening(self) -> bool:
        """True when some channel would receive an event."""
        return bool(self.channels)

    def emit(self, kind: EventKind, step: str, **fields: Any) -> None:
        """Send one event to every channel (nothing is built when nobody listens)."""
        if not self.channels:
            return
        event = WorkflowEvent(kind=kind, step=step, time=trio.current_time() - self.start, **fields)
        for channel in self.channels:
            channel.push(event)

    def end(self) -> None:
        """End every channel."""
        for channel in self.channels:
            channel.end()

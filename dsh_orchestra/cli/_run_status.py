"""Live step status for ``dsh-orchestra run``, fed by the run's events.

The same conventions as the batch progress: on a terminal a live bar (tqdm) of steps settled,
with the running steps, items done, failures and waiting interrupts after it; otherwise a
plain line every ``interval`` seconds and one at the end.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import trio

from .._terminal import terminal_size
from ..workflow import EventChannel, Workflow, WorkflowEvent

SETTLED = {"finished", "failed", "skipped", "cancelled", "resumed"}


class StepBoard:
    """Tracks each top-level step's state from the events and shows it."""

    def __init__(
        self, workflow: Workflow, events: EventChannel, *, stream: TextIO | None = None, interval: float = 10.0
    ) -> None:
        self.workflow = workflow
        self.events = events
        self.stream = stream or sys.stderr
        self.interval = interval
        self.state: dict[str, str] = {name: "waiting" for name in workflow.steps}
        self.items: dict[str, int] = {}
        self.waiting: set[str] = set()
        self.failed = 0
        self.finished = trio.Event()
        self._bar: Any = None
        self._last = 0.0
        if getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm  # type: ignore[import-untyped]

            width, height = terminal_size(self.stream)
            self._bar = tqdm(
                total=len(self.state), unit="step", file=self.stream, desc="workflow", mininterval=0,
                dynamic_ncols=width is None, ncols=width, nrows=height,
            )

    def note(self, event: WorkflowEvent) -> None:
        """Update the state from one event."""
        top = event.step.split("/", 1)[0].split("[", 1)[0]
        if top not in self.state:
            return
        if event.kind == "interrupted" and event.interrupt is not None:
            self.waiting.add(event.interrupt.id)
            self.state[top] = "waiting for an answer"
        elif event.kind == "started" and "/" not in event.step:
            self.state[top] = "running"
        elif event.kind in SETTLED and "/" not in event.step and event.index is None:
            self.state[top] = event.kind
            self.failed += event.kind == "failed"
        elif event.kind == "resumed" and event.index is not None:
            self.items[top] = self.items.get(top, 0) + 1

    def line(self) -> str:
        """The status in words."""
        settled = sum(1 for s in self.state.values() if s in SETTLED)
        running = [n for n, s in self.state.items() if s == "running"]
        text = f"workflow {self.workflow.name!r}: {settled}/{len(self.state)} steps settled"
        if running:
            text += f", running: {', '.join(running)}"
        if self.failed:
            text += f", {self.failed} failed"
        if self.waiting:
            text += f", {len(self.waiting)} interrupt(s) waiting"
        return text

    def show(self, *, force: bool = False) -> None:
        """Refresh the bar, or write a line when ``interval`` passed (or ``force``)."""
        if self._bar is not None:
            self._bar.n = sum(1 for s in self.state.values() if s in SETTLED)
            running = [n for n, s in self.state.items() if s == "running"]
            self._bar.set_postfix_str(
                f"running={','.join(running) or '-'} failed={self.failed} waiting={len(self.waiting)}", refresh=False
            )
            self._bar.refresh()
            return
        now = trio.current_time()
        if force or now - self._last >= self.interval:
            self._last = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    async def run(self) -> None:
        """Follow the events until the run ends; then a final refresh."""
        self._last = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:

                async def tick() -> None:
                    while True:
                        await trio.sleep(self.interval if self._bar is None else 0.5)
                        self.show()

                nursery.start_soon(tick)
                async for event in self.events:
                    self.note(event)
                    if self._bar is not None:
                        self.show()
                nursery.cancel_scope.cancel()
        except Exception:  # noqa: BLE001 (an overflowed display must not fail the run)
            pass
        finally:
            if self._bar is not None:  # lines: the summary that follows says the rest
                self.show(force=True)
                self._bar.close()
            self.finished.set()

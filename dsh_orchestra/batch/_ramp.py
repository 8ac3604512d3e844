"""StartRamp: a batch's workers start a few at a time, not all at once, when a model gateway
shows how far the runtimes have got.

Why: a runtime handed 32 fresh sessions at once sets them all up side by side (one JS event
loop), so its first model call comes only once most of them are ready: 3-7 s on the goodput
benchmark (docs/benchmarks.md, "Start-up of the goodput run"), while one session alone calls
the model about 0.6 s after its prompt. Started a few at a time, the first calls reach the
model within a second of the first runtime being ready, and the quota is used from then on.

How: ``first`` workers start at once; every further runtime of the pool that becomes ready
(``grow_on_ready``: its first turn's set-up, seconds of its own, then overlaps the others'),
every new model call the gateway receives (an item's session got as far as calling the model)
and every item that ends lets ``grow`` more start,
until all have started (about doubling per round). An item ending counts too, so a run
whose items never call the model (cache hits, failures) still opens fully; a worker that
finds no item left opens it at once (the run is ending: nobody may wait). Once open, the
ramp costs nothing; it never holds back a worker that already started.
"""

from __future__ import annotations

from typing import Any

import trio

from ..pool import PoolClosedError

RAMP_FIRST = 2
"""Workers that start at once."""
RAMP_GROW = 2
"""Further workers that may start at each sign of progress (a new model call, an item ended)."""


class StartRamp:
    """Worker ``i`` (0-based) starts once ``allowed`` exceeds ``i``; ``progress()`` raises it."""

    def __init__(self, workers: int, *, first: int = RAMP_FIRST, grow: int = RAMP_GROW) -> None:
        if first < 1 or grow < 1:
            raise ValueError(f"first and grow must be >= 1, not {first!r}, {grow!r}")
        self.workers = workers
        self.grow = grow
        self.allowed = min(first, workers)
        self._changed = trio.Event()

    @property
    def open(self) -> bool:
        """True once every worker may start."""
        return self.allowed >= self.workers

    def progress(self) -> None:
        """Something moved (a new model call, an item ended): ``grow`` more workers may start."""
        if self.allowed < self.workers:
            self.allowed = min(self.workers, self.allowed + self.grow)
            self._changed.set()
            self._changed = trio.Event()

    def open_all(self) -> None:
        """Let every worker start (no item is left: the waiting ones then find none and end)."""
        self.allowed = self.workers
        self._changed.set()
        self._changed = trio.Event()

    async def wait(self, index: int) -> None:
        """Return once worker ``index`` may start."""
        while index >= self.allowed:
            await self._changed.wait()


async def grow_on_ready(ramp: StartRamp, runner: Any) -> None:
    """``ramp.progress()`` each time one more runtime of ``runner``'s pool is ready (a
    ``PoolRunner``; nothing for runners without a pool), until the ramp is open."""
    pool: Any = getattr(runner, "pool", None)
    if pool is None:
        return
    for count in range(2, pool.size + 1):
        try:
            await pool.wait_live(count)
        except PoolClosedError:
            return
        if ramp.open:
            return
        ramp.progress()

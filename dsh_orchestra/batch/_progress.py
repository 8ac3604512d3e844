"""Batch progress: a live bar on a terminal (tqdm), plain periodic lines otherwise, or nothing.

The bar shows done/total, rate, ETA, failures, retries and pending approvals; a line says the
same in words. ``run()`` refreshes the display on its own (the bar every ``bar_interval``
seconds, a line every ``interval``) so it stays live while no item finishes.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, TextIO

import attrs
import trio

from .._params import Param, ParamValueError
from .._terminal import terminal_size


@attrs.define
class Counters:
    """What the progress display shows; updated by the runner."""

    total: int = 0
    done: int = 0
    failed: int = 0
    retries: int = 0
    resumed: int = 0
    pending_approvals: Callable[[], int] = lambda: 0


class Progress:
    """Reports ``Counters``: ``mode`` is "auto" (bar on a tty, lines otherwise), "bar", "lines" or "none"."""

    def __init__(
        self,
        counters: Counters,
        *,
        mode: str = "auto",
        stream: TextIO | None = None,
        interval: float = 10.0,
        bar_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in ("auto", "bar", "lines", "none"):
            raise ParamValueError(Param("progress", mode, spelled="progress"), f" mode must be auto, bar, lines or none, not {mode!r}")
        self.counters = counters
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self.interval = interval
        self.bar_interval = bar_interval
        self._initial = counters.done  # resumed items do not count towards this run's rate
        self._clock = clock  # run_batch passes trio.current_time, so virtual time moves it too
        self._start = clock()
        self._last_line = self._start
        self._last_bar = self._start - bar_interval
        self._bar: Any = None
        if mode == "bar":
            from tqdm import tqdm  # type: ignore[import-untyped]

            width, height = terminal_size(self.stream)
            self._bar = tqdm(
                total=counters.total, initial=counters.done, unit="item", file=self.stream, desc="batch",
                mininterval=0, dynamic_ncols=width is None, ncols=width, nrows=height,
            )

    def _rate_eta(self) -> tuple[float, float | None]:
        elapsed = max(self._clock() - self._start, 1e-9)
        rate = (self.counters.done - self._initial) / elapsed
        left = self.counters.total - self.counters.done
        return rate, (left / rate if rate > 0 else None)

    def update(self, *, force: bool = False) -> None:
        """Refresh the display: the bar at most every ``bar_interval`` seconds, a line at most
        every ``interval`` seconds (unless ``force``), so calling it per item stays cheap."""
        c = self.counters
        if self.mode == "bar" and self._bar is not None:
            now = self._clock()
            if not force and now - self._last_bar < self.bar_interval:
                return
            self._last_bar = now
            self._bar.n = c.done
            self._bar.set_postfix(failed=c.failed, retries=c.retries, approvals=c.pending_approvals(), refresh=False)
            self._bar.refresh()
        elif self.mode == "lines":
            now = self._clock()
            if force or now - self._last_line >= self.interval:
                self._last_line = now
                rate, eta = self._rate_eta()
                eta_text = f"{eta:.0f} s" if eta is not None else "?"
                self.stream.write(
                    f"batch: {c.done}/{c.total} done, {c.failed} failed, {c.retries} retries, "
                    f"{c.pending_approvals()} approvals pending, {rate:.1f} items/s, ETA {eta_text}\n"
                )
                self.stream.flush()

    async def run(self) -> None:
        """Refresh the display periodically until cancelled (nothing to do in mode "none")."""
        if self.mode == "none":
            return
        period = self.bar_interval if self.mode == "bar" else self.interval
        while True:
            await trio.sleep(period)
            self.update()

    def close(self, *, final: bool = True) -> None:
        """Final refresh (unless ``final`` is False: the run failed before any item) and release the terminal."""
        if self.mode == "lines":
            if final:
                self.update(force=True)
        elif self._bar is not None:
            if final:
                self.update(force=True)
            self._bar.close()
            self._bar = None

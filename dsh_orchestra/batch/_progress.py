"""Batch progress: a live bar on a terminal (tqdm), plain periodic lines otherwise, or nothing."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, TextIO

import attrs


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

    def __init__(self, counters: Counters, *, mode: str = "auto", stream: TextIO | None = None, interval: float = 10.0) -> None:
        if mode not in ("auto", "bar", "lines", "none"):
            raise ValueError(f"progress mode must be auto, bar, lines or none, not {mode!r}")
        self.counters = counters
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self.interval = interval
        self._start = time.monotonic()
        self._last_line = self._start
        self._bar: Any = None
        if mode == "bar":
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._bar = tqdm(total=counters.total, initial=0, unit="item", file=self.stream, dynamic_ncols=True, desc="batch")

    def _rate_eta(self) -> tuple[float, float | None]:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = self.counters.done / elapsed
        left = self.counters.total - self.counters.done
        return rate, (left / rate if rate > 0 else None)

    def update(self, *, force: bool = False) -> None:
        """Refresh the display (lines are printed at most every ``interval`` seconds)."""
        c = self.counters
        if self.mode == "bar" and self._bar is not None:
            self._bar.n = c.done
            self._bar.set_postfix(failed=c.failed, retries=c.retries, approvals=c.pending_approvals(), refresh=False)
            self._bar.refresh()
        elif self.mode == "lines":
            now = time.monotonic()
            if force or now - self._last_line >= self.interval:
                self._last_line = now
                rate, eta = self._rate_eta()
                eta_text = f"{eta:.0f} s" if eta is not None else "?"
                self.stream.write(
                    f"batch: {c.done}/{c.total} done, {c.failed} failed, {c.retries} retries, "
                    f"{c.pending_approvals()} approvals pending, {rate:.1f} items/s, ETA {eta_text}\n"
                )
                self.stream.flush()

    def close(self) -> None:
        """Final refresh and release the terminal."""
        if self.mode == "lines":
            self.update(force=True)
        elif self._bar is not None:
            self.update()
            self._bar.close()

"""The exit statuses of ``batch``, ``run``, ``score`` and ``compare`` (docs/batch.md#exit-status)."""

from __future__ import annotations

EXIT_OK = 0
"""Complete, every item ok (a scorer failing on some items is a warning, not a status)."""
EXIT_ERRORS = 1
"""Complete, some items ended in error, or a scorer produced no value on any item."""
EXIT_USAGE = 2
"""Bad input, a missing or unstartable runtime (or missing credentials) included: nothing ran."""
EXIT_PENDING = 3
"""A workflow waits for answers to its interrupts."""
EXIT_BUDGET = 4
"""A budget (``--max-total-tokens``/``--max-total-cost``) stopped the run; ``--resume`` continues."""
EXIT_TEMPFAIL = 75
"""Stopped part-way by trouble that may pass (every runtime kept failing, a write failed):
``--resume`` continues (``EX_TEMPFAIL`` of sysexits.h)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C)."""
EXIT_TERMINATED = 143
"""Terminated (SIGTERM, 128 + 15): stopped and cleaned up as after Ctrl-C."""

"""The poison-item scenario shared by the batch and the Ray tests: one item whose turn crashes
the simulated runtime, healthy ones that take a little longer (so they are in flight beside it)."""

from __future__ import annotations

from typing import Any

POISON_SCRIPT = """
default_reply = "answer"

[[rules]]
name = "poison"
match = "POISON"
delay = 0.05
crash = true

[[rules]]
name = "healthy"
match = "HEALTHY"
reply = "fine"
delay = 0.1
"""


def poison_rows(healthy: int) -> list[dict[str, Any]]:
    """Dataset rows: ``healthy`` items ``h00``, ``h01``, ... with the crashing ``poison`` third."""
    rows: list[dict[str, Any]] = [{"id": f"h{i:02d}", "prompt": f"HEALTHY {i}"} for i in range(healthy)]
    rows.insert(2, {"id": "poison", "prompt": "POISON pill"})
    return rows

"""Adjusting p-values for multiple comparisons: Holm's step-down (family-wise error) and
Benjamini-Hochberg's step-up (false discovery rate). Pure.

With m p-values sorted ascending, p_(1) <= ... <= p_(m):

* Holm (1979): ``adj_(i) = min(1, max_{j <= i} (m - j + 1) * p_(j))``;
* Benjamini-Hochberg (1995): ``adj_(i) = min(1, min_{j >= i} m / j * p_(j))``;
* none: the p-values as they are.

None entries (no test) are left out of m and stay None.
"""

from __future__ import annotations

from typing import Sequence

CORRECTIONS = ("holm", "bh", "none")
DEFAULT_CORRECTION = "holm"


def adjust_pvalues(pvalues: Sequence[float | None], method: str = DEFAULT_CORRECTION) -> list[float | None]:
    """``pvalues`` adjusted by ``method`` (``holm``, ``bh`` or ``none``), in their order.

    Raises:
        ValueError: another method, or a p-value outside [0, 1].
    """
    if method not in CORRECTIONS:
        raise ValueError(f"correction must be holm, bh or none, not {method!r}")
    present = [(i, p) for i, p in enumerate(pvalues) if p is not None]
    for _, p in present:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"a p-value must be in [0, 1], not {p!r}")
    out: list[float | None] = list(pvalues)
    m = len(present)
    if method == "none" or m == 0:
        return out
    ordered = sorted(present, key=lambda pair: pair[1])
    if method == "holm":
        running = 0.0
        for rank, (index, p) in enumerate(ordered):
            running = max(running, min(1.0, (m - rank) * p))
            out[index] = running
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            index, p = ordered[rank]
            running = min(running, min(1.0, m / (rank + 1) * p))
            out[index] = running
    return out

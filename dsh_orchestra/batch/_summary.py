"""The batch summary: counts, rate and latency percentiles over a results file's lines."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable

import attrs


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@attrs.frozen(kw_only=True)
class Outcome:
    """What the summary needs of one result line (kept small for 100k-item runs)."""

    status: str
    finish_reason: str | None
    duration_s: float
    approval_outcomes: tuple[str, ...] = ()

    @classmethod
    def of(cls, line: dict[str, Any]) -> Outcome:
        approvals = line.get("approvals") or []
        return cls(
            status=str(line.get("status")),
            finish_reason=line.get("finish_reason"),
            duration_s=float(line.get("duration_s") or 0.0),
            approval_outcomes=tuple(str(a.get("outcome")) for a in approvals if isinstance(a, dict)),
        )


@attrs.frozen(kw_only=True)
class BatchSummary:
    """The summary of a batch run, as written to ``--summary`` and printed.

    ``ok``/``error``/percentiles/counts cover every result of the dataset (resumed included);
    ``items_per_s`` is the items finished by this run over its ``duration_s``.
    """

    total: int
    ok: int
    error: int
    resumed: int
    duration_s: float
    items_per_s: float
    p50_s: float | None
    p95_s: float | None
    finish_reasons: dict[str, int]
    approval_outcomes: dict[str, int]
    retries: int = 0
    processed: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the summary file."""
        return {
            "total": self.total,
            "ok": self.ok,
            "error": self.error,
            "resumed": self.resumed,
            "duration_s": round(self.duration_s, 6),
            "items_per_s": round(self.items_per_s, 6),
            "p50_s": None if self.p50_s is None else round(self.p50_s, 6),
            "p95_s": None if self.p95_s is None else round(self.p95_s, 6),
            "finish_reasons": self.finish_reasons,
            "approval_outcomes": self.approval_outcomes,
            "retries": self.retries,
            "processed": self.processed,
        }


def summarize(
    outcomes: Iterable[Outcome], *, total: int, resumed: int, processed: int, duration_s: float, retries: int
) -> BatchSummary:
    """Build the summary of ``outcomes`` (one per finished item of the dataset)."""
    outcomes = list(outcomes)
    finish = Counter(str(o.finish_reason) if o.finish_reason is not None else "none" for o in outcomes)
    approvals = Counter(a for o in outcomes for a in o.approval_outcomes)
    durations = [o.duration_s for o in outcomes]
    return BatchSummary(
        total=total,
        ok=sum(1 for o in outcomes if o.status == "ok"),
        error=sum(1 for o in outcomes if o.status != "ok"),
        resumed=resumed,
        duration_s=duration_s,
        items_per_s=processed / duration_s if duration_s > 0 else 0.0,
        p50_s=percentile(durations, 0.5),
        p95_s=percentile(durations, 0.95),
        finish_reasons=dict(sorted(finish.items())),
        approval_outcomes=dict(sorted(approvals.items())),
        retries=retries,
        processed=processed,
    )

"""The batch summary: counts, rate and latency percentiles over a results file's lines."""

from __future__ import annotations

from typing import Any, Iterable

import attrs

from .. import _display
from ..eval import EvalPlan, EvalTally, percentile as percentile

__all__ = ["BatchSummary", "Outcome", "Tally", "percentile", "summarize"]


@attrs.frozen(kw_only=True)
class Outcome:
    """What the summary needs of one result line (kept small for 100k-item runs)."""

    status: str
    finish_reason: str | None
    duration_s: float
    approval_outcomes: tuple[str, ...] = ()

    @classmethod
    def of(cls, line: dict[str, Any]) -> Outcome:
        approvals = line.get("approvals")
        finish = line.get("finish_reason")
        duration = line.get("duration_s")
        return cls(
            status=str(line.get("status")),
            finish_reason=finish if isinstance(finish, str) else None,
            duration_s=float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else 0.0,
            approval_outcomes=tuple(
                str(a.get("outcome")) for a in (approvals if isinstance(approvals, list) else ()) if isinstance(a, dict)
            ),
        )


@attrs.frozen(kw_only=True)
class BatchSummary:
    """The summary of a batch run, as written to the summary file and printed.

    ``ok``/``error``/percentiles/counts cover every result of the dataset (resumed included);
    ``items_per_s`` is the items finished by this run over its ``duration_s`` (None when
    this run had nothing left to do; ``note`` says so). ``results`` names the results file,
    ``warnings`` what was configured but could not take effect.
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
    evaluation: dict[str, Any] = attrs.field(factory=dict)  # scores, groups, usage, cost_usd, judge_usage
    run: dict[str, Any] | None = None
    stopped: str | None = None  # "budget": a --max-total-* limit stopped scheduling

    def __repr__(self) -> str:
        return _display.summary_text(self)

    def _repr_html_(self) -> str:
        return _display.summary_html(self)

    @property
    def scores(self) -> dict[str, Any]:
        """Metrics per scorer (``{}`` without scorers)."""
        value: dict[str, Any] = self.evaluation.get("scores", {})
        return value

    @property
    def groups(self) -> dict[str, Any] | None:
        """Metrics per group and scorer (with ``group_by``)."""
        value: dict[str, Any] | None = self.evaluation.get("groups")
        return value

    @property
    def usage(self) -> dict[str, int]:
        """Token totals over every result line."""
        value: dict[str, int] = self.evaluation.get("usage", {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
        return value

    @property
    def cost_usd(self) -> float | None:
        """The total cost (with prices)."""
        value: float | None = self.evaluation.get("cost_usd")
        return value
    results: str | None = None
    warnings: tuple[str, ...] = ()
    model: dict[str, Any] | None = None  # the model gateway's totals (calls, hits, 429s absorbed, ...), when one ran
    scorers_without_value: tuple[str, ...] = ()  # scorers that failed on every item that ran (exit 1)

    @property
    def note(self) -> str | None:
        """A sentence for a run that had nothing left to do, else None (a run the budget stopped
        before any line was written had work left)."""
        if self.processed or self.stopped:
            return None
        where = f" already in {self.results}" if self.results else " already done"
        return f"nothing left to do: all {self.total} items were{where}"

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the summary file."""
        out = self._counts()
        if not self.processed:
            out["items_per_s"] = None
        out["results"] = self.results
        out["warnings"] = list(self.warnings)
        if self.model is not None:
            out["model"] = self.model
        if self.evaluation.get("scores") is not None:
            out["scorers_without_value"] = list(self.scorers_without_value)
        if self.note is not None:
            out["note"] = self.note
        return out

    def _counts(self) -> dict[str, Any]:
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
            "usage": self.usage,
            **{k: v for k, v in self.evaluation.items() if k != "usage"},
            "stopped": self.stopped,
            **({"run": self.run} if self.run is not None else {}),
        }


class Tally(EvalTally):
    """The run's one tally (``eval.EvalTally``: counts, durations, usage, cost, scores, what
    this run spent) that also makes the ``BatchSummary``.

    Fed each result line as it is written, so a run keeps about 8 bytes per item (the
    durations, for p50/p95) instead of the lines themselves.
    """

    def __init__(self, plan: EvalPlan | None = None) -> None:
        super().__init__(plan)

    def add_outcome(self, outcome: Outcome) -> None:
        """Count one finished item given as an ``Outcome`` (statuses and latency only)."""
        if outcome.status == "ok":
            self.ok += 1
        else:
            self.error += 1
        self.durations.append(outcome.duration_s)
        self.finish_reasons[str(outcome.finish_reason) if outcome.finish_reason is not None else "none"] += 1
        self.approval_outcomes.update(outcome.approval_outcomes)

    def add(self, line: Any, *, this_run: bool = False, item: int | None = None) -> None:
        """Count one result line (a ``ResultLine``; an ``Outcome`` counts its statuses and latency)."""
        if isinstance(line, Outcome):
            self.add_outcome(line)
        else:
            super().add(line, this_run=this_run, item=item)

    def summary(self, *, total: int, resumed: int, processed: int, duration_s: float, retries: int) -> BatchSummary:
        """The summary of everything counted."""
        durations = list(self.durations)
        return BatchSummary(
            total=total,
            ok=self.ok,
            error=self.error,
            resumed=resumed,
            duration_s=duration_s,
            items_per_s=processed / duration_s if duration_s > 0 else 0.0,
            p50_s=percentile(durations, 0.5),
            p95_s=percentile(durations, 0.95),
            finish_reasons=dict(sorted(self.finish_reasons.items())),
            approval_outcomes=dict(sorted(self.approval_outcomes.items())),
            retries=retries,
            processed=processed,
        )


def summarize(
    outcomes: Iterable[Outcome], *, total: int, resumed: int, processed: int, duration_s: float, retries: int
) -> BatchSummary:
    """Build the summary of ``outcomes`` (one per finished item of the dataset)."""
    tally = Tally()
    for outcome in outcomes:
        tally.add_outcome(outcome)
    return tally.summary(total=total, resumed=resumed, processed=processed, duration_s=duration_s, retries=retries)

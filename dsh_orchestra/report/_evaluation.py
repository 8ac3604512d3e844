"""The evaluation part of a report: each scorer's mean and interval (from the summary, or
computed from the results as the summary would), per-group metrics, pass@k per k, the score
distributions, usage and cost per item and in total, and the run's metadata.

Pure data over result lines (every epoch's line) and the summary; ``_html`` draws it.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Mapping, Sequence

from ..eval import DEFAULT_REDUCER, ScoreTally, bootstrap_ci, parse_reducer, pass_at_k, pass_hat_k, percentile, reduce_items, scorer_names

DISTRIBUTION_BINS = 10
MAX_DISTINCT = 11  # up to this many distinct values are counted one by one, else binned


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def score_value(line: Mapping[str, Any], name: str) -> float | None:
    """The value of scorer ``name`` on one result line (None when missing or null)."""
    scores = line.get("scores")
    record = scores.get(name) if isinstance(scores, dict) else None
    return _number(record.get("value")) if isinstance(record, dict) else None


def _run(summary: Mapping[str, Any] | None) -> Mapping[str, Any]:
    run = summary.get("run") if isinstance(summary, dict) else None
    return run if isinstance(run, dict) else {}


def _reducer_of(summary: Mapping[str, Any] | None) -> str:
    reducer = _run(summary).get("reducer")
    if isinstance(reducer, str):
        try:
            parse_reducer(reducer)
            return reducer
        except ValueError:
            pass
    return DEFAULT_REDUCER


def _seed_of(summary: Mapping[str, Any] | None) -> int:
    seed = _run(summary).get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def _distribution(values: list[float]) -> dict[str, Any]:
    """Counts of the values: one bar per value when few are distinct, else equal bins."""
    if not values:
        return {"kind": "none", "bars": []}
    distinct = Counter(values)
    if len(distinct) <= MAX_DISTINCT:
        return {"kind": "values", "bars": [{"label": f"{v:g}", "count": n} for v, n in sorted(distinct.items())]}
    low, high = min(values), max(values)
    step = (high - low) / DISTRIBUTION_BINS
    counts = [0] * DISTRIBUTION_BINS
    for v in values:
        counts[min(DISTRIBUTION_BINS - 1, int((v - low) / step))] += 1
    return {"kind": "bins", "bars": [
        {"label": f"{low + i * step:.3g}–{low + (i + 1) * step:.3g}", "count": n} for i, n in enumerate(counts)
    ]}


def _pass_at_k(lines: Sequence[Mapping[str, Any]], name: str, epochs: int, seed: int = 0) -> list[dict[str, Any]] | None:
    """pass@k and pass^k for k = 1..epochs over the items with at least k valued epochs (0/1
    scores only), each with a percentile bootstrap ci95 over those items (``bootstrap_ci``, ``seed``)."""
    if epochs < 2:
        return None
    per_item: dict[str, dict[int, float | None]] = {}
    for line in lines:
        epoch = line.get("epoch", 1)
        per_item.setdefault(str(line.get("id")), {}).setdefault(epoch if isinstance(epoch, int) else 1, score_value(line, name))
    values = [v for item in per_item.values() for v in item.values() if v is not None]
    if epochs < 2 or not values or any(v not in (0.0, 1.0) for v in values):
        return None
    out = []
    for k in range(1, epochs + 1):
        estimates, all_k = [], []
        for item in per_item.values():
            present = [v for v in item.values() if v is not None]
            if len(present) >= k:
                correct = sum(1 for v in present if v == 1.0)
                estimates.append(pass_at_k(len(present), correct, k))
                all_k.append(pass_hat_k(len(present), correct, k))
        at, hat = bootstrap_ci(estimates, seed=seed), bootstrap_ci(all_k, seed=seed)
        out.append({"k": k, "value": math.fsum(estimates) / len(estimates) if estimates else None, "n": len(estimates),
                    "ci95": list(at) if at is not None else None,
                    "pass_hat": math.fsum(all_k) / len(all_k) if all_k else None,
                    "pass_hat_ci95": list(hat) if hat is not None else None})
    return out


def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "total": math.fsum(values) if values else 0,
        "mean": math.fsum(values) / len(values) if values else None,
        "median": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "n": len(values),
    }


def usage_payload(lines: Sequence[Mapping[str, Any]], summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Tokens and cost per item and in total (the summary's totals when it has them)."""
    usages = [u for u in (line.get("usage") for line in lines) if isinstance(u, dict)]
    costs = [c for c in (_number(line.get("cost_usd")) for line in lines) if c is not None]
    if not usages and not costs:
        return None
    totals = {key: int(math.fsum(_number(u.get(key)) or 0.0 for u in usages)) for key in ("input_tokens", "output_tokens", "total_tokens")}
    source = "results"
    if isinstance(summary, dict) and isinstance(summary.get("usage"), dict):
        totals = {key: summary["usage"].get(key, totals[key]) for key in totals}
        source = "summary"
    total_cost = _number(summary.get("cost_usd")) if isinstance(summary, dict) else None
    return {
        "totals": totals,
        "totals_source": source,
        "per_item_tokens": _spread([t for t in (_number(u.get("total_tokens")) for u in usages) if t is not None]),
        "cost_usd": total_cost if total_cost is not None else (math.fsum(costs) if costs else None),
        "per_item_cost": _spread(costs) if costs else None,
    }


def evaluation_payload(
    lines: Sequence[Mapping[str, Any]], summary: Mapping[str, Any] | None, *, group_by: str | None = None
) -> dict[str, Any] | None:
    """The evaluations section's data, or None when no line has scores and no usage."""
    names = scorer_names(lines)
    usage = usage_payload(lines, summary)
    summary_scores = summary.get("scores") if isinstance(summary, dict) and isinstance(summary.get("scores"), dict) else None
    if not names and usage is None and not summary_scores:
        return None
    reducer, seed = _reducer_of(summary), _seed_of(summary)
    for name in summary_scores or ():
        if name not in names:
            names.append(str(name))
    epochs = max((e for e in (line.get("epoch", 1) for line in lines) if isinstance(e, int) and not isinstance(e, bool)), default=1)
    computed: dict[str, Any] | None = None
    if names and (summary_scores is None or any(n not in summary_scores for n in names)):
        tally = ScoreTally(names, reducer=reducer, seed=seed)
        for line in lines:
            tally.add_line(dict(line))
        computed = tally.scores()
    scores: dict[str, Any] = {}
    for name in names:
        from_summary = summary_scores is not None and isinstance(summary_scores.get(name), dict)
        scores[name] = {**(summary_scores[name] if from_summary else (computed or {}).get(name, {})),  # type: ignore[index]
                        "source": "summary" if from_summary else "results"}
    groups = summary.get("groups") if isinstance(summary, dict) and isinstance(summary.get("groups"), dict) else None
    groups_source = "summary" if groups is not None else None
    if group_by is not None and names and groups is None:
        tally = ScoreTally(names, reducer=reducer, group_by=group_by, seed=seed)
        for line in lines:
            tally.add_line(dict(line))
        groups, groups_source = tally.groups(), "results"
    reduced, _ = reduce_items(lines, names, reducer)
    distributions = {
        name: _distribution([v for item in reduced.values() if (v := item.get(name)) is not None]) for name in names
    }
    return {
        "names": names,
        "scores": scores,
        "groups": groups,
        "groups_source": groups_source,
        "group_by": group_by or _run(summary).get("group_by"),
        "pass_at_k": {name: table for name in names if (table := _pass_at_k(lines, name, epochs, seed)) is not None},
        "distributions": distributions,
        "usage": usage,
        "epochs": epochs,
        "reducer": reducer,
        "run": dict(_run(summary)) or None,
    }

"""The leaderboard of compared runs: per scorer, the runs ranked by mean (highest first), each
with its interval, and which of its differences hold after the multiplicity correction. Pure."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ._columns import ReducedRun, _text
from ._metrics import array_metrics, cluster_metrics, metrics

ALPHA = 0.05


def leaderboard(
    values: Mapping[str, Mapping[str, Mapping[str, float | None]] | ReducedRun],
    names: Sequence[str],
    comparisons: Sequence[Mapping[str, Any]],
    *,
    clusters: Mapping[str, Mapping[str, Any]] | None = None,
    seed: int = 0,
    alpha: float = ALPHA,
) -> dict[str, list[dict[str, Any]]]:
    """``{scorer: [{"run", "rank", "mean", "ci95", "n", "better_than", "worse_than"}, ...]}``.

    ``values``: per run label, per item id, per scorer the reduced value (or the run's
    ``ReducedRun``); ``comparisons``:
    ``{"base", "candidate", "scorers": {name: {"diff", "p_adjusted"}}}``. A run is
    ``better_than`` another when their comparison's adjusted p is below ``alpha`` and the
    difference favours it. The mean and ci95 are the run's own over its items (clustered with
    ``clusters``: label -> id -> cluster); runs without a value rank last, ties share a rank.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        rows = []
        for label, items in values.items():
            if clusters is None and isinstance(items, ReducedRun):  # (no list of a million values)
                column = items.values[name]
                present = column[~np.isnan(column)]
                found = array_metrics(present, len(items) - len(present), seed=seed)
            else:
                kept_ids, kept = _kept(items, name, clusters is not None)
                errors = len(items) - len(kept)
                if clusters is not None:
                    found = cluster_metrics(kept, [clusters[label][i] for i in kept_ids], errors, seed=seed, strict=False)
                else:
                    found = metrics(kept, errors, seed=seed)
            rows.append({"run": label, "mean": found["mean"], "ci95": found["ci95"], "n": found["n"],
                         "better_than": [], "worse_than": []})
        by_label = {row["run"]: row for row in rows}
        for comparison in comparisons:
            entry = comparison["scorers"].get(name)
            if not entry or entry.get("p_adjusted") is None or entry["p_adjusted"] >= alpha or not entry.get("diff"):
                continue
            high, low = ((comparison["candidate"], comparison["base"]) if entry["diff"] > 0
                         else (comparison["base"], comparison["candidate"]))
            by_label[high]["better_than"].append(low)
            by_label[low]["worse_than"].append(high)
        rows.sort(key=lambda row: (row["mean"] is None, -(row["mean"] or 0.0)))
        rank, previous = 0, object()
        for index, row in enumerate(rows, 1):
            if row["mean"] != previous:
                rank, previous = index, row["mean"]
            row["rank"] = rank
        out[name] = rows
    return out


def _kept(items: Mapping[str, Mapping[str, float | None]] | ReducedRun, name: str, with_ids: bool) -> tuple[list[str], list[float]]:
    """The ids (with ``with_ids``) and values of the items with a value of scorer ``name``, in order."""
    if isinstance(items, ReducedRun):
        column = items.values[name]
        present = ~np.isnan(column)
        ids = [_text(i) for i in items.ids[present].tolist()] if with_ids else []
        return ids, column[present].tolist()
    pairs = [(i, v) for i, item in items.items() if (v := item.get(name)) is not None]
    return [i for i, _ in pairs], [v for _, v in pairs]

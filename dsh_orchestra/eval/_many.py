"""Many runs at once: each candidate against the base (or every pair), the p-values adjusted
across comparisons and scorers (Holm by default), and a leaderboard. Pure."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ._columns import RunColumns, reduce_run, run_columns
from ._compare import CompareInputError, compare_runs, item_clusters
from ._leaderboard import ALPHA, leaderboard
from ._metrics import DEFAULT_REDUCER, Reducer, parse_reducer
from ._multiple import DEFAULT_CORRECTION, adjust_pvalues


def compare_many(
    runs: Sequence[tuple[str, Sequence[Mapping[str, Any]] | RunColumns]],
    *,
    all_pairs: bool = False,
    scorers: Sequence[str] | None = None,
    reducer: str | Reducer = DEFAULT_REDUCER,
    seed: int = 0,
    cluster_by: str | None = None,
    correction: str = DEFAULT_CORRECTION,
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """Compare ``runs`` (``(label, result lines)``, the first the base): each candidate with the
    base, or with ``all_pairs`` every pair (i < j, the earlier as base).

    Returns ``{"runs", "base", "all_pairs", "correction", "alpha", "cluster_by",
    "comparisons": [{"base", "candidate", <compare_runs' document>}], "leaderboard"}``; every
    ``p_adjusted`` is adjusted over all comparisons and scorers together.

    Raises:
        CompareInputError: fewer than two runs, a label given twice, or as ``compare_runs``.
    """
    labels = [label for label, _ in runs]
    if len(runs) < 2:
        raise CompareInputError("give a base and at least one candidate")
    if len(set(labels)) != len(labels):
        raise CompareInputError(f"a run is given twice: {sorted({x for x in labels if labels.count(x) > 1})}")
    chosen = reducer if isinstance(reducer, Reducer) else parse_reducer(reducer)
    read = [(label, run_columns(lines, cluster_by)) for label, lines in runs]  # each run read once
    if scorers is None:
        names = list(dict.fromkeys(n for _, run in read for n in run.names))
    else:
        names = list(dict.fromkeys(scorers))
        known = {n for _, run in read for n in run.names}
        missing = [n for n in names if n not in known]
        if missing:
            raise CompareInputError(f"scorer {missing[0]!r} is in no run (their scorers: {', '.join(sorted(known)) or 'none'})")
    pairs = [(i, j) for i in range(len(runs)) for j in range(i + 1, len(runs))] if all_pairs else [(0, j) for j in range(1, len(runs))]
    reduced = [reduce_run(run, names, chosen) for _, run in read]  # once per run
    comparisons: list[dict[str, Any]] = []
    for i, j in pairs:
        doc = compare_runs(read[i][1], read[j][1], scorers=names, reducer=chosen, seed=seed, cluster_by=cluster_by,
                           correction="none", labels=(labels[i], labels[j]), _of_other_runs=True,
                           _reduced=(reduced[i], reduced[j]))
        del doc["leaderboard"]  # one for every run, below
        comparisons.append({"base": labels[i], "candidate": labels[j], **doc})
    entries = [entry for doc in comparisons for entry in doc["scorers"].values()]
    for entry, p in zip(entries, adjust_pvalues([e["p_value"] for e in entries], correction), strict=True):
        entry["p_adjusted"] = p
    for one in comparisons:
        one["correction"] = correction
    values = dict(zip(labels, reduced, strict=True))
    clusters = {label: item_clusters(run, cluster_by) for label, run in read} if cluster_by is not None else None
    return {
        "runs": labels,
        "base": None if all_pairs else labels[0],
        "all_pairs": all_pairs,
        "correction": correction,
        "alpha": alpha,
        "cluster_by": cluster_by,
        "comparisons": comparisons,
        "leaderboard": leaderboard(values, names, comparisons, clusters=clusters, seed=seed, alpha=alpha),
    }

"""Every statistic of issue 26 on 100,000 items in 1,000 clusters: each under 10 s.

One process; numpy imported first. Each statistic is timed (wall, ``time.perf_counter``; CPU,
``time.process_time``) from its inputs in memory (result-line dicts, as read from a results
file) to its output, ``--runs`` times; the median is reported:

* ``cluster_metrics``: CR1 stderr, design effect and the 10,000-resample cluster bootstrap of
  100,000 0/1 values;
* ``summary --cluster-by, 3 epochs, pass^2``: ``ScoreTally`` fed 300,000 lines (100,000 items ×
  3 epochs, two scorers), reduced with pass^2, clustered metrics and the epoch variance;
* ``compare --cluster-by``: ``compare_runs`` of two 100,000-item runs (two scorers: 0/1 and a
  judge's 0/0.5/1), clustered; and the same with a continuous second scorer;
* ``compare 3 candidates --cluster-by, holm``: ``compare_many`` of a base and three candidates,
  clustered (without clusters a 0/1 scorer's exact McNemar test dominates: its sum of C(b + c, i)
  big integers grows as (b + c)^2, about 48,000 discordant pairs here);
* ``plan paired --epochs 4 --cluster-by``: ``plan_runs`` of two 3-epoch runs;
* ``score --labels``: ``agreement`` of 100,000 judge values (0/0.5/1) with 1,000 labels (kappa, PPI);
* ``adjust_pvalues holm / bh``: 100,000 p-values.

    python bench/stats_scale.py --runs 3          # a markdown table
    python bench/stats_scale.py --runs 1 --only plan --only labels
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from dsh_orchestra.eval import (  # noqa: E402
    ScoreTally,
    adjust_pvalues,
    agreement,
    cluster_metrics,
    compare_many,
    compare_runs,
    plan_runs,
)

ITEMS, CLUSTERS = 100_000, 1_000


def lines(seed: int, epochs: int = 1, rate: float = 0.6, continuous: bool = False) -> list[dict[str, Any]]:
    """Result lines of ITEMS items in CLUSTERS clusters (metadata ``passage``): scorer ``a`` 0/1,
    ``b`` a judge's 0 / 0.5 / 1 (or, ``continuous``, uniform on [0, 1])."""
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, CLUSTERS, ITEMS)
    shift = rng.normal(0, 0.1, CLUSTERS)
    out = []
    for e in range(1, epochs + 1):
        a = (rng.random(ITEMS) < rate + shift[cluster]).astype(float)
        b = rng.random(ITEMS) if continuous else rng.choice([0.0, 0.5, 1.0], ITEMS)
        for i in range(ITEMS):
            line: dict[str, Any] = {"id": f"i{i}", "status": "ok", "metadata": {"passage": f"p{cluster[i]}"},
                                    "scores": {"a": {"value": a[i]}, "b": {"value": b[i]}}}
            if epochs > 1:
                line["epoch"] = e
            out.append(line)
    return out


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", action="append", default=None, metavar="TEXT",
                        help="only the statistics whose name contains TEXT (repeatable)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    values = (rng.random(ITEMS) < 0.6).astype(float).tolist()
    clusters = rng.integers(0, CLUSTERS, ITEMS).tolist()
    one = [lines(s) for s in (1, 2, 3, 4)]
    three = [lines(s, epochs=3) for s in (5, 6)]
    smooth = [lines(s, continuous=True) for s in (7, 8)]
    judge = rng.choice([0.0, 0.5, 1.0], ITEMS).tolist()
    judged = {f"i{i}": v for i, v in enumerate(judge)}
    labels = {f"i{i}": float(rng.random() < 0.6) for i in rng.choice(ITEMS, 1000, replace=False)}
    pvalues = rng.random(ITEMS).tolist()

    def summary() -> None:
        tally = ScoreTally(["a", "b"], reducer="pass^2", cluster_by="passage")
        for line in three[0]:
            tally.add_line(line)
        tally.scores()

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("cluster_metrics (CR1 stderr, design effect, cluster bootstrap)", lambda: cluster_metrics(values, clusters)),
        ("summary --cluster-by, 3 epochs, pass^2 (300,000 lines)", summary),
        ("compare --cluster-by (2 runs, 2 scorers)", lambda: compare_runs(one[0], one[1], cluster_by="passage")),
        ("compare --cluster-by, continuous scores (2 runs, 2 scorers)",
         lambda: compare_runs(smooth[0], smooth[1], cluster_by="passage")),
        ("compare 3 candidates --cluster-by, holm (4 runs, 2 scorers)",
         lambda: compare_many(list(zip("wxyz", one, strict=True)), cluster_by="passage")),
        ("plan paired --epochs 4 --cluster-by (2 runs × 3 epochs)",
         lambda: plan_runs(three[0], three[1], mde=0.01, epochs=4, cluster_by="passage")),
        ("score --labels: agreement + PPI (1,000 labels)", lambda: agreement(judged, labels)),
        ("adjust_pvalues holm", lambda: adjust_pvalues(pvalues, "holm")),
        ("adjust_pvalues bh", lambda: adjust_pvalues(pvalues, "bh")),
    ]
    print(f"| statistic ({ITEMS:,} items, {CLUSTERS:,} clusters) | wall s (median of {args.runs}) | CPU s |")
    print("|---|---|---|")
    for name, fn in cases:
        if args.only and not any(text in name for text in args.only):
            continue
        wall, cpu = timed(fn, args.runs)
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |", flush=True)


if __name__ == "__main__":
    main()

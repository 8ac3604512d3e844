"""Epochs as information: how much of the spread of a score is between items and how much is
within an item (from epoch to epoch), and how much the epochs narrowed the interval. Pure.

With m items, item i with n_i >= 1 valid epoch values, item means x̄_i and (for n_i >= 2) the
sample variance s_i^2 of its epoch values (n_i - 1 denominator), a one-way random-effects
decomposition by moments:

* within-item variance ``σ_w^2 = mean of s_i^2`` over the items with n_i >= 2;
* between-item variance ``σ_b^2 = max(0, var(x̄_i) - σ_w^2 * h)``, ``h = mean(1 / n_i)``,
  ``var`` the sample variance (m - 1) of the item means;
* the standard error of the mean of item means with the epochs, ``sqrt((σ_b^2 + σ_w^2 h) / m)``,
  and with one epoch per item, ``sqrt((σ_b^2 + σ_w^2) / m)``; ``narrowing`` is 1 minus their
  ratio (the share by which the epochs narrowed the interval; 0 with no within-item variance).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence


def epoch_variance(items: Iterable[Sequence[float]]) -> dict[str, Any] | None:
    """``{"items", "mean_epochs", "within_var", "between_var", "stderr_epochs",
    "stderr_one_epoch", "narrowing"}`` of the items' valid epoch values (see the module);
    None with fewer than two items, or no item with two epochs."""
    kept = [list(values) for values in items if len(values) >= 1]
    m = len(kept)
    if m < 2 or not any(len(v) >= 2 for v in kept):
        return None
    means = [math.fsum(v) / len(v) for v in kept]
    variances = []
    for values, centre in zip(kept, means, strict=True):
        if len(values) >= 2:
            variances.append(math.fsum((x - centre) ** 2 for x in values) / (len(values) - 1))
    within = math.fsum(variances) / len(variances)
    grand = math.fsum(means) / m
    spread = math.fsum((x - grand) ** 2 for x in means) / (m - 1)
    harmonic = math.fsum(1.0 / len(v) for v in kept) / m
    between = max(0.0, spread - within * harmonic)
    with_epochs = math.sqrt((between + within * harmonic) / m)
    one_epoch = math.sqrt((between + within) / m)
    return {
        "items": m,
        "mean_epochs": math.fsum(len(v) for v in kept) / m,
        "within_var": within,
        "between_var": between,
        "stderr_epochs": with_epochs,
        "stderr_one_epoch": one_epoch,
        "narrowing": 1.0 - with_epochs / one_epoch if one_epoch > 0 else 0.0,
    }


def variance_at(between: float, within: float, epochs: int) -> float:
    """The variance of one item's mean over ``epochs`` epochs: ``σ_b^2 + σ_w^2 / K``."""
    return between + within / epochs


def add_epoch_variance(scores: dict[str, dict[str, Any]], names: Sequence[str],
                       per_scorer: Iterable[Sequence[Sequence[float]]]) -> None:
    """Add ``"epochs"`` (``epoch_variance``) to each scorer's ``scores`` entry: ``per_scorer[i]``
    holds, per item, scorer ``names[i]``'s valid epoch values (a run where some item has two or
    more epochs)."""
    for name, per_item in zip(names, per_scorer, strict=True):
        found = epoch_variance(per_item)
        if found is not None:
            scores[name]["epochs"] = found

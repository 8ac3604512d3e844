"""How far to trust a scorer (a model judge): its agreement with people's labels on the
labelled items, and a prediction-powered estimate of the mean. Pure.

With the labelled items' pairs (y_i the label, f_i the scorer's value), i = 1..n:

* ``accuracy = #(f_i = y_i) / n``;
* the confusion matrix ``C[a][b]`` = items labelled category a that the scorer gave b, over
  the ordered categories (the judge's 0 / 0.5 / 1 when every value is one of them, else the
  values seen, at most 10);
* Cohen's kappa ``κ = (p_o - p_e) / (1 - p_e)``, ``p_o = sum_a C[a][a] / n``, ``p_e = sum_a
  r_a c_a / n^2`` (r, c the row and column totals); the weighted kappa (linear weights)
  ``κ_w = 1 - sum w_ab C[a][b] / sum w_ab r_a c_b / n``, ``w_ab = |a - b| / (k - 1)`` for
  category indices a, b of k (Cohen 1968);
* the prediction-powered mean (Angelopoulos et al. 2023) ``θ = mean_N(f) - mean_n(f - y)``:
  the scorer's mean over all N items with a value, corrected by its mean error on the
  labelled ones, with variance ``s_f^2 / N + s_r^2 / n - 2 s_fr / N`` (r = f - y; s_f^2 over
  all items, s_r^2 and the covariance s_fr of f and r over the labelled ones, n - 1
  denominators: the labelled items are part of the N) and the interval ``θ ± z_0.975 sqrt(var)``.
  Valid when the labelled items are a random sample of the items.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Mapping, Sequence

GRADE_LABELS = {"correct": 1.0, "partial": 0.5, "incorrect": 0.0}
JUDGE_LEVELS = (0.0, 0.5, 1.0)
MAX_LEVELS = 10


class LabelsError(ValueError):
    """A labels file that cannot be used (an unknown id, a label of the wrong type); the message says which."""


def label_value(value: Any) -> float | None:
    """A label as a number: a finite number, a bool (1/0) or a grade ``correct`` / ``partial``
    / ``incorrect``; None for anything else."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and value in GRADE_LABELS:
        return GRADE_LABELS[value]
    return None


def parse_labels(lines: Sequence[Any], known: Sequence[str] | None = None, *, where: str = "labels") -> dict[str, float]:
    """``{id: label}`` of JSON objects ``{"id": ..., "label": ...}``.

    Raises:
        LabelsError: a line that is not such an object, a label of the wrong type, an id given
            twice or (with ``known``) an id that is not one of ``known``.
    """
    out: dict[str, float] = {}
    allowed = set(known) if known is not None else None
    for number, line in enumerate(lines, 1):
        if not isinstance(line, dict) or "id" not in line or "label" not in line:
            raise LabelsError(f"{where} line {number}: expected {{\"id\": ..., \"label\": ...}}")
        item_id = str(line["id"])
        value = label_value(line["label"])
        if value is None:
            raise LabelsError(f"{where} line {number} (id {item_id!r}): the label must be a number, true/false or "
                              f"correct/partial/incorrect, not {line['label']!r}")
        if item_id in out:
            raise LabelsError(f"{where} line {number}: id {item_id!r} is labelled twice")
        if allowed is not None and item_id not in allowed:
            raise LabelsError(f"{where} line {number}: id {item_id!r} is not an item of the results")
        out[item_id] = value
    if not out:
        raise LabelsError(f"{where}: no label")
    return out


def confusion(labels: Sequence[float], values: Sequence[float], levels: Sequence[float]) -> list[list[int]]:
    """``C[a][b]``: the pairs with label ``levels[a]`` and value ``levels[b]``."""
    index = {level: i for i, level in enumerate(levels)}
    table = [[0] * len(levels) for _ in levels]
    for y, f in zip(labels, values, strict=True):
        table[index[y]][index[f]] += 1
    return table


def kappa(table: Sequence[Sequence[int]], weights: str | None = None) -> float | None:
    """Cohen's kappa of a square confusion table (``weights="linear"``: the weighted one; see
    the module). None when it is undefined (every pair in one category)."""
    k = len(table)
    n = sum(map(sum, table))
    if n == 0 or k < 2:
        return None
    rows = [sum(r) for r in table]
    cols = [sum(table[a][b] for a in range(k)) for b in range(k)]
    if weights is None:
        observed = sum(table[a][a] for a in range(k)) / n
        expected = sum(rows[a] * cols[a] for a in range(k)) / n**2
        return None if expected == 1.0 else (observed - expected) / (1.0 - expected)
    if weights != "linear":
        raise ValueError(f"weights must be None or 'linear', not {weights!r}")
    disagree = sum(abs(a - b) / (k - 1) * table[a][b] for a in range(k) for b in range(k)) / n
    chance = sum(abs(a - b) / (k - 1) * rows[a] * cols[b] for a in range(k) for b in range(k)) / n**2
    return None if chance == 0.0 else 1.0 - disagree / chance


def ppi_mean(all_values: Sequence[float], labelled: Sequence[tuple[float, float]], *, confidence: float = 0.95) -> dict[str, Any]:
    """The prediction-powered mean: ``{"mean", "stderr", "ci95", "n_all", "n_labelled"}`` from
    the scorer's values on all items and (value, label) pairs of the labelled ones."""
    big, n = len(all_values), len(labelled)
    out: dict[str, Any] = {"mean": None, "stderr": None, "ci95": None, "n_all": big, "n_labelled": n}
    if big < 2 or n < 2:
        return out
    f_mean = math.fsum(all_values) / big
    rect = [f - y for f, y in labelled]
    r_mean = math.fsum(rect) / n
    lf = [f for f, _ in labelled]
    lf_mean = math.fsum(lf) / n
    s_f = math.fsum((x - f_mean) ** 2 for x in all_values) / (big - 1)
    s_r = math.fsum((r - r_mean) ** 2 for r in rect) / (n - 1)
    s_fr = math.fsum((f - lf_mean) * (r - r_mean) for f, r in zip(lf, rect, strict=True)) / (n - 1)
    variance = max(0.0, s_f / big + s_r / n - 2 * s_fr / big)
    centre = f_mean - r_mean
    half = NormalDist().inv_cdf((1 + confidence) / 2) * math.sqrt(variance)
    out.update(mean=centre, stderr=math.sqrt(variance), ci95=[centre - half, centre + half])
    return out


def agreement(values: Mapping[str, float | None], labels: Mapping[str, float]) -> dict[str, Any]:
    """One scorer's agreement with the labels: ``n`` labelled items with a value, ``accuracy``,
    ``levels``, ``confusion`` (rows: labels, columns: the scorer), ``kappa``,
    ``weighted_kappa`` (linear), ``label_mean``, ``scorer_mean`` (on the labelled items) and
    ``ppi`` (the prediction-powered mean; see the module). ``values``: every item's reduced
    value (None: no value)."""
    pairs = [(f, labels[i]) for i, f in values.items() if i in labels and f is not None]
    n = len(pairs)
    seen = sorted({f for f, _ in pairs} | {y for _, y in pairs})
    levels: list[float] | None
    if seen and all(v in JUDGE_LEVELS for v in seen):
        levels = list(JUDGE_LEVELS)
    else:
        levels = seen if len(seen) <= MAX_LEVELS else None
    table = confusion([y for _, y in pairs], [f for f, _ in pairs], levels) if levels is not None and n else None
    return {
        "n": n,
        "accuracy": sum(1 for f, y in pairs if f == y) / n if n else None,
        "levels": levels,
        "confusion": table,
        "kappa": kappa(table) if table is not None else None,
        "weighted_kappa": kappa(table, "linear") if table is not None else None,
        "label_mean": math.fsum(y for _, y in pairs) / n if n else None,
        "scorer_mean": math.fsum(f for f, _ in pairs) / n if n else None,
        "ppi": ppi_mean([v for v in values.values() if v is not None], pairs),
    }

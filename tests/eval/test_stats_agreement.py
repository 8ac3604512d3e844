"""Judge agreement: kappa against a hand-computed table (and statsmodels), PPI coverage by simulation."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from statsmodels.stats.inter_rater import cohens_kappa

from dsh_orchestra.eval._agreement import LabelsError, agreement, confusion, kappa, parse_labels, ppi_mean

# rows: people's label incorrect / partial / correct; columns: the judge's
TABLE = [[20, 5, 0], [3, 10, 2], [1, 4, 55]]


def test_kappa_of_a_hand_computed_table() -> None:
    # p_o = 85/100; p_e = (25*24 + 15*19 + 60*57) / 100^2 = 4305/10000; κ = 4195/5695 = 839/1139
    assert kappa(TABLE) == pytest.approx(float(Fraction(839, 1139)), rel=1e-15)
    # linear weights |a-b|/2: observed 8/100, chance 4280/10000: κ_w = 1 - 80/428 = 87/107
    assert kappa(TABLE, "linear") == pytest.approx(float(Fraction(87, 107)), rel=1e-15)


def test_kappa_matches_statsmodels() -> None:
    assert kappa(TABLE) == pytest.approx(cohens_kappa(np.asarray(TABLE)).kappa, rel=1e-12)
    assert kappa(TABLE, "linear") == pytest.approx(cohens_kappa(np.asarray(TABLE), wt="linear").kappa, rel=1e-12)


def test_kappa_undefined_and_bad_weights() -> None:
    assert kappa([[5, 0], [0, 0]]) is None
    with pytest.raises(ValueError, match="linear"):
        kappa(TABLE, "quadratic")


def test_agreement_of_a_judge() -> None:
    values: dict[str, float | None] = {}
    labels: dict[str, float] = {}
    grades = (0.0, 0.5, 1.0)
    k = 0
    for a, row in enumerate(TABLE):
        for b, count in enumerate(row):
            for _ in range(count):
                values[f"i{k}"], labels[f"i{k}"] = grades[b], grades[a]
                k += 1
    values.update({"unlabelled": 1.0, "failed": None})
    out = agreement(values, labels)
    assert out["n"] == 100 and out["levels"] == [0.0, 0.5, 1.0]
    assert out["confusion"] == TABLE
    assert out["accuracy"] == pytest.approx(0.85)
    assert out["kappa"] == pytest.approx(839 / 1139) and out["weighted_kappa"] == pytest.approx(87 / 107)
    assert out["ppi"]["n_all"] == 101 and out["ppi"]["n_labelled"] == 100


def test_confusion_rows_are_labels() -> None:
    assert confusion([1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0]) == [[1, 0], [1, 1]]


def test_parse_labels() -> None:
    assert parse_labels([{"id": "a", "label": "partial"}, {"id": 2, "label": True}, {"id": "c", "label": 0}]) == {
        "a": 0.5, "2": 1.0, "c": 0.0}
    with pytest.raises(LabelsError, match="line 1 .*must be a number"):
        parse_labels([{"id": "a", "label": "maybe"}])
    with pytest.raises(LabelsError, match="'zz' is not an item"):
        parse_labels([{"id": "zz", "label": 1}], known=["a"])
    with pytest.raises(LabelsError, match="labelled twice"):
        parse_labels([{"id": "a", "label": 1}, {"id": "a", "label": 0}])
    with pytest.raises(LabelsError, match="expected"):
        parse_labels([["a", 1]])


def test_ppi_mean_formula() -> None:
    f_all = [1.0, 0.0, 1.0, 1.0, 0.5, 0.0]
    labelled = [(1.0, 1.0), (0.0, 1.0), (1.0, 0.0)]
    out = ppi_mean(f_all, labelled)
    r = np.array([0.0, -1.0, 1.0])
    lf = np.array([1.0, 0.0, 1.0])
    expected_var = np.var(f_all, ddof=1) / 6 + np.var(r, ddof=1) / 3 - 2 * np.cov(lf, r, ddof=1)[0, 1] / 6
    assert out["mean"] == pytest.approx(np.mean(f_all) - r.mean())
    assert out["stderr"] == pytest.approx(np.sqrt(expected_var))


def test_ppi_interval_covers_at_95_percent() -> None:
    """Seeded simulation: a judge that errs (and is biased) on 1,000 items, 100 of them labelled at
    random; over 1,000 runs the interval holds the true mean in 95 % ± 2.5 % of them, while the
    judge's own mean is biased."""
    rng = np.random.default_rng(20231)
    truth_rate, big, n, runs = 0.6, 1000, 100, 1000
    covered = 0
    for _ in range(runs):
        y = (rng.random(big) < truth_rate).astype(float)
        # the judge: right 80 % of the time on correct answers, calls 30 % of wrong ones correct
        f = np.where(y == 1.0, (rng.random(big) < 0.8).astype(float), (rng.random(big) < 0.3).astype(float))
        picked = rng.choice(big, n, replace=False)
        out = ppi_mean(f.tolist(), list(zip(f[picked].tolist(), y[picked].tolist(), strict=True)))
        covered += out["ci95"][0] <= truth_rate <= out["ci95"][1]
    assert abs(covered / runs - 0.95) <= 0.025

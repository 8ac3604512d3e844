"""Clustered standard errors against statsmodels' cluster-robust OLS; the cluster bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm

from dsh_orchestra.eval._cluster import (
    ClusterError,
    cluster_bootstrap_ci,
    cluster_of,
    cluster_stderr,
    design_effect,
)
from dsh_orchestra.eval._metrics import cluster_metrics, stderr


def _statsmodels_se(values: list[float], clusters: list[int]) -> float:
    y = np.asarray(values)
    fit = sm.OLS(y, np.ones(len(y))).fit(cov_type="cluster", cov_kwds={"groups": np.asarray(clusters)})
    # the defaults we match: the CR1 small-sample factor is on
    assert fit.cov_kwds["use_correction"] is True
    return float(fit.bse[0])


@pytest.mark.parametrize("seed", range(6))
def test_cluster_stderr_matches_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    g = int(rng.integers(2, 30))
    clusters = rng.integers(0, g, n).tolist()
    effects = rng.normal(0, 1, g)
    values = (effects[clusters] + rng.normal(0, 1, n)).tolist()
    if seed % 2:  # 0/1 scores
        values = [float(v > 0) for v in values]
    ours = cluster_stderr(values, clusters)
    assert ours is not None
    assert ours == pytest.approx(_statsmodels_se(values, clusters), rel=1e-12, abs=1e-15)


def test_cluster_stderr_on_fixed_data_and_strings() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.5, 0.25]
    clusters = ["a", "a", "b", "b", "b", "c", "c", "d", "d"]
    codes = {"a": 0, "b": 1, "c": 2, "d": 3}
    expected = _statsmodels_se(values, [codes[c] for c in clusters])
    assert cluster_stderr(values, clusters) == pytest.approx(expected, rel=1e-12)
    # Miller 2024's formula by hand: G/(G-1) * sum_g (sum of residuals)^2 / N^2
    centre = sum(values) / len(values)
    sums = {c: 0.0 for c in codes}
    for v, c in zip(values, clusters, strict=True):
        sums[c] += v - centre
    assert cluster_stderr(values, clusters) == pytest.approx(math.sqrt(4 / 3 * sum(s * s for s in sums.values())) / 9, rel=1e-12)


def test_singletons_give_the_iid_stderr_up_to_the_factor() -> None:
    values = [0.1, 0.9, 0.4, 0.7, 0.3]
    clustered = cluster_stderr(values, list(range(5)))
    iid = stderr(values)
    assert clustered is not None and iid is not None
    assert clustered == pytest.approx(iid, rel=1e-12)  # G/(G-1) * Σe²/N² = s²/N when G = N
    assert design_effect(values, list(range(5))) == pytest.approx(1.0)


def test_one_cluster_has_no_clustered_stderr() -> None:
    assert cluster_stderr([1.0, 0.0], ["a", "a"]) is None
    with pytest.raises(ClusterError, match="at least 2"):
        cluster_metrics([1.0, 0.0], ["a", "a"])


def test_design_effect_of_perfectly_clustered_scores() -> None:
    # 10 clusters of 10 identical values: deff ≈ cluster size
    values = [float(c % 2) for c in range(10) for _ in range(10)]
    clusters = [c for c in range(10) for _ in range(10)]
    deff = design_effect(values, clusters)
    assert deff is not None and 9.0 < deff < 12.0


def test_cluster_bootstrap_is_seeded_and_resamples_clusters() -> None:
    values = [float(c % 2) for c in range(10) for _ in range(10)]
    clusters = [c for c in range(10) for _ in range(10)]
    rng = np.random.default_rng(0)
    spread, groups = rng.random(300).tolist(), rng.integers(0, 60, 300).tolist()
    assert cluster_bootstrap_ci(spread, groups, seed=3) == cluster_bootstrap_ci(spread, groups, seed=3)
    assert cluster_bootstrap_ci(spread, groups, seed=3) != cluster_bootstrap_ci(spread, groups, seed=4)
    first = cluster_bootstrap_ci(values, clusters, seed=3)
    assert first is not None
    # whole clusters move together: the interval is as wide as for 10 values, not 100
    from dsh_orchestra.eval import bootstrap_ci

    ten = bootstrap_ci([float(c % 2) for c in range(10)], seed=3)
    assert ten is not None
    assert first[1] - first[0] == pytest.approx(ten[1] - ten[0], abs=0.06)
    # the percentiles of the resampled means, computed here with other draws (G index draws per resample)
    rng = np.random.default_rng(11)
    draws = rng.integers(0, 10, size=(4000, 10))
    sums = np.bincount(clusters, weights=values)
    direct = np.percentile(sums[draws].sum(axis=1) / 100, [2.5, 97.5])
    ours = cluster_bootstrap_ci(values, clusters, seed=11, resamples=4000)
    assert ours is not None
    assert ours[0] == pytest.approx(direct[0], abs=0.05) and ours[1] == pytest.approx(direct[1], abs=0.05)


def test_cluster_metrics_fields() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    out = cluster_metrics(values, ["a", "a", "b", "b", "c", "c"], 1, seed=0)
    assert out["n"] == 6 and out["n_error"] == 1 and out["n_clusters"] == 3
    assert out["stderr_iid"] == pytest.approx(stderr(values))
    assert out["design_effect"] == pytest.approx(out["stderr"] ** 2 / out["stderr_iid"] ** 2)
    assert out["ci95"][0] <= out["mean"] <= out["ci95"][1]


def test_cluster_of_an_item_without_the_field_is_its_own() -> None:
    assert cluster_of({"passage": "p1"}, "passage", "x") == "p1"
    assert cluster_of({"passage": 3}, "passage", "x") == "3"
    assert cluster_of({}, "passage", "x") == ("item", "x")
    assert cluster_of({}, "passage", "x") != cluster_of({}, "passage", "y")

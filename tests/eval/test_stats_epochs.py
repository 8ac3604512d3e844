"""pass^k and the within/between-item variance of epochs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dsh_orchestra.eval import parse_reducer, reduce_epochs
from dsh_orchestra.eval._epochs import epoch_variance
from dsh_orchestra.eval._metrics import pass_hat_k


def test_pass_hat_k() -> None:
    assert pass_hat_k(5, 3, 2) == pytest.approx(math.comb(3, 2) / math.comb(5, 2))
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(4, 3, 4) == 0.0
    # unbiased: the mean over every k-subset of the epochs of "all k correct"
    from itertools import combinations

    epochs = [1, 0, 1, 1, 0, 1]
    subsets = list(combinations(epochs, 3))
    assert pass_hat_k(6, 4, 3) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))
    with pytest.raises(ValueError, match="pass\\^k"):
        pass_hat_k(2, 3, 1)


def test_pass_hat_k_reducer_leaves_out_items_with_fewer_than_k() -> None:
    reducer = parse_reducer("pass^2", epochs=3)
    assert reducer.k == 2
    assert reduce_epochs([1.0, 1.0, 0.0], reducer) == pytest.approx(1 / 3)
    assert reduce_epochs([1.0, None, None], reducer) is None
    assert reduce_epochs([1.0, 1.0, 0.0], "pass@2") == 1.0
    with pytest.raises(ValueError, match="k <= the epochs"):
        parse_reducer("pass^4", epochs=3)


def test_epoch_variance_matches_one_way_anova_when_balanced() -> None:
    rng = np.random.default_rng(5)
    m, k = 40, 4
    data = rng.normal(0, 1.0, (m, 1)) + rng.normal(0, 0.5, (m, k))
    out = epoch_variance(data.tolist())
    assert out is not None
    msw = float(np.sum((data - data.mean(axis=1, keepdims=True)) ** 2) / (m * (k - 1)))
    msb = float(k * np.sum((data.mean(axis=1) - data.mean()) ** 2) / (m - 1))
    assert out["within_var"] == pytest.approx(msw, rel=1e-12)
    assert out["between_var"] == pytest.approx(max(0.0, (msb - msw) / k), rel=1e-12)
    assert out["stderr_epochs"] == pytest.approx(float(np.std(data.mean(axis=1), ddof=1) / np.sqrt(m)), rel=1e-12)
    assert 0 < out["narrowing"] < 1


def test_epoch_variance_recovers_the_components() -> None:
    rng = np.random.default_rng(9)
    data = rng.normal(0, 0.6, (4000, 1)) + rng.normal(0, 0.8, (4000, 3))
    out = epoch_variance(data.tolist())
    assert out is not None
    assert out["between_var"] == pytest.approx(0.36, rel=0.08)
    assert out["within_var"] == pytest.approx(0.64, rel=0.05)
    expected = 1 - math.sqrt((0.36 + 0.64 / 3) / (0.36 + 0.64))
    assert out["narrowing"] == pytest.approx(expected, abs=0.02)


def test_epoch_variance_needs_two_epochs_somewhere() -> None:
    assert epoch_variance([[1.0], [0.0]]) is None
    assert epoch_variance([[1.0, 0.0]]) is None
    out = epoch_variance([[1.0, 0.0], [1.0]])
    assert out is not None and out["within_var"] == pytest.approx(0.5) and out["mean_epochs"] == 1.5


@pytest.mark.parametrize("reducer", ["pass@2", "pass^2"])
def test_pass_k_intervals_bootstrap_over_items(reducer: str) -> None:
    from dsh_orchestra.eval import ScoreTally, bootstrap_ci

    rng = np.random.default_rng(4)
    tally = ScoreTally(["s"], reducer=reducer, seed=5)
    per_item = []
    for i in range(50):
        epochs = (rng.random(3) < 0.6).astype(float).tolist()
        per_item.append(reduce_epochs(epochs, reducer))
        for e, v in enumerate(epochs, 1):
            tally.add_line({"id": f"i{i}", "epoch": e, "scores": {"s": {"value": v}}})
    tally.add_line({"id": "short", "epoch": 1, "scores": {"s": {"value": 1.0}}})  # one epoch < k: left out
    out = tally.scores()["s"]
    assert out["n"] == 50 and out["n_error"] == 0 and out["n_na"] == 1  # left out: not a failure (n_na)
    assert out["ci95"] == list(bootstrap_ci([v for v in per_item if v is not None], seed=5))
    assert out["epochs"]["items"] == 51

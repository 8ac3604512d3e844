"""Metrics against hand-computed values, bootstrap determinism, pass@k against its formula, reducers."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, strategies as st

from dsh_orchestra.eval import (
    BOOTSTRAP_RESAMPLES, Reducer, ScoreTally, bootstrap_ci, group_key, mean, metrics, parse_reducer, pass_at_k,
    reduce_epochs, stderr,
)


def test_mean_and_stderr_by_hand() -> None:
    values = [1.0, 0.0, 1.0, 1.0]
    # mean 0.75; sample variance = (3 * 0.0625 + 0.5625) / 3 = 0.25; sd 0.5; stderr 0.5 / 2
    assert mean(values) == 0.75
    assert stderr(values) == pytest.approx(0.25)
    assert stderr([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(statistics.stdev([2, 4, 4, 4, 5, 5, 7, 9]) / math.sqrt(8))
    assert stderr([0.5]) is None and mean([]) is None
    assert stderr([1.0, 1.0, 1.0]) == 0.0


def test_metrics_object() -> None:
    out = metrics([1.0, 0.0, 1.0, 1.0], 2, seed=0)
    assert out["mean"] == 0.75 and out["stderr"] == pytest.approx(0.25)
    assert out["n"] == 4 and out["n_error"] == 2
    low, high = out["ci95"]
    assert 0.0 <= low <= 0.75 <= high <= 1.0
    assert metrics([], 3) == {"mean": None, "stderr": None, "ci95": None, "n": 0, "n_error": 3}


def test_bootstrap_is_deterministic_per_seed() -> None:
    values = [0.13, 0.97, 0.41, 0.5, 0.88, 0.02, 0.71, 0.66, 0.25, 0.93]
    first = bootstrap_ci(values, seed=0)
    assert first == bootstrap_ci(list(values), seed=0)
    assert first == bootstrap_ci(values)  # the default seed is 0
    assert bootstrap_ci(values, seed=1) != first
    assert bootstrap_ci([0.7], seed=3) == (0.7, 0.7)
    assert bootstrap_ci([]) is None


def test_bootstrap_is_a_percentile_interval_of_resampled_means() -> None:
    """Computed independently: 10,000 resamples drawn the documented way, then percentiles."""
    import numpy as np

    values = [float(i) * 0.37 for i in range(100)]  # 100 levels: n uniform indices per resample
    rng = np.random.default_rng(5)
    picks = rng.integers(0, len(values), size=(BOOTSTRAP_RESAMPLES, len(values)))
    means = np.asarray(values)[picks].mean(axis=1)
    expected = tuple(float(x) for x in np.percentile(means, [2.5, 97.5]))
    assert bootstrap_ci(values, seed=5) == pytest.approx(expected)

    few = [0.0, 0.5, 1.0, 1.0, 0.0, 1.0, 1.0]  # 3 levels: multinomial counts per resample
    levels, counts = np.unique(few, return_counts=True)
    draws = np.random.default_rng(2).multinomial(len(few), counts / len(few), size=BOOTSTRAP_RESAMPLES)
    expected = tuple(float(x) for x in np.percentile(draws @ levels / len(few), [2.5, 97.5]))
    assert bootstrap_ci(few, seed=2) == pytest.approx(expected)


def test_both_resampling_forms_agree_in_distribution() -> None:
    """Counts and indices are the same bootstrap: their intervals agree closely on large samples."""
    import numpy as np

    values = [1.0] * 300 + [0.0] * 200
    rng = np.random.default_rng(0)
    means = np.asarray(values)[rng.integers(0, 500, size=(BOOTSTRAP_RESAMPLES, 500))].mean(axis=1)
    by_index = np.percentile(means, [2.5, 97.5])
    low, high = bootstrap_ci(values, seed=0) or (0.0, 0.0)
    assert low == pytest.approx(by_index[0], abs=0.01) and high == pytest.approx(by_index[1], abs=0.01)


def test_bootstrap_large_input_is_chunked_and_deterministic() -> None:
    values = [float(i % 1000) / 999 for i in range(5000)]  # many levels: chunked index draws
    low, high = bootstrap_ci(values, seed=0) or (0, 0)
    assert low < 0.5 < high and high - low < 0.05
    assert bootstrap_ci(values, seed=0) == (low, high)
    binary = [float(i % 2) for i in range(100_000)]
    low, high = bootstrap_ci(binary, seed=0) or (0, 0)
    assert low < 0.5 < high and high - low < 0.01


def test_bootstrap_interval_covers_the_normal_approximation() -> None:
    values = [1.0] * 60 + [0.0] * 40
    low, high = bootstrap_ci(values, seed=0) or (0, 0)
    se = stderr(values) or 0
    assert low == pytest.approx(0.6 - 1.96 * se, abs=0.02)
    assert high == pytest.approx(0.6 + 1.96 * se, abs=0.02)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 0, 1), (5, 5, 3), (5, 2, 1), (5, 2, 3), (10, 3, 5), (3, 1, 3), (1, 1, 1)])
def test_pass_at_k_formula(n: int, c: int, k: int) -> None:
    expected = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_the_product_form(args: tuple[int, int, int]) -> None:
    """1 - C(n-c,k)/C(n,k) == 1 - prod_{i=n-c+1}^{n} (1 - k/i) (the Codex paper's stable form)."""
    n, c, k = args
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1 - k / i
    assert pass_at_k(n, c, k) == pytest.approx(1 - product, abs=1e-9)


def test_pass_at_k_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_reducers() -> None:
    values = [1.0, 0.0, 1.0]
    assert reduce_epochs(values) == pytest.approx(2 / 3)
    assert reduce_epochs(values, "max") == 1.0
    assert reduce_epochs(values, "min") == 0.0
    assert reduce_epochs([0.5, 1.0, 0.5, 1.0], "mode") == 0.5  # a tie: the earliest epoch's value
    assert reduce_epochs(values, "pass@1") == pytest.approx(2 / 3)
    assert reduce_epochs(values, "pass@2") == pytest.approx(1 - math.comb(1, 2) / math.comb(3, 2))
    assert reduce_epochs([0.0, 0.0, 1.0], "pass@3") == 1.0
    assert reduce_epochs([0.5, 0.5], "pass@1") == 0.0  # only value 1 counts as correct
    assert reduce_epochs([None, 1.0, None], "mean") == 1.0  # failed epochs are left out
    assert reduce_epochs([None, None], "max") is None
    assert reduce_epochs([1.0, None], "pass@2") is None  # fewer valued epochs than k


@pytest.mark.parametrize("bad", ["median", "pass@0", "pass@", "pass@x", "pass@-1", ""])
def test_bad_reducer_names(bad: str) -> None:
    with pytest.raises(ValueError, match="epoch_reducer"):
        parse_reducer(bad)


def test_pass_at_k_above_epochs_is_refused() -> None:
    assert parse_reducer("pass@3", 3) == Reducer("pass@3", 3)
    with pytest.raises(ValueError, match="k <= the epochs"):
        parse_reducer("pass@4", 3)


def test_group_keys() -> None:
    assert group_key({"level": "easy"}, "level") == "easy"
    assert group_key({"level": 3}, "level") == "3"
    assert group_key({"level": True}, "level") == "true"
    assert group_key({"level": None}, "level") == "null"
    assert group_key({}, "level") == "(missing)"
    assert group_key(None, "level") == "(missing)"


def line(item_id: str, epoch: int, value: float | None, level: str = "easy") -> dict[str, object]:
    status = "ok" if value is not None else "error"
    return {"id": item_id, "epoch": epoch, "status": status, "scores": {"exact": {"value": value}}, "metadata": {"level": level}}


def test_tally_reduces_epochs_then_groups() -> None:
    tally = ScoreTally(["exact"], reducer="mean", group_by="level", seed=0)
    for item_id, values, level in [("a", [1, 1, 0], "easy"), ("b", [0, 0, 0], "easy"), ("c", [1, None, 1], "hard"), ("d", [None, None, None], "hard")]:
        for epoch, value in enumerate(values, start=1):
            tally.add_line(line(item_id, epoch, value, level))
    tally.add_line(line("a", 1, 0))  # a repeated (id, epoch): the first line wins
    scores = tally.scores()["exact"]
    assert scores["n"] == 3 and scores["n_error"] == 1
    assert scores["mean"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    groups = tally.groups()
    assert groups is not None and list(groups) == ["easy", "hard"]
    assert groups["easy"]["exact"]["mean"] == pytest.approx(1 / 3) and groups["easy"]["exact"]["n"] == 2
    assert groups["hard"]["exact"] == {
        "mean": 1.0, "stderr": None, "ci95": [1.0, 1.0], "n": 1, "n_error": 1, "n_na": 0,
        # strict: c's errored epoch scores 0 (mean 2/3), d's three epochs score 0
        "strict": {"mean": pytest.approx(1 / 3), "stderr": pytest.approx(1 / 3), "ci95": [0.0, pytest.approx(2 / 3)], "n": 2},
    }


def test_tally_pass_at_k() -> None:
    tally = ScoreTally(["s"], reducer="pass@2")
    for item_id, values in [("a", [1, 0, 0]), ("b", [0, 0, 0]), ("c", [1, 1, 0])]:
        for epoch, value in enumerate(values, start=1):
            tally.add_line({"id": item_id, "epoch": epoch, "scores": {"s": {"value": value}}})
    expected = [pass_at_k(3, 1, 2), 0.0, pass_at_k(3, 2, 2)]
    assert tally.scores()["s"]["mean"] == pytest.approx(sum(expected) / 3)
    assert tally.groups() is None


def test_metrics_of_few_distinct_values_equal_the_per_value_formulas() -> None:
    """Over 64 values with at most 64 distinct ones, metrics are computed from the counts:
    the same mean, stderr and interval, bit for bit, as fsum, stderr and bootstrap_ci."""
    import random

    rnd = random.Random(5)
    for trial in range(60):
        levels = [rnd.choice([0.0, 1.0, 0.5, 0.1, 1 / 3, 0.7, 2.5e-7, 0.9999999999, -0.25]) for _ in range(rnd.randint(1, 8))]
        values = [rnd.choice(levels) for _ in range(rnd.randint(65, 2000))]
        interval = bootstrap_ci(values, seed=trial % 3)
        assert interval is not None
        assert metrics(values, 2, seed=trial % 3) == {
            "mean": mean(values), "stderr": stderr(values), "ci95": list(interval), "n": len(values), "n_error": 2,
        }

"""Issue 25 item 7: compare's statistics without repeated work. ``bootstrap_cis`` draws the
bootstrap's indices once per sample length and gives each sample the interval ``bootstrap_ci``
gives it alone (bit for bit); ``compare_runs`` draws once for the differences and both runs'
leaderboard intervals; the index bootstrap draws ``index_resamples(n)`` resamples; the
sign-flip test gives the p of the code before it (the same draws) with bounded memory."""

from __future__ import annotations

import random
import tracemalloc
from typing import Any

import numpy as np
import pytest

from dsh_orchestra.eval import bootstrap_ci, compare_runs, sign_flip_test
from dsh_orchestra.eval import _compare, _metrics
from dsh_orchestra.eval._metrics import bootstrap_cis, index_resamples


@pytest.fixture(autouse=True)
def _forget() -> None:
    _metrics._INTERVALS.clear()


def _plain(values: Any, seed: int, resamples: int) -> tuple[float, float]:
    """The index bootstrap in plain numpy: ``resamples`` rows of n uniform indices, in chunks."""
    data = np.asarray(values, dtype=np.float64)
    n = len(data)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2**21 // n)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        means[start:stop] = data[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def test_index_resamples() -> None:
    assert [index_resamples(n) for n in (1, 65, 10_000, 10_001, 20_000, 50_000, 100_000, 1_000_000)] == [
        10_000, 10_000, 10_000, 9_999, 5_000, 2_000, 1_000, 1_000]


@pytest.mark.parametrize(("n", "seed"), [(300, 0), (4_099, 3), (12_500, 1), (70_001, 2)])
def test_the_index_bootstrap_is_plain_numpy(n: int, seed: int) -> None:
    """(The code draws in chunks of 2**18 // n resamples, the reference in 2**21 // n: the same draws.)"""
    values = np.random.default_rng(n).random(n)
    assert bootstrap_ci(values, seed=seed) == _plain(values, seed, index_resamples(n))
    assert bootstrap_ci(values, seed=seed, resamples=700) == _plain(values, seed, 700)


def test_shared_draws_give_each_sample_its_own_interval_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    samples: list[Any] = [rng.random(2_000), rng.normal(size=2_000), rng.random(2_000) - 0.5,  # one length
                          rng.random(3_001), [], [0.25] * 9, rng.integers(0, 2, 500).astype(float),
                          rng.random(2_000).tolist()]
    samples.append(samples[0].copy())  # the same values twice
    together = bootstrap_cis(samples, seed=11)
    _metrics._INTERVALS.clear()
    alone = []
    for sample in samples:
        _metrics._INTERVALS.clear()
        alone.append(bootstrap_ci(sample, seed=11))
    assert together == alone
    assert together[4] is None and together[5] == (0.25, 0.25)
    assert together[0] == together[-1]
    assert together[0] == _plain(samples[0], 11, 10_000)


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(samples, n) of each index draw made from now on."""
    calls: list[tuple[int, int]] = []
    real = _metrics._index_intervals

    def counting(datas: Any, n: int, seed: int, resamples: int, confidence: float) -> Any:
        calls.append((len(datas), n))
        return real(datas, n, seed, resamples, confidence)

    monkeypatch.setattr(_metrics, "_index_intervals", counting)
    return calls


def test_one_draw_per_length_and_remembered(draws: list[tuple[int, int]]) -> None:
    calls = draws
    rng = np.random.default_rng(6)
    a, b, c = rng.random(1_000), rng.random(1_000), rng.random(1_500)
    first = bootstrap_cis([a, b, c], seed=2)
    assert sorted(calls) == [(1, 1_500), (2, 1_000)]
    assert [bootstrap_ci(v, seed=2) for v in (a, b, c)] == first  # remembered: no draw
    assert len(calls) == 2
    bootstrap_ci(a, seed=3)  # another seed draws
    assert len(calls) == 3


def test_remembers_a_bounded_number_of_intervals() -> None:
    rng = np.random.default_rng(7)
    for _ in range(_metrics._REMEMBERED + 8):
        bootstrap_ci(rng.random(100), seed=0, resamples=50)
    assert len(_metrics._INTERVALS) == _metrics._REMEMBERED


def _lines(values: list[float | None], other: list[float], status: list[str]) -> list[dict[str, Any]]:
    out = []
    for k, (v, w, s) in enumerate(zip(values, other, status, strict=True)):
        scores = {} if s == "error" else {"f1": {"value": v}, "g": {"value": w}, "exact": {"value": float(w > 0.5)}}
        out.append({"id": f"item-{k:05d}", "status": s, "scores": scores})
    return out


def _runs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rnd = random.Random(8)
    n = 3_000
    base = _lines([rnd.random() for _ in range(n)], [rnd.random() for _ in range(n)], ["ok"] * n)
    candidate = _lines([rnd.random() for _ in range(n)], [rnd.random() for _ in range(n)],
                       ["error" if rnd.random() < 0.05 else "ok" for _ in range(n)])
    rnd.shuffle(candidate)  # the candidate's own order differs from the pairs'
    return base, candidate


def test_compare_draws_once_and_gives_the_same_document(draws: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    base, candidate = _runs()
    calls = draws
    shared = compare_runs(base, candidate, seed=4)
    # per length one draw: the base run's values (3,000), the pairs with values (the candidate's
    # ok items) and the candidate's own values (one length), the strict pairs (3,000 again)
    assert len(calls) == 2 and sum(k for k, _ in calls) == 2 + 4 + 2  # f1 and g: 2 runs, 2 diffs, 2 strict
    _metrics._INTERVALS.clear()
    calls.clear()
    monkeypatch.setattr(_compare, "_draw_together", lambda *args: None)  # each interval drawn alone
    alone = compare_runs(base, candidate, seed=4)
    assert alone == shared
    assert len(calls) == 8
    entry = shared["scorers"]["f1"]
    assert entry["test"] == "sign-flip" and entry["strict"]["n"] == 3_000 and entry["n"] < 3_000


def _sign_flip_before(differences: Any, seed: int = 0, permutations: int = 10_000) -> float:
    """The sign-flip test as the code drew it before (row by row table lookups)."""
    data = np.asarray(differences, dtype=np.float64)
    n = len(data)
    moving = data[data != 0.0]
    observed = abs(float(data.sum()))
    threshold = observed * (1 - 1e-12)
    rng = np.random.default_rng(seed)
    count, m, total = 0, len(moving), float(moving.sum())
    chunk = max(1, (1 << 21) // max(n, 1))
    groups = (m + 7) // 8
    padded = np.zeros(groups * 8)
    padded[:m] = moving
    subsets = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64)
    table = (padded.reshape(groups, 8) @ subsets.T).ravel()
    offsets = np.arange(groups, dtype=np.intp) * 256
    for start in range(0, permutations, chunk):
        size = min(permutations, start + chunk) - start
        drawn = rng.integers(0, 256, size=(size, groups), dtype=np.uint8)
        kept = np.take(table, drawn + offsets).sum(axis=1)
        count += int(np.count_nonzero(np.abs(2.0 * kept - total) >= threshold))
    return (count + 1) / (permutations + 1)


@pytest.mark.parametrize(("n", "seed", "shift"), [(20, 0, 0.3), (999, 1, 0.0), (5_000, 2, 0.02), (40_001, 3, 0.005)])
def test_sign_flip_gives_the_p_of_the_code_before(n: int, seed: int, shift: float) -> None:
    differences = np.random.default_rng(n).normal(shift, 1.0, n)
    differences[::7] = 0.0
    assert sign_flip_test(differences, seed=seed) == _sign_flip_before(differences, seed=seed)
    assert sign_flip_test(differences.tolist(), seed=seed) == sign_flip_test(differences, seed=seed)  # deterministic


@pytest.mark.parametrize(("n", "seed"), [(999, 1), (20_003, 4)])
def test_sign_flip_by_half_bytes_gives_the_same_p(n: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    differences = np.random.default_rng(n).normal(0.01, 1.0, n)
    whole = sign_flip_test(differences, seed=seed)
    monkeypatch.setattr(_compare, "_TABLE_BYTES", 1024)  # tables of 16 (as beyond 131,072 differences)
    assert sign_flip_test(differences, seed=seed) == whole == _sign_flip_before(differences, seed=seed)


def test_memory_is_bounded() -> None:
    values = np.random.default_rng(9).random(60_000)
    tracemalloc.start()
    try:
        bootstrap_cis([values, values[::-1].copy(), values * 2.0], seed=1)
        sign_flip_test(values - 0.5, seed=1)
        sign_flip_test(np.random.default_rng(10).random(300_000) - 0.5, seed=1)  # half-byte tables, 9.6 MiB
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20  # 16 MiB of indices and their 16 MiB of values or lookups at a time, the tables

"""Issue 30 part 2: compare of two million-line runs with a continuous scorer. The sign-flip
test takes the normal p when the Berry-Esseen bound on its error is at most 0.002 (never below
313,600 non-zero differences, so smaller comparisons keep their p); the bootstrap's gathers
reuse one buffer and give the same intervals as plain numpy."""

from __future__ import annotations

import math
import re
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dsh_orchestra.eval import sign_flip_test
from dsh_orchestra.eval import _compare, _metrics
from dsh_orchestra.eval._metrics import bootstrap_cis


def _bound(differences: np.ndarray) -> float:
    size = np.abs(differences[differences != 0.0])
    s2 = math.fsum(size * size)
    return 2 * 0.56 * math.fsum(size * size * size) / (s2 * math.sqrt(s2))


def _drawn(differences: np.ndarray, seed: int, monkeypatch: pytest.MonkeyPatch) -> float | None:
    with monkeypatch.context() as patched:
        patched.setattr(_compare, "_NORMAL_FROM", 10**12)  # never the normal p
        return sign_flip_test(differences, seed=seed)


def test_many_differences_of_one_size_take_the_normal_p(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(30)
    differences = rng.uniform(0.9, 1.1, 400_000) * np.where(rng.random(400_000) < 0.501, 1.0, -1.0)
    differences[::9] = 0.0  # zeros: in the sum, not among the m that move
    m = int(np.count_nonzero(differences))
    assert m >= 313_600 and _bound(differences) <= 0.002
    calls: list[int] = []
    monkeypatch.setattr(np.random, "default_rng", lambda *a, **k: calls.append(1))  # nothing drawn
    p = sign_flip_test(differences, seed=3)
    assert not calls
    expected = math.erfc(abs(float(differences.sum())) / math.sqrt(2.0 * math.fsum(differences * differences)))
    assert p == expected
    assert sign_flip_test(differences, seed=4) == p  # no draws: the seed does not matter


def test_the_normal_p_is_within_the_bound_of_the_drawn_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # At 20,000 differences the bound is far above 0.002, so the drawn test runs; with the limits
    # lifted the normal p is there to compare: within the bound plus 4 Monte Carlo standard errors.
    for shift, seed in ((0.0, 1), (0.006, 2), (0.012, 3), (0.025, 4)):
        differences = np.random.default_rng(seed).normal(shift, 1.0, 20_000)
        drawn = sign_flip_test(differences, seed=seed)
        assert drawn is not None
        with monkeypatch.context() as patched:
            patched.setattr(_compare, "_NORMAL_FROM", 0)
            patched.setattr(_compare, "_NORMAL_ERROR", 1.0)
            normal = sign_flip_test(differences, seed=seed)
        assert normal is not None
        assert abs(normal - drawn) <= _bound(differences) + 4 * math.sqrt(drawn * (1 - drawn) / 10_000) + 1e-4


def test_below_313_600_or_above_the_bound_the_test_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(31)
    few = rng.uniform(0.9, 1.1, 313_599) * np.where(rng.random(313_599) < 0.5, 1.0, -1.0)
    p = sign_flip_test(few, seed=1)
    assert p == _drawn(few, 1, monkeypatch)
    assert p is not None and abs(p * 10_001 - round(p * 10_001)) < 1e-6  # (count + 1) / 10,001: drawn
    heavy = rng.normal(0.0, 1.0, 320_000)
    heavy[:40] = 2_000.0  # a few differences far larger than the rest: a large bound
    assert _bound(heavy) > 0.002
    q = sign_flip_test(heavy, seed=2)
    assert q == _drawn(heavy, 2, monkeypatch)


def test_the_normal_p_at_a_million_pairs_is_cheap() -> None:
    differences = np.random.default_rng(5).random(1_000_000) - np.random.default_rng(6).random(1_000_000)
    assert _bound(differences) <= 0.002  # differences of two uniform scores: the bound holds from ~680,000
    tracemalloc.start()
    try:
        p = sign_flip_test(differences, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert p is not None and 0.0 <= p <= 1.0
    assert peak < 40 * 2**20  # the non-zero differences and their magnitudes: no assignment drawn


@pytest.mark.parametrize(("n", "resamples"), [(70_001, 30), (1_000_000, 3)])
def test_the_reused_buffer_gives_plain_numpys_intervals(n: int, resamples: int) -> None:
    rng = np.random.default_rng(n)
    samples = [rng.random(n), rng.random(n) - 0.5]
    got = _metrics._index_intervals(samples, n, 7, resamples, 0.95)
    draws = np.random.default_rng(7)
    means = np.empty((2, resamples))
    for start in range(resamples):  # one resample at a time: any chunking draws the same indices
        picks = draws.integers(0, n, size=(1, n))
        for index, data in enumerate(samples):
            means[index, start] = data[picks].mean(axis=1)[0]
    tail = (1.0 - 0.95) / 2 * 100  # (2.4999999999999996, as the recipe computes it)
    assert got == [tuple(float(x) for x in np.percentile(row, [tail, 100 - tail])) for row in means]
    _metrics._INTERVALS.clear()
    assert bootstrap_cis(samples, seed=7, resamples=resamples) == got


def _number(value: object) -> float:
    """What the columns hold for a value: a finite number as a float, anything else NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        found = float(value)
    except OverflowError:
        return math.nan
    return found if math.isfinite(found) else math.nan


def test_the_readers_fast_paths_keep_every_value() -> None:
    from dsh_orchestra.eval._columns import RunColumns, compare_line_problem

    counts: list[object] = [7, 2**53 - 1, -(2**53) + 1, 2**53, -(2**53), 10**400, True, 1.5, 2.0**60, "7", None, math.inf]
    lines = []
    for k, count in enumerate(counts * 2):
        scores: dict[object, object] = {"a": {"value": 0.25 * k}, "b": {"value": k}}
        if k % 3 == 0:
            del scores["b"]  # a scorer this line has no record of
        if k == 5:
            scores["c"] = {"value": 1}  # a scorer first seen late: NaN before
        if k == 7:
            scores = {1: {"value": 2.0}, "a": 0.5}  # a non-str name (a dict made in Python)
        lines.append({"id": f"i{k}", "status": "ok", "scores": scores,
                      "usage": {"input_tokens": count, "output_tokens": 3, "total_tokens": count}})
    run = RunColumns()
    for line in lines:
        assert compare_line_problem(line) is None or line["scores"].get("a") == 0.5
        run.add(line)
    run.finish()
    assert all(len(column) == len(lines) for column in run.values.values())
    assert run.values["a"][7] != run.values["a"][7] and run.values["a"][8] == 2.0  # a bare number is no record
    assert [v != v for v in run.values["b"][:4]] == [True, False, False, True]
    assert run.values["c"][4] != run.values["c"][4] and run.values["c"][5] == 1.0
    assert run.values["1"][7] == 2.0 and int(np.count_nonzero(run.values["1"] == run.values["1"])) == 1
    expected_total = [_number(line["usage"]["total_tokens"]) for line in lines]  # type: ignore[index]
    np.testing.assert_array_equal(run.usage["total_tokens"], np.array(expected_total))
    numbers = [_number(c) for c in counts * 2]
    assert run.usage_sum("input_tokens") == math.fsum(x for x in numbers if x == x)
    assert compare_line_problem({"scores": {"a": {"value": "x"}}}) is not None
    assert compare_line_problem({"scores": {"a": {"value": True}}}) is not None
    assert compare_line_problem({"scores": {"a": {"value": 3}, "b": None, "c": 1.5}}) is None


@pytest.mark.parametrize(("n", "seed", "span", "drawn_bytes", "permutations"), [
    (999, 1, 7, 1_000, 10_000),  # spans and blocks that do not divide the groups and assignments
    (20_003, 4, 512, 1 << 20, 10_000),
    (150_001, 2, 512, 16 << 20, 2_000),  # beyond 131,072 non-zero differences: spans without any patch
])
def test_tables_made_a_span_at_a_time_give_the_recipes_p(n: int, seed: int, span: int, drawn_bytes: int, permutations: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    differences = np.random.default_rng(n).normal(0.004, 1.0, n)
    differences[::11] = 0.0
    if n < 131_072:
        monkeypatch.setattr(_compare, "_TABLE_BYTES", 1024)  # (as beyond 131,072 differences)
    monkeypatch.setattr(_compare, "_SPAN", span)
    monkeypatch.setattr(_compare, "_DRAWN_BYTES", drawn_bytes)
    calls: list[int] = []
    spans = _compare._count_by_spans
    monkeypatch.setattr(_compare, "_count_by_spans", lambda *a: calls.append(1) or spans(*a))
    p = sign_flip_test(differences, seed=seed, permutations=permutations)
    assert calls == [1]
    assert p == _recipe("sign_flip_p")(differences, seed=seed, permutations=permutations)


def _recipe(name: str) -> Any:
    """A numpy recipe of docs/evaluation.md, run as written (as test_bootstrap_recipe.py does)."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL) if f"def {name}(" in b]
    assert len(blocks) == 1
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], str(doc), "exec"), namespace)  # noqa: S102 (the documented recipe, run as written)
    return namespace[name]

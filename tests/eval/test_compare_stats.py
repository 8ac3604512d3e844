"""The paired statistics of ``compare``: McNemar's exact test, the sign-flip permutation test,
the paired bootstrap, pairing by id with epochs reduced, usage and latency side by side."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from dsh_orchestra.eval._compare import CompareInputError, compare_runs, mcnemar_exact, reduce_items, sign_flip_test


def line(item_id: str, scores: dict[str, float | None], *, status: str = "ok", epoch: int | None = None,
         duration: float = 1.0, tokens: int = 10, cost: float | None = None) -> dict[str, Any]:
    """A result line of the evaluation contract (issue 15: scores, usage, cost_usd, epoch)."""
    out: dict[str, Any] = {
        "id": item_id, "status": status, "session_id": f"s-{item_id}", "final_response": "r", "finish_reason": "completed",
        "subagents": [], "approvals": [], "attempts": 1, "duration_s": duration,
        "error": None if status == "ok" else {"type": "TurnFailed", "message": "x"}, "metadata": {},
        "scores": {name: {"value": value, "answer": None, "explanation": None} for name, value in scores.items()},
        "usage": {"input_tokens": tokens - 3, "output_tokens": 3, "total_tokens": tokens},
    }
    if epoch is not None:
        out["epoch"] = epoch
    if cost is not None:
        out["cost_usd"] = cost
    return out


# ---- McNemar ------------------------------------------------------------------------------


@pytest.mark.parametrize(("b", "c", "expected"), [
    (0, 0, 1.0),            # no discordant pair
    (1, 0, 1.0),            # 2 * 1/2
    (5, 0, 2 / 32),         # 2 * P(X <= 0), n = 5
    (0, 5, 2 / 32),
    (3, 7, 2 * 176 / 1024),  # P(X <= 3) for n = 10: (1 + 10 + 45 + 120) / 1024
    (7, 3, 2 * 176 / 1024),
    (6, 6, 1.0),            # 2 * P(X <= 6) > 1 for n = 12: capped
    (10, 30, 2 * sum(math.comb(40, i) for i in range(11)) / 2**40),
])
def test_mcnemar_exact_by_hand(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_large_counts_stay_finite() -> None:
    p = mcnemar_exact(4000, 4100)
    assert 0.0 < p < 1.0
    assert mcnemar_exact(0, 5000) == 0.0  # 2 * 2**-5000 underflows to 0, computed without overflow


# ---- sign-flip permutation ----------------------------------------------------------------


def brute_force(differences: list[float]) -> float:
    moving = [d for d in differences if d != 0]
    observed = abs(sum(differences))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=len(moving))
               if abs(sum(s * d for s, d in zip(signs, moving, strict=True))) >= observed * (1 - 1e-12))
    return hits / 2 ** len(moving)


@pytest.mark.parametrize("differences", [
    [1.0, 2.0, 3.0],                       # only +++ and --- reach 6: 2/8
    [0.0, 1.0, 2.0, 3.0],                  # a zero difference changes nothing
    [0.5, -0.25, 0.75, 0.1, -0.2, 0.3],
    [0.3, 0.3, -0.3, 0.3],
    [0.1 * k for k in range(1, 14)],       # 13 moving: still enumerated
])
def test_sign_flip_small_is_exact(differences: list[float]) -> None:
    assert sign_flip_test(differences) == pytest.approx(brute_force(differences), rel=1e-12)
    assert sign_flip_test([1.0, 2.0, 3.0]) == 0.25


def test_sign_flip_no_difference_and_no_pairs() -> None:
    assert sign_flip_test([0.0, 0.0, 0.0]) == 1.0
    assert sign_flip_test([]) is None


def test_sign_flip_random_is_seeded_and_close_to_exact() -> None:
    differences = [((k * 37) % 11 - 4) / 10 for k in range(20)]  # 20 moving: 10,000 random flips
    assert len([d for d in differences if d]) > 13
    first = sign_flip_test(differences, seed=0)
    assert first == sign_flip_test(differences, seed=0)
    assert first != sign_flip_test(differences, seed=1)
    exact = brute_force(differences)
    assert first == pytest.approx(exact, abs=0.02)  # Monte Carlo error of 10,000 draws: < 0.005 sd
    # all differences positive: the exact p is 2 / 2**20, the seeded test can only say < 1/5000
    p = sign_flip_test([0.5] * 20, seed=3)
    assert p is not None and p == pytest.approx(1 / 10_001)


# ---- pairing and the document -------------------------------------------------------------


def test_reduce_items_epochs_and_status() -> None:
    lines = [line("a", {"s": 1.0}, epoch=1), line("a", {"s": 0.0}, epoch=2), line("a", {"s": 1.0}, epoch=2),  # a repeat: first wins
             line("b", {"s": None}, epoch=1, status="error"), line("b", {"s": 1.0}, epoch=2)]
    values, status = reduce_items(lines, ["s"], "mean")
    assert values == {"a": {"s": 0.5}, "b": {"s": 1.0}}
    assert status == {"a": "ok", "b": "error"}
    assert reduce_items(lines, ["s"], "max")[0]["a"]["s"] == 1.0


def test_binary_scorer_uses_mcnemar_and_lists_changes() -> None:
    base = [line(f"i{k}", {"exact": v}) for k, v in enumerate([1, 1, 1, 0, 0, 1, 0, 1])]
    cand = [line(f"i{k}", {"exact": v}) for k, v in enumerate([0, 1, 1, 1, 1, 1, 1, 0])]
    doc = compare_runs(base, cand)
    s = doc["scorers"]["exact"]
    assert doc["pairs"] == 8
    assert s["n"] == 8
    assert s["mean_base"] == 5 / 8 and s["mean_candidate"] == 6 / 8
    assert s["diff"] == pytest.approx(1 / 8)
    assert s["regressions"] == ["i0", "i7"]
    assert s["improvements"] == ["i3", "i4", "i6"]
    assert s["p_value"] == mcnemar_exact(2, 3) == 1.0
    lo, hi = s["ci95"]
    assert lo <= s["diff"] <= hi
    assert doc == compare_runs(base, cand)  # seeded: the same document twice


def test_continuous_scorer_uses_the_permutation_test() -> None:
    base = [line(f"i{k}", {"f1": 0.2 + 0.01 * k}) for k in range(30)]
    cand = [line(f"i{k}", {"f1": 0.5 + 0.01 * k}) for k in range(30)]
    s = compare_runs(base, cand, seed=5)["scorers"]["f1"]
    assert s["diff"] == pytest.approx(0.3)
    assert s["ci95"] == pytest.approx([0.3, 0.3])
    assert s["p_value"] == pytest.approx(1 / 10_001)
    assert s["improvements"] == sorted(f"i{k}" for k in range(30)) and s["regressions"] == []


def test_pairs_only_where_both_have_values() -> None:
    base = [line("a", {"s": 1.0}), line("b", {"s": None}, status="error"), line("c", {"s": 0.0}), line("d", {"s": 1.0})]
    cand = [line("a", {"s": 1.0}), line("b", {"s": 1.0}), line("c", {"s": 1.0}), line("e", {"s": 0.0})]
    doc = compare_runs(base, cand)
    assert doc["pairs"] == 3
    assert doc["only_in_base"] == ["d"] and doc["only_in_candidate"] == ["e"]
    assert doc["status_changes"] == [{"id": "b", "base": "error", "candidate": "ok"}]
    s = doc["scorers"]["s"]
    assert s["n"] == 2 and s["mean_base"] == 0.5 and s["mean_candidate"] == 1.0
    assert s["improvements"] == ["c"] and s["regressions"] == []


def test_a_scorer_of_one_run_only_has_no_pairs() -> None:
    base = [line("a", {"s": 1.0})]
    cand = [line("a", {"t": 1.0})]
    doc = compare_runs(base, cand)
    empty = {"n": 0, "mean_base": None, "mean_candidate": None, "diff": None, "ci95": None,
             "p_value": None, "regressions": [], "improvements": [], "stderr": None, "test": None}
    assert doc["scorers"]["s"] == {**empty, "p_adjusted": None, "strict": empty}
    assert compare_runs(base, cand, scorers=["t"])["scorers"]["t"]["n"] == 0


def test_bad_input() -> None:
    with pytest.raises(CompareInputError, match="no item id in common"):
        compare_runs([line("a", {"s": 1})], [line("b", {"s": 1})])
    with pytest.raises(CompareInputError, match="'nope' is in neither run"):
        compare_runs([line("a", {"s": 1})], [line("a", {"s": 1})], scorers=["nope"])


def test_usage_and_latency_side_by_side() -> None:
    base = [line(f"i{k}", {"s": 1}, duration=d, tokens=t, cost=0.01) for k, (d, t) in enumerate([(1.0, 10), (2.0, 20), (3.0, 30)])]
    cand = [line(f"i{k}", {"s": 1}, duration=d, tokens=t, cost=0.02) for k, (d, t) in enumerate([(2.0, 20), (4.0, 40), (6.0, 60)])]
    doc = compare_runs(base, cand)
    latency = doc["latency"]
    assert latency["base"] == {"n": 3, "total": 6, "median": 2.0, "p95": pytest.approx(2.9)}
    assert latency["candidate"]["total"] == 12 and latency["candidate"]["median"] == 4.0
    assert latency["ratio"] == {"total": 2.0, "median": 2.0, "p95": pytest.approx(2.0)}
    usage = doc["usage"]
    assert usage["base"]["total_tokens"] == 60 and usage["base"]["input_tokens"] == 51 and usage["base"]["output_tokens"] == 9
    assert usage["base"]["total"] == 60 and usage["base"]["median"] == 20.0
    assert usage["candidate"]["cost_usd"] == pytest.approx(0.06)
    assert usage["ratio"]["total_tokens"] == 2.0 and usage["ratio"]["cost_usd"] == pytest.approx(2.0)


def _mcnemar_fraction(b: int, c: int) -> float:
    """The definition, summed exactly (super-linear: the reference only)."""
    from fractions import Fraction

    n = b + c
    if n == 0:
        return 1.0
    tail = Fraction(sum(math.comb(n, i) for i in range(min(b, c) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def test_mcnemar_in_log_space_equals_the_exact_sum() -> None:
    import random

    rnd = random.Random(25)
    cases = [(rnd.randint(0, 400), rnd.randint(0, 400)) for _ in range(400)] + [(2000, 2300), (2600, 2900), (0, 1), (1, 0), (7, 8)]
    for b, c in cases:
        expected = _mcnemar_fraction(b, c)
        assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-11, abs=0.0), (b, c)


def test_mcnemar_of_the_issue_counts_is_quick() -> None:
    """b = 10,000, c = 11,000 took 24 s as an exact sum of big integers."""
    import time

    started = time.perf_counter()
    p = mcnemar_exact(10_000, 11_000)
    assert time.perf_counter() - started < 1.0
    assert p == pytest.approx(5.3853932696e-12, rel=1e-8)

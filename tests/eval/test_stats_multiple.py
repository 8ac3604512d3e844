"""Holm and Benjamini-Hochberg against statsmodels' multipletests."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from dsh_orchestra.eval._multiple import adjust_pvalues


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("ours", "theirs"), [("holm", "holm"), ("bh", "fdr_bh")])
def test_matches_multipletests(seed: int, ours: str, theirs: str) -> None:
    rng = np.random.default_rng(seed)
    p = rng.random(int(rng.integers(1, 40))) ** 3
    if seed % 3 == 0:
        p[: len(p) // 2] = p[0]  # ties
    expected = multipletests(p, method=theirs)[1]
    got = adjust_pvalues(p.tolist(), ours)
    assert np.allclose(np.asarray(got, dtype=float), expected, rtol=0, atol=1e-15)


def test_none_stays_none_and_is_not_counted() -> None:
    got = adjust_pvalues([0.01, None, 0.04], "holm")
    assert got[1] is None
    assert got[0] == pytest.approx(0.02) and got[2] == pytest.approx(0.04)
    assert adjust_pvalues([0.2, None], "none") == [0.2, None]


def test_bad_method_and_p() -> None:
    with pytest.raises(ValueError, match="holm, bh or none"):
        adjust_pvalues([0.1], "bonferroni")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust_pvalues([1.5], "holm")

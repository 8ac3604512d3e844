"""Power planning: formulas, and seeded simulations that runs drawn at the planned size detect
the difference at about the planned power (tolerance: ±0.04 over 4,000 simulated studies, about
3 standard errors of a rejection rate near 0.8)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dsh_orchestra.cli import main
from dsh_orchestra.eval._power import PlanInputError, items_needed, min_detectable, plan_runs

from eval_support import result, write_jsonl

SIMULATIONS = 4000
TOLERANCE = 0.04


def scored(item_id: str, value: float | None, *, epoch: int | None = None, passage: str | None = None) -> dict[str, Any]:
    line = result(item_id, "x", epoch=epoch, scores={"s": {"value": value, "answer": None, "explanation": None}})
    if passage is not None:
        line["metadata"] = {"passage": passage}
    return line


def test_formulas_against_scipy_quantiles() -> None:
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert items_needed(0.5, 0.1) == math.ceil(z * z * 0.5 / 0.01)
    assert min_detectable(0.5, 200) == pytest.approx(z * math.sqrt(0.5 / 200), rel=1e-12)
    assert items_needed(0.5, 0.1, deff=2.0) == math.ceil(z * z * 1.0 / 0.01)
    with pytest.raises(ValueError, match="between 0 and 1"):
        items_needed(0.5, 0.1, power=1.0)


def test_two_sample_plan_reaches_the_power() -> None:
    rng = np.random.default_rng(7)
    pilot = [scored(f"i{i}", float(rng.random() < 0.5)) for i in range(600)]
    doc = plan_runs(pilot, mde=0.1)
    entry = doc["scorers"]["s"]
    assert doc["design"] == "two-sample" and entry["n_at_hand"] == 600
    n = entry["n_needed"]
    # runs of n items each: p = 0.45 vs 0.55 (the pilot's variance on both sides), a two-sided z test at 0.05
    a = rng.binomial(n, 0.45, SIMULATIONS) / n
    b = rng.binomial(n, 0.55, SIMULATIONS) / n
    se = np.sqrt(a * (1 - a) / (n - 1) + b * (1 - b) / (n - 1))
    rejected = np.abs(b - a) / se > stats.norm.ppf(0.975)
    assert abs(rejected.mean() - 0.8) <= TOLERANCE
    # and the MDE at hand is the difference whose planned n is the items at hand
    assert items_needed(entry["variance"], entry["mde_at_hand"] * 1.0000001) <= 600


def test_paired_plan_uses_the_correlation_and_reaches_the_power() -> None:
    rng = np.random.default_rng(8)
    ability = rng.normal(0, 1, 500)
    base = [scored(f"i{i}", float(a + rng.normal(0, 0.5))) for i, a in enumerate(ability)]
    cand = [scored(f"i{i}", float(a + rng.normal(0, 0.5))) for i, a in enumerate(ability)]
    doc = plan_runs(base, cand, mde=0.1)
    entry = doc["scorers"]["s"]
    assert doc["design"] == "paired" and entry["correlation"] == pytest.approx(0.8, abs=0.05)
    unpaired = plan_runs(base, mde=0.1)["scorers"]["s"]["n_needed"]
    assert entry["n_needed"] < unpaired / 3  # pairing removes the shared item effect
    n = entry["n_needed"]
    shared = rng.normal(0, 1, (SIMULATIONS, n))
    d = (shared + 0.1 + rng.normal(0, 0.5, (SIMULATIONS, n))) - (shared + rng.normal(0, 0.5, (SIMULATIONS, n)))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    assert abs((np.abs(t) > stats.norm.ppf(0.975)).mean() - 0.8) <= TOLERANCE


def test_clustered_plan_reaches_the_power() -> None:
    rng = np.random.default_rng(9)
    size = 10  # items per cluster; a cluster effect of sd 0.5, item noise sd 1
    pilot = []
    for c in range(1000):  # a large pilot: its design effect is estimated within a few per cent
        effect = rng.normal(0, 0.5)
        pilot += [scored(f"c{c}-{j}", float(effect + rng.normal()), passage=f"p{c}") for j in range(size)]
    entry = plan_runs(pilot, mde=0.25, cluster_by="passage")["scorers"]["s"]
    assert entry["design_effect"] == pytest.approx(1 + (size - 1) * 0.25 / 1.25, rel=0.3)
    clusters = math.ceil(entry["n_needed"] / size)
    n = clusters * size

    def run_means(shift: float) -> tuple[np.ndarray, np.ndarray]:
        effects = rng.normal(0, 0.5, (SIMULATIONS, clusters, 1))
        values = effects + rng.normal(0, 1, (SIMULATIONS, clusters, size)) + shift
        sums = values.sum(axis=2)
        mean = sums.sum(axis=1) / n
        resid = sums - size * mean[:, None]
        var = clusters / (clusters - 1) * (resid**2).sum(axis=1) / n**2  # CR1
        return mean, var

    ma, va = run_means(0.0)
    mb, vb = run_means(0.25)
    rejected = np.abs(mb - ma) / np.sqrt(va + vb) > stats.norm.ppf(0.975)
    assert abs(rejected.mean() - 0.8) <= TOLERANCE


def test_epochs_gain() -> None:
    rng = np.random.default_rng(10)
    lines = []
    for i in range(400):
        ability = rng.normal(0, 0.5)
        lines += [scored(f"i{i}", float(ability + rng.normal(0, 1)), epoch=e) for e in (1, 2)]
    one = plan_runs(lines, mde=0.2, epochs=1)["scorers"]["s"]
    four = plan_runs(lines, mde=0.2, epochs=4)["scorers"]["s"]
    assert four["epochs"]["within_var"] == pytest.approx(1.0, rel=0.15)
    assert four["epochs"]["between_var"] == pytest.approx(0.25, rel=0.4)
    assert four["n_needed"] < one["n_needed"]
    assert four["epochs"]["gain"] == pytest.approx(1 - (0.25 + 1 / 4) / 1.25, abs=0.08)


def test_bad_input() -> None:
    with pytest.raises(PlanInputError, match="no scores"):
        plan_runs([result("a", "x")])
    with pytest.raises(PlanInputError, match="2 or more epochs"):
        plan_runs([scored("a", 1.0), scored("b", 0.0)], epochs=3)
    with pytest.raises(PlanInputError, match="2 or more items"):
        plan_runs([scored("a", 1.0)])
    with pytest.raises(ValueError, match="mde"):
        plan_runs([scored("a", 1.0), scored("b", 0.0)], mde=-1)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(11)
    pilot = write_jsonl(tmp_path / "pilot.jsonl", [scored(f"i{i}", float(rng.random() < 0.6), passage=f"p{i % 20}") for i in range(200)])
    other = write_jsonl(tmp_path / "other.jsonl", [scored(f"i{i}", float(rng.random() < 0.6), passage=f"p{i % 20}") for i in range(200)])
    assert main(["plan", str(pilot), "--mde", "0.05", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["design"] == "two-sample" and doc["scorers"]["s"]["n_needed"] > 200
    assert main(["plan", str(pilot), str(other), "--cluster-by", "passage"]) == 0
    out = capsys.readouterr().out
    assert "design: paired" in out and "design effect" in out and "detectable difference at hand" in out
    empty = write_jsonl(tmp_path / "empty.jsonl", [result("a", "x"), result("b", "y")])
    assert main(["plan", str(empty)]) == 2
    assert "no scores: score it first" in capsys.readouterr().err
    assert main(["plan", str(pilot), "--epochs", "3"]) == 2
    assert "2 or more epochs per item" in capsys.readouterr().err
    assert main(["plan", str(pilot), "--power", "1.5"]) == 2
    assert "power" in capsys.readouterr().err
    assert main(["plan", str(pilot), "--cluster-by", "nothing"]) == 2
    assert "--cluster-by 'nothing'" in capsys.readouterr().err

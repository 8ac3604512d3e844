"""--cluster-by on score and compare, and in the summary's tally; its bad input (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import statsmodels.api as sm

from dsh_orchestra.cli import main
from dsh_orchestra.eval import ScoreTally
from dsh_orchestra.eval._compare import compare_runs

from eval_support import result, write_jsonl


def scored(item_id: str, value: float | None, passage: Any = None, *, epoch: int | None = None) -> dict[str, Any]:
    line = result(item_id, "x", epoch=epoch, scores={"s": {"value": value, "answer": None, "explanation": None}},
                  usage={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2})
    line["metadata"] = {} if passage is None else {"passage": passage}
    return line


def _data(seed: int, n: int = 60, g: int = 8) -> tuple[list[float], list[int]]:
    rng = np.random.default_rng(seed)
    clusters = rng.integers(0, g, n).tolist()
    effect = rng.normal(0, 1, g)
    return [float(effect[c] + rng.normal() > 0) for c in clusters], clusters


def test_tally_reduces_epochs_first_then_clusters() -> None:
    values, clusters = _data(1)
    tally = ScoreTally(["s"], cluster_by="passage")
    for i, (v, c) in enumerate(zip(values, clusters, strict=True)):
        for epoch in (1, 2):  # two equal epochs: the item, not the epoch, is the unit
            tally.add_line(scored(f"i{i}", v, f"p{c}", epoch=epoch))
    out = tally.scores()["s"]
    fit = sm.OLS(np.asarray(values), np.ones(len(values))).fit(cov_type="cluster", cov_kwds={"groups": np.asarray(clusters)})
    assert out["stderr"] == pytest.approx(float(fit.bse[0]), rel=1e-12)
    assert out["n"] == len(values) and out["n_clusters"] == len(set(clusters))
    assert out["design_effect"] == pytest.approx(out["stderr"] ** 2 / out["stderr_iid"] ** 2)
    assert out["epochs"]["within_var"] == 0.0


def test_compare_clustered_differences() -> None:
    base_values, clusters = _data(2)
    cand_values, _ = _data(3)
    base = [scored(f"i{i}", v, f"p{c}") for i, (v, c) in enumerate(zip(base_values, clusters, strict=True))]
    cand = [scored(f"i{i}", v, f"p{c}") for i, (v, c) in enumerate(zip(cand_values, clusters, strict=True))]
    doc = compare_runs(base, cand, cluster_by="passage")
    s = doc["scorers"]["s"]
    d = np.asarray(cand_values) - np.asarray(base_values)
    fit = sm.OLS(d, np.ones(len(d))).fit(cov_type="cluster", cov_kwds={"groups": np.asarray(clusters)})
    assert s["stderr"] == pytest.approx(float(fit.bse[0]), rel=1e-12)
    assert s["test"] == "cluster sign-flip" and s["n_clusters"] == len(set(clusters))
    assert s["ci95"][0] <= s["diff"] <= s["ci95"][1]
    assert doc["cluster_by"] == "passage" and doc["correction"] == "holm"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": f"i{i}", "prompt": "p", "target": "x" if i % 3 else "y",
                                                    "metadata": {"passage": f"p{i % 5}"}} for i in range(20)])
    base = write_jsonl(tmp_path / "base.jsonl", [scored(f"i{i}", float(i % 3 == 0), f"p{i % 5}") for i in range(20)])
    cand = write_jsonl(tmp_path / "cand.jsonl", [scored(f"i{i}", float(i % 2 == 0), f"p{i % 5}") for i in range(20)])
    return dataset, base, cand


def test_score_cluster_by(tmp_path: Path, runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dataset, base, _ = runs
    code, out, err = run(["score", base, "--dataset", dataset, "--score", "exact", "--out", tmp_path / "r.jsonl",
                          "--cluster-by", "passage", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["scores"]["exact"]["n_clusters"] == 5
    assert summary["scores"]["exact"]["design_effect"] is not None
    assert summary["run"]["cluster_by"] == "passage"


@pytest.mark.parametrize(("field", "message"), [
    ("nope", "--cluster-by 'nope': no item of .* has the metadata key 'nope' \\(their metadata keys: passage\\)"),
])
def test_score_cluster_by_a_field_no_item_has(tmp_path: Path, runs: tuple[Path, Path, Path], field: str, message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    dataset, base, _ = runs
    code, _, err = run(["score", base, "--dataset", dataset, "--score", "exact", "--out", tmp_path / "r.jsonl",
                        "--cluster-by", field], capsys)
    assert code == 2
    import re

    assert re.search(message, err), err
    assert "Traceback" not in err and not (tmp_path / "r.jsonl").exists()


def test_one_cluster_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": f"i{i}", "prompt": "p", "metadata": {"passage": "same"}} for i in range(4)])
    base = write_jsonl(tmp_path / "base.jsonl", [scored(f"i{i}", 1.0, "same") for i in range(4)])
    code, _, err = run(["score", base, "--dataset", dataset, "--score", "exact", "--out", tmp_path / "r.jsonl",
                        "--cluster-by", "passage"], capsys)
    assert code == 2 and "at least 2 clusters" in err and "--cluster-by 'passage'" in err
    code, _, err = run(["compare", base, base, "--cluster-by", "passage"], capsys)
    assert code == 2 and "at least 2 clusters" in err
    code, _, err = run(["batch", dataset, "--out", tmp_path / "out.jsonl", "--score", "exact", "--cluster-by", "passage"], capsys)
    assert code == 2 and "at least 2 clusters" in err and not (tmp_path / "out.jsonl").exists()
    code, _, err = run(["batch", dataset, "--out", tmp_path / "out.jsonl", "--score", "exact", "--cluster-by", "other"], capsys)
    assert code == 2 and "has the metadata key 'other'" in err


def test_compare_cluster_by_cli(runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, base, cand = runs
    code, out, err = run(["compare", base, cand, "--cluster-by", "passage", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["scorers"]["s"]["n_clusters"] == 5 and doc["scorers"]["s"]["test"] == "cluster sign-flip"
    code, out, _ = run(["compare", base, cand, "--cluster-by", "passage"], capsys)
    assert code == 0 and "clusters 5" in out and "design effect" in out
    code, _, err = run(["compare", base, cand, "--cluster-by", "absent"], capsys)
    assert code == 2 and "no item of" in err


def test_report_shows_clusters_epoch_variance_and_pass_hat_k(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": f"i{i}", "prompt": "p", "target": "yes", "metadata": {"passage": f"p{i % 4}"}}
                                                   for i in range(12)])
    results = write_jsonl(tmp_path / "results.jsonl", [
        {**result(f"i{i}", "yes" if (i * e + i) % 5 else "no", epoch=e), "metadata": {"passage": f"p{i % 4}"}}
        for i in range(12) for e in (1, 2, 3)])
    summary = tmp_path / "summary.json"
    code = main(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--out", str(tmp_path / "r.jsonl"),
                 "--cluster-by", "passage", "--epoch-reducer", "pass^2", "--summary", str(summary), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    scores = json.loads(out)["scores"]["exact"]
    assert scores["n_clusters"] == 4 and scores["epochs"]["mean_epochs"] == 3.0
    page = tmp_path / "page.html"
    assert main(["report", str(tmp_path / "r.jsonl"), "--summary", str(summary), "--out", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text()
    for text in ("design effect", "within-item var", "narrowed by epochs", 'id="pass-hat-k"', "pass^2", "95% interval"):
        assert text in html, text

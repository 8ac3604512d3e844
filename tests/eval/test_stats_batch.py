"""batch with cluster_by: the summary's clustered statistics, the epochs' variance, run.cluster_by."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm

from eval_support import lines_of
from test_batch_eval import batch


async def test_batch_summary_is_clustered_with_epochs(tmp_path: Path) -> None:
    summary = await batch(tmp_path, scorers=["exact"], cluster_by="kind", epochs=2, summary=tmp_path / "summary.json")
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == summary.to_json()
    exact = written["scores"]["exact"]
    assert exact["n_clusters"] == 2 and written["run"]["cluster_by"] == "kind"
    # the items' reduced values (mean of 2 equal epochs here), clustered by kind, as statsmodels computes it
    lines = lines_of(tmp_path / "results.jsonl")
    kinds = {"fr": 0, "num": 1, "miss": 0}
    values = {line["id"]: line["scores"]["exact"]["value"] for line in lines if line["id"] in kinds}
    ids = sorted(values)
    fit = sm.OLS(np.asarray([values[i] for i in ids]), np.ones(3)).fit(
        cov_type="cluster", cov_kwds={"groups": np.asarray([kinds[i] for i in ids])})
    assert exact["stderr"] == pytest.approx(float(fit.bse[0]), rel=1e-12)
    assert exact["epochs"]["within_var"] == 0.0 and exact["epochs"]["items"] == 3


async def test_batch_cluster_by_must_be_a_key(tmp_path: Path) -> None:
    from dsh_orchestra.batch import BatchUsageError

    with pytest.raises(BatchUsageError, match="cluster_by"):
        await batch(tmp_path, scorers=["exact"], cluster_by="")

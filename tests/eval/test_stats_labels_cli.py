"""score --labels: agreement with people's labels in the summary; bad labels exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh_orchestra.cli import main

from eval_support import result, write_jsonl


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": f"q{i}", "prompt": "p", "target": "yes"} for i in range(8)])
    # responses: q0-q4 say yes (exact 1), q5-q7 say no (exact 0)
    results = write_jsonl(tmp_path / "results.jsonl", [result(f"q{i}", "yes" if i < 5 else "no") for i in range(8)])
    return dataset, results


def test_labels_agreement(tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dataset, results = files
    # people: q0-q3 correct, q4 incorrect (the scorer is wrong there), q5 correct (wrong too), q6 incorrect
    labels = write_jsonl(tmp_path / "labels.jsonl", [
        {"id": "q0", "label": "correct"}, {"id": "q1", "label": 1}, {"id": "q2", "label": True}, {"id": "q3", "label": 1.0},
        {"id": "q4", "label": "incorrect"}, {"id": "q5", "label": 1}, {"id": "q6", "label": 0}])
    summary_file = tmp_path / "summary.json"
    code = main(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--out", str(tmp_path / "r.jsonl"),
                 "--labels", str(labels), "--summary", str(summary_file), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert json.loads(summary_file.read_text()) == summary
    a = summary["agreement"]["exact"]
    assert a["n"] == 7 and a["accuracy"] == pytest.approx(5 / 7)
    assert a["levels"] == [0.0, 0.5, 1.0]
    # rows: labels 0 / 0.5 / 1; columns: the scorer
    assert a["confusion"] == [[1, 0, 1], [0, 0, 0], [1, 0, 4]]
    # p_o = 5/7, p_e = (2*2 + 5*5)/49 = 29/49: κ = (35/49 - 29/49) / (20/49) = 6/20
    assert a["kappa"] == pytest.approx(0.3)
    assert a["ppi"]["n_all"] == 8 and a["ppi"]["n_labelled"] == 7
    # θ = mean over all 8 (5/8) − mean error on the labelled (f − y: 0,0,0,0,1,−1,0 → 0)
    assert a["ppi"]["mean"] == pytest.approx(5 / 8)


@pytest.mark.parametrize(("rows", "message"), [
    ([{"id": "nope", "label": 1}], "--labels '.*labels.jsonl' line 1: id 'nope' is not an item of the results"),
    ([{"id": "q0", "label": "great"}], "line 1 \\(id 'q0'\\): the label must be a number, true/false or correct/partial/incorrect"),
    ([{"id": "q0"}], "expected"),
])
def test_bad_labels_exit_2(tmp_path: Path, files: tuple[Path, Path], rows: list[dict[str, object]], message: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    dataset, results = files
    labels = write_jsonl(tmp_path / "labels.jsonl", rows)
    code = main(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--out", str(tmp_path / "r.jsonl"),
                 "--labels", str(labels)])
    err = capsys.readouterr().err
    import re

    assert code == 2 and re.search(message, err), err
    assert not (tmp_path / "r.jsonl").exists()


def test_labels_not_json(tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dataset, results = files
    (tmp_path / "labels.jsonl").write_text("{oops\n")
    code = main(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--out", str(tmp_path / "r.jsonl"),
                 "--labels", str(tmp_path / "labels.jsonl")])
    assert code == 2 and "not JSON Lines" in capsys.readouterr().err

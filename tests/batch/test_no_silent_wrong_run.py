"""No silent wrong run (issue 25): a typo'd dataset key, target-based scorers without targets,
--group-by on a field no item has, --resume with another configuration, compare's pass@k
beyond the epochs: each exits 2 with a message naming what to fix. Group keys keep their type."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from dsh_orchestra.batch import DatasetError, load_dataset
from dsh_orchestra.batch._dataset import near_key
from dsh_orchestra.cli import main
from dsh_orchestra.eval import ScoreTally

from batch_support import cli_args, write_dataset


@pytest.mark.parametrize(("key", "near"), [
    ("traget", "target"), ("targte", "target"), ("taget", "target"), ("choises", "choices"), ("choice", "choices"),
    ("promt", "prompt"), ("metdata", "metadata"), ("session-id", "session_id"), ("Target", "target"), ("ids", "id"),
    ("topic", None), ("meta", None), ("x", None), ("difficulty", None), ("answer", None), ("label", None),
])
def test_near_keys(key: str, near: str | None) -> None:
    assert near_key(key) == near


def test_a_typod_key_is_a_dataset_error_by_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [
        {"id": "a", "prompt": "x", "target": "1"},
        {"id": "b", "prompt": "y", "traget": "2"},
        {"id": "c", "prompt": "z", "choises": ["p", "q"], "topic": "kept as a warning"},
    ])
    with pytest.raises(DatasetError) as caught:
        load_dataset(dataset)
    assert [n for n, _ in caught.value.problems] == [2, 3]
    status = main(cli_args(dataset, tmp_path / "r.jsonl", tmp_path, "--score", "exact", "--no-progress"))
    err = capsys.readouterr().err
    assert status == 2
    assert str(dataset) in err and "line 2: item 'b': unknown key 'traget': did you mean `target`?" in err
    assert "line 3: item 'c': unknown key 'choises': did you mean `choices`?" in err
    assert "Traceback" not in err and not (tmp_path / "r.jsonl").exists()


def test_target_based_scorers_need_a_target_somewhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}])
    status = main(cli_args(dataset, tmp_path / "r.jsonl", tmp_path, "--score", "exact", "--score", "choice", "--no-progress"))
    err = capsys.readouterr().err
    assert status == 2 and 'no item has a "target", but scorer(s) exact, choice' in err and str(dataset) in err
    results = write_dataset(tmp_path / "results.jsonl", [{"id": "a", "status": "ok", "final_response": "x"}])
    status = main(["score", str(results), "--dataset", str(dataset), "--score", "numeric", "--out", str(tmp_path / "o.jsonl")])
    assert status == 2 and 'no item has a "target"' in capsys.readouterr().err


def test_group_by_a_field_no_item_has_is_refused_and_a_partial_one_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [
        {"id": "a", "prompt": "x", "target": "1", "metadata": {"topic": "t", "level": 7}},
        {"id": "b", "prompt": "y", "target": "2", "metadata": {"level": "7"}},
        {"id": "c", "prompt": "z", "target": "3"},
    ])
    status = main(cli_args(dataset, tmp_path / "r.jsonl", tmp_path, "--score", "exact", "--group-by", "topik", "--no-progress"))
    err = capsys.readouterr().err
    assert status == 2 and "--group-by 'topik'" in err and "metadata keys: level, topic" in err
    status = main(cli_args(dataset, tmp_path / "r.jsonl", tmp_path, "--score", "exact", "--group-by", "level", "--no-progress", "--json"))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "warning: group_by 'level': 1 of 3 items have no such metadata key" in captured.err
    summary = json.loads(captured.out)
    assert sorted(summary["groups"]) == ['"7"', "(missing)", "7"]  # 7 and "7" apart, missing its own group
    assert all(g["exact"]["n"] + g["exact"]["n_na"] + g["exact"]["n_error"] == 1 for g in summary["groups"].values())


def test_group_keys_keep_their_json_type() -> None:
    tally = ScoreTally(["s"], group_by="k")
    values = [7, "7", None, "null", True, "true", 7.5, "(missing)"]
    for index, value in enumerate(values):
        tally.add_line({"id": f"i{index}", "status": "ok", "scores": {"s": {"value": 1.0}}, "metadata": {"k": value}})
    tally.add_line({"id": "none", "status": "ok", "scores": {"s": {"value": 1.0}}, "metadata": {}})
    tally.add_line({"id": "none2", "status": "ok", "scores": {"s": {"value": 0.0}}})
    groups = tally.groups()
    assert groups is not None
    assert sorted(groups) == sorted(['7', '"7"', 'null', '"null"', 'true', '"true"', '7.5', '"(missing)"', "(missing)"])
    assert groups["(missing)"]["s"]["n"] == 2 and groups["(missing)"]["s"]["mean"] == 0.5
    alone = ScoreTally(["s"], group_by="k")  # no collision: a string is named as it is
    alone.add_line({"id": "a", "status": "ok", "scores": {"s": {"value": 1.0}}, "metadata": {"k": "7"}})
    assert list(alone.groups() or {}) == ["7"]


def test_resume_refuses_another_configuration_and_allows_more_epochs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "a", "prompt": "x", "target": "1"}, {"id": "b", "prompt": "y", "target": "2"}])
    out = tmp_path / "r.jsonl"
    assert main(cli_args(dataset, out, tmp_path, "--score", "exact", "--no-progress")) == 0
    recorded = json.loads((tmp_path / "r.jsonl.run.json").read_text())
    assert recorded["scorers"] == ["exact"] and len(recorded["dataset_sha256"]) == 64
    capsys.readouterr()
    status = main(cli_args(dataset, out, tmp_path, "--score", "exact", "--score", "includes", "--model", "other", "--resume", "--no-progress"))
    err = capsys.readouterr().err
    assert status == 2
    assert "the scorers (scorers), the model (model) differ(s)" in err and "dsh-orchestra score" in err
    scoring = tmp_path / "scoring.toml"
    scoring.write_text('[prompt]\ntemplate = "none"\n')
    status = main(cli_args(dataset, out, tmp_path, "--score", "exact", "--scoring", str(scoring), "--resume", "--no-progress"))
    err = capsys.readouterr().err
    assert status == 2 and "the scoring file (scoring_sha256), the prompt template (prompt_template)" in err
    before = out.read_bytes()
    status = main(cli_args(dataset, out, tmp_path, "--score", "exact", "--epochs", "2", "--resume", "--no-progress"))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert out.read_bytes().startswith(before) and sorted((r["id"], r.get("epoch", 1)) for r in lines) == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]
    changed = write_dataset(tmp_path / "ds.jsonl", [{"id": "a", "prompt": "x", "target": "9"}, {"id": "b", "prompt": "y", "target": "2"}])
    status = main(cli_args(changed, out, tmp_path, "--score", "exact", "--epochs", "2", "--resume", "--no-progress"))
    assert status == 2 and "the dataset (dataset_sha256)" in capsys.readouterr().err


def test_compare_refuses_pass_at_k_beyond_the_epochs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = {"id": "a", "status": "ok", "scores": {"s": {"value": 1.0}}}
    base = write_dataset(tmp_path / "b.jsonl", [line])
    cand = write_dataset(tmp_path / "c.jsonl", [{**line, "epoch": 1}, {**line, "epoch": 2}])
    assert main(["compare", str(base), str(cand), "--epoch-reducer", "pass@2"]) == 2
    err = capsys.readouterr().err
    assert "pass@2 needs k <= the epochs of each run, but the base run has 1 epoch(s)" in err
    assert main(["compare", str(cand), str(cand), "--epoch-reducer", "pass@2", "--json"]) == 0

"""Dataset fields for scoring: target (a string or a list), choices, metadata; unknown keys warn."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_orchestra.batch import DatasetError, check_dataset, load_dataset

from eval_support import write_jsonl


def test_target_choices_metadata_are_read(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "ds.jsonl", [
        {"id": "a", "prompt": "p", "target": "Paris"},
        {"id": "b", "prompt": "p", "target": ["42", "forty-two"], "choices": ["x", "y"], "metadata": {"k": 1}},
        {"id": "c", "prompt": "p", "extra": 1},
    ])
    items, unknown = load_dataset(path)
    assert [(i.target, i.choices, i.metadata) for i in items] == [
        ("Paris", None, {}), (["42", "forty-two"], ["x", "y"], {"k": 1}), (None, None, {}),
    ]
    assert unknown == ["extra"]  # target and choices are known keys now
    assert check_dataset(path).unknown == ("extra",)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"target": 42}, "'target' must be a string or a non-empty list of strings"),
        ({"target": []}, "'target' must be a string or a non-empty list of strings"),
        ({"target": ["a", 1]}, "'target' must be a string or a non-empty list of strings"),
        ({"choices": "abc"}, "'choices' must be a list of strings"),
        ({"choices": ["a", None]}, "'choices' must be a list of strings"),
        ({"metadata": [1]}, "'metadata' must be an object"),
    ],
)
def test_bad_fields_are_refused_by_line(tmp_path: Path, row: dict[str, object], message: str) -> None:
    path = write_jsonl(tmp_path / "ds.jsonl", [{"id": "ok", "prompt": "p"}, {"id": "bad", "prompt": "p", **row}])
    with pytest.raises(DatasetError, match=message) as caught:
        load_dataset(path)
    assert caught.value.problems[0][0] == 2

"""Scorer names are strings, each once per line: a scorer table made in Python with both ``1``
and ``"1"`` (JSON cannot hold it) is refused with the name, not read into shifted columns."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_orchestra.eval import (
    RunInputError,
    ScorerSpec,
    ScoringError,
    compare_runs,
    reduce_items,
    run_columns,
    scorer_names,
)
from dsh_orchestra.eval._tally import scorer_specs


def _line(item: str, scores: dict[Any, Any]) -> dict[str, Any]:
    return {"id": item, "status": "ok", "scores": scores}


@pytest.mark.parametrize(("scores", "spellings"), [
    ({1: {"value": 1.0}, "1": {"value": 0.0}}, "1 and '1'"),
    ({"1": {"value": 0.0}, 1: {"value": 1.0}}, "'1' and 1"),
    ({"a": {"value": 0.5}, 1: {"value": 1.0}, "b": None, "1": {"value": 0.0}}, "1 and '1'"),
])
def test_one_name_twice_in_a_line_is_refused_naming_it(scores: dict[Any, Any], spellings: str) -> None:
    lines = [_line("x", {"1": {"value": 1.0}, "a": {"value": 1.0}}), _line("y", scores)]
    with pytest.raises(RunInputError) as caught:
        run_columns(lines)
    assert str(caught.value) == (f"line 2 (id 'y'): scorer name '1' is given twice (as {spellings}); "
                                 "scorer names are strings, each once in a line's scores")
    with pytest.raises(RunInputError, match="scorer name '1' is given twice"):
        compare_runs(lines, [_line("x", {"1": {"value": 1.0}}), _line("y", {"1": {"value": 1.0}})])
    with pytest.raises(RunInputError, match="scorer name '1' is given twice"):
        reduce_items(lines, ["1"])


def test_two_names_that_read_alike_and_are_not_str() -> None:
    class Name:
        def __init__(self, n: int) -> None:
            self.n = n

        def __str__(self) -> str:
            return "s"

    with pytest.raises(RunInputError, match=r"scorer name 's' is given twice \(as <"):
        run_columns([_line("x", {Name(1): {"value": 1.0}, Name(2): {"value": 0.0}})])


def test_a_lone_name_that_is_not_a_str_is_its_text_and_the_columns_stay_aligned() -> None:
    lines = [_line("x", {1: {"value": 1.0}}), _line("y", {"1": {"value": 0.0}, "a": {"value": 0.5}}),
             _line("z", {"a": {"value": 1.0}})]
    run = run_columns(lines)
    assert run.names == ["1", "a"] == scorer_names(lines)
    assert [len(run.values[n]) for n in run.names] == [3, 3]
    assert run.values["1"].tolist()[:2] == [1.0, 0.0] and run.values["1"][2] != run.values["1"][2]
    assert reduce_items(lines, ["1"])[0] == {"x": {"1": 1.0}, "y": {"1": 0.0}, "z": {"1": None}}


@pytest.mark.parametrize("name", [1, None, b"exact"])
def test_a_scorer_spec_name_must_be_a_str(name: Any) -> None:
    with pytest.raises(ScoringError) as caught:
        ScorerSpec(name, "exact")
    assert str(caught.value) == f"a scorer's name is the key of a line's scores: a string, not {name!r}"


def test_specs_named_1_and_str_1_cannot_both_score_a_run() -> None:
    # before, ScorerSpec(1, ...) was taken: a run with it and "1" wrote {"1": ..., "1": ...} (one key twice)
    with pytest.raises(ScoringError):
        scorer_specs([ScorerSpec("1", "exact"), ScorerSpec(1, "exact")])
    with pytest.raises(ScoringError, match=r"scorer name\(s\) \['1'\] given twice"):
        scorer_specs([ScorerSpec("1", "exact"), ScorerSpec("1", "includes")])

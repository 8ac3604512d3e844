"""Typed outputs: finding the JSON in a response and structuring it strictly (pure, no trio)."""

from __future__ import annotations

from typing import Literal

import attrs
import pytest

from dsh_orchestra.workflow import REPAIR_PREFIX, OutputParseError, extract_json, parse_output, repair_prompt


@attrs.frozen
class Review:
    file: str
    verdict: Literal["approve", "changes"]
    issues: list[str] = attrs.field(factory=list)
    score: float = 0.0


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  [1, 2]\n', [1, 2]),
        ('Here you go:\n```json\n{"a": 1}\n```\nthanks', {"a": 1}),
        ('```\n{"a": 2}\n```', {"a": 2}),
        ('```json\n{"a": 1}\n```\nafter review:\n```json\n{"a": 3}\n```', {"a": 3}),  # the last block wins
        ('```json\n{"a": 1}\n```\n```json\nnot json\n```', {"a": 1}),  # the last one that parses
    ],
)
def test_extract_json(text: str, value: object) -> None:
    assert extract_json(text) == value


def test_extract_json_without_json() -> None:
    with pytest.raises(OutputParseError, match="no JSON found"):
        extract_json("I looked at the file and it is fine.")


def test_parse_output_structures_attrs_classes() -> None:
    text = '```json\n{"file": "a.py", "verdict": "changes", "issues": ["x"], "score": 3, "extra": true}\n```'
    assert parse_output(text, Review) == Review(file="a.py", verdict="changes", issues=["x"], score=3.0)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"verdict": "approve"}', r"required field missing @ \$\.file"),
        ('{"file": "a", "verdict": "maybe"}', r"@ \$\.verdict"),
        ('{"file": 1, "verdict": "approve"}', r"expected str, not int 1 @ \$\.file"),
        ('{"file": "a", "verdict": "approve", "issues": "none"}', r"expected a JSON array, not str 'none' @ \$\.issues"),
        ('{"file": "a", "verdict": "approve", "issues": ["ok", 2]}', r"expected str, not int 2 @ \$\.issues\[1\]"),
        ('{"file": "a", "verdict": "approve", "score": "high"}', r"expected a number.*@ \$\.score"),
        ('["a"]', "expected a JSON object, not list"),
        ("looks good to me", "no JSON found"),
    ],
)
def test_parse_output_problems_name_the_path(text: str, problem: str) -> None:
    with pytest.raises(OutputParseError, match=problem) as info:
        parse_output(text, Review)
    assert info.value.type_name == "Review"


def test_no_coercion_of_booleans() -> None:
    @attrs.frozen
    class Flag:
        ok: bool

    with pytest.raises(OutputParseError, match="expected bool, not str 'false'"):
        parse_output('{"ok": "false"}', Flag)


def test_repair_prompt_names_the_problem_and_the_fields() -> None:
    with pytest.raises(OutputParseError) as info:
        parse_output("no", Review)
    text = repair_prompt(info.value, Review)
    assert text.startswith(REPAIR_PREFIX)
    assert "no JSON found" in text and "file: str" in text and "issues: list[str]" in text and "```json" in text

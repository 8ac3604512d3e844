"""Contradictory ``--answer``s to one interrupt are refused (issue 31, part 7), not "the last wins"."""

from __future__ import annotations

import pytest

from dsh_orchestra.cli._common import UsageError
from dsh_orchestra.cli._run import parse_answers


def test_one_interrupt_answered_twice_differently_is_refused() -> None:
    with pytest.raises(UsageError, match=r"--answer review:0: given twice with different values \('yes', 'no'\)"):
        parse_answers(["review:0=yes", "other:0=x", "review:0=no"])


def test_the_same_answer_twice_and_distinct_interrupts_are_fine() -> None:
    assert parse_answers(["review:0=yes", "review:0=yes", "b:1=a=b"]) == {"review:0": "yes", "b:1": "a=b"}

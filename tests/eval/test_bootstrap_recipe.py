"""docs/evaluation.md describes the bootstrap exactly: its numpy recipe, run as written, gives
the summary's ci95 to the last digit (the multinomial shortcut, the uniform draws in chunks,
the levels path of metrics)."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.eval import ScoreTally, bootstrap_ci, metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"


def _recipe() -> Any:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL) if "def ci95(" in b]
    assert len(blocks) == 1, "docs/evaluation.md holds one ci95 recipe"
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)  # noqa: S102 (the documented recipe, run as written)
    return namespace["ci95"]


def _cases() -> list[tuple[str, list[float], int]]:
    rnd = random.Random(25)
    return [
        ("ten 0/1 scores", [1, 0, 1, 1, 0, 1, 1, 1, 0, 1], 0),
        ("one value", [0.5] * 7, 3),
        ("three levels", [rnd.choice([0.0, 0.5, 1.0]) for _ in range(40)], 1),
        ("200 0/1 scores (the levels path of metrics)", [float(rnd.random() < 0.3) for _ in range(200)], 7),
        ("continuous, 100", [rnd.random() for _ in range(100)], 0),
        ("continuous, 3,000 (several chunks)", [rnd.gauss(0, 1) for _ in range(3000)], 2),
    ]


@pytest.mark.parametrize(("name", "values", "seed"), _cases(), ids=[c[0] for c in _cases()])
def test_the_documented_recipe_reproduces_ci95_to_the_last_digit(name: str, values: list[float], seed: int) -> None:
    ci95 = _recipe()
    expected = metrics(values, seed=seed)["ci95"]
    assert list(ci95(values, seed=seed)) == expected  # equal floats, not approximately
    assert list(bootstrap_ci(values, seed=seed) or ()) == expected
    tally = ScoreTally(["s"], seed=seed)
    for index, value in enumerate(values):
        tally.add_line({"id": f"i{index}", "status": "ok", "scores": {"s": {"value": value}}})
    assert tally.scores()["s"]["ci95"] == expected

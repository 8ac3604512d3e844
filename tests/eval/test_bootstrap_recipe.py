"""docs/evaluation.md describes the bootstrap and the sign-flip test exactly: their numpy
recipes, run as written, give the summary's ci95 to the last digit (the multinomial shortcut,
the uniform draws in chunks, fewer resamples above n = 10,000, the levels path of metrics) and
compare's sign-flip p_value."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.eval import ScoreTally, bootstrap_ci, compare_runs, metrics, sign_flip_test

DOC = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"


def _recipe(name: str = "ci95") -> Any:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL) if f"def {name}(" in b]
    assert len(blocks) == 1, f"docs/evaluation.md holds one {name} recipe"
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)  # noqa: S102 (the documented recipe, run as written)
    return namespace[name]


def _cases() -> list[tuple[str, list[float], int]]:
    rnd = random.Random(25)
    return [
        ("ten 0/1 scores", [1, 0, 1, 1, 0, 1, 1, 1, 0, 1], 0),
        ("one value", [0.5] * 7, 3),
        ("three levels", [rnd.choice([0.0, 0.5, 1.0]) for _ in range(40)], 1),
        ("200 0/1 scores (the levels path of metrics)", [float(rnd.random() < 0.3) for _ in range(200)], 7),
        ("continuous, 100", [rnd.random() for _ in range(100)], 0),
        ("continuous, 3,000 (several chunks)", [rnd.gauss(0, 1) for _ in range(3000)], 2),
        ("continuous, 25,000 (4,000 resamples)", [rnd.random() for _ in range(25_000)], 4),
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


def _differences() -> list[tuple[str, list[float], int]]:
    rnd = random.Random(26)
    return [
        ("ten, enumerated", [rnd.uniform(-1, 1) for _ in range(10)], 0),
        ("thirteen and zeros, enumerated", [rnd.uniform(-1, 1) for _ in range(13)] + [0.0] * 5, 0),
        ("fourteen, drawn", [rnd.uniform(-1, 1) for _ in range(14)], 3),
        ("halves with ties, drawn", [rnd.choice([-1.0, -0.5, 0.0, 0.5, 1.0]) for _ in range(300)], 1),
        ("continuous 1,001 (a partial byte, several chunks)", [rnd.gauss(0.05, 1) for _ in range(1001)], 5),
        ("continuous 30,000 (one assignment per chunk row set)", [rnd.gauss(0.0, 1) for _ in range(30_000)], 0),
        ("400,000 of nearly one size (the normal p, no draws)",
         [rnd.uniform(0.9, 1.1) * rnd.choice([1.0, -1.0]) for _ in range(400_000)], 2),
    ]


@pytest.mark.parametrize(("name", "differences", "seed"), _differences(), ids=[c[0] for c in _differences()])
def test_the_documented_sign_flip_recipe_reproduces_p(name: str, differences: list[float], seed: int) -> None:
    sign_flip_p = _recipe("sign_flip_p")
    assert sign_flip_p(differences, seed=seed) == sign_flip_test(differences, seed=seed)


def test_compare_p_value_and_ci95_are_the_recipes() -> None:
    rnd = random.Random(27)
    base = [rnd.random() for _ in range(400)]
    candidate = [min(1.0, v + rnd.uniform(-0.1, 0.15)) for v in base]

    def lines(values: list[float]) -> list[dict[str, Any]]:
        return [{"id": f"i{k}", "status": "ok", "scores": {"s": {"value": v}}} for k, v in enumerate(values)]

    entry = compare_runs(lines(base), lines(candidate), seed=9)["scorers"]["s"]
    differences = [c - b for b, c in zip(base, candidate, strict=True)]
    assert entry["test"] == "sign-flip"
    assert entry["p_value"] == _recipe("sign_flip_p")(differences, seed=9)
    assert entry["ci95"] == list(_recipe()(differences, seed=9))

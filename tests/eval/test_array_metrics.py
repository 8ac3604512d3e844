"""``array_metrics`` (the leaderboard's and the score summary's metrics of a numpy column) gives
``metrics`` of the same values as a list, bit for bit, without a list or a Counter of them."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dsh_orchestra.eval._metrics import array_metrics, array_stderr, metrics, stderr


@pytest.mark.parametrize("values", [
    [],
    [0.25],
    [0.25, 0.75],
    [0.1 * k for k in range(60)],  # at most 64 values: no level shortcut either way
    [0.0, -0.0, 1.0] * 40,  # a negative zero: no level shortcut
    [0.0, 0.5, 1.0] * 40,  # few levels
    np.random.default_rng(3).random(5_000).tolist(),  # many levels: the index bootstrap
    np.random.default_rng(4).normal(size=12_000).tolist(),  # n > 10,000: fewer resamples
])
def test_the_same_dict_as_metrics_of_the_list(values: list[float]) -> None:
    array = np.asarray(values, dtype=np.float64)
    assert array_metrics(array, 2, seed=7) == metrics(values, 2, seed=7)
    assert array_stderr(array) == stderr(values)


def test_many_levels_hold_no_python_float_per_value() -> None:
    array = np.random.default_rng(5).random(200_000)
    array_metrics(array[:100], seed=1)  # (imports and caches warm)
    tracemalloc.start()
    try:
        array_metrics(array, seed=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # about 49 bytes a value (numpy's sorted copy, the hashed bytes, a chunk of the draws); a list
    # and a Counter of the values as Python floats took about 125
    assert peak < 80 * len(array), f"{peak / len(array):.0f} bytes a value at peak: a list or Counter of the values?"

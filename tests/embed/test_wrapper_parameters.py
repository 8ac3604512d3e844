"""The sync and asyncio wrappers take the same keyword arguments as the trio functions they wrap."""

from __future__ import annotations

import inspect

import pytest

import dsh_orchestra
from dsh_orchestra import aio, sync

WRAPPED = ["open_runtime", "run_workflow"]


@pytest.mark.parametrize("module", [sync, aio], ids=["sync", "aio"])
@pytest.mark.parametrize("name", WRAPPED)
def test_same_parameters_as_the_trio_function(module: object, name: str) -> None:
    trio_params = inspect.signature(getattr(dsh_orchestra, name)).parameters
    wrapper_params = inspect.signature(getattr(module, name)).parameters
    assert list(wrapper_params) == list(trio_params)
    for key, param in trio_params.items():
        assert wrapper_params[key].default == param.default, key


def test_sync_open_runtime_without_a_gateway_runs_the_simulator() -> None:
    with sync.open_runtime(gateway=None) as runtime:
        assert runtime.alive

"""Fixtures of the workflow tests (the fakes and helpers are in workflow_support.py).

* ``sim_spec(script, **options)``: a RuntimeSpec for the in-process simulator (memory streams,
  trio.sleep delays, so ``autojump_clock`` runs scenarios in virtual time). ``meter=`` puts a
  :class:`~workflow_support.WireMeter` between the client and the simulator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import Script
from dsh_orchestra.testing._simulator import open_simulator_stream

from .workflow_support import WireMeter, scenario


@pytest.fixture
def sim_spec(tmp_path: Path) -> Callable[..., RuntimeSpec]:
    """``sim_spec(script, meter=None, **sim_options)``: an in-process simulator RuntimeSpec."""
    cwd = tmp_path / "ws"
    cwd.mkdir(exist_ok=True)

    def make(script: Script | str, *, meter: WireMeter | None = None, name: str = "sim", **options: Any) -> RuntimeSpec:
        parsed = scenario(script) if isinstance(script, str) else script

        @asynccontextmanager
        async def connect() -> AsyncIterator[trio.abc.Stream]:
            async with open_simulator_stream(parsed, **options) as stream:
                if meter is None:
                    yield stream
                else:
                    async with meter.wrap(stream) as wrapped:
                        yield wrapped

        return RuntimeSpec(connect=connect, cwd=cwd, name=name)

    return make

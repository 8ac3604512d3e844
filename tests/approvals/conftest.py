"""Fixtures of the approvals and questions tests (the shared ones are in tests/conftest.py).

* ``sim``: a factory ``sim(script_toml=SCRIPT, **sim_options) -> (RuntimeSpec, SimWire)`` for
  the in-process simulator. ``SimWire`` holds the SimulatedRuntime once connected and every
  frame in both directions, so a test can check what was (and was not) sent.
* ``process_sim``: a factory ``process_sim(script_toml=SCRIPT, **spec_fields) -> RuntimeSpec``
  for the simulator as a process (``python -m dsh_orchestra.testing sim``).

The scenario and the helpers are in approval_support.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from approval_support import SCRIPT, RecordingStream, SimWire, script_of
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._simulator import open_simulator


@pytest.fixture
def sim(workspace: Path) -> Callable[..., tuple[RuntimeSpec, SimWire]]:
    """``sim(script_toml=SCRIPT, **sim_options)``: an in-process simulator spec and its wire."""

    def make(script: str = SCRIPT, **options: Any) -> tuple[RuntimeSpec, SimWire]:
        parsed = script_of(script)
        wire = SimWire()

        @asynccontextmanager
        async def connect() -> AsyncIterator[trio.abc.Stream]:
            async with open_simulator(parsed, **options) as (runtime, stream):
                wire.runtime = runtime
                yield RecordingStream(stream, wire)

        return RuntimeSpec(connect=connect, cwd=workspace, name="sim"), wire

    return make


@pytest.fixture
def process_sim(tmp_path: Path, dsh_home: Path, workspace: Path) -> Callable[..., RuntimeSpec]:
    """``process_sim(script_toml=SCRIPT, **spec_fields)``: the simulator as a process."""

    def make(script: str = SCRIPT, **fields: Any) -> RuntimeSpec:
        path = tmp_path / "scenario.toml"
        path.write_text(script, encoding="utf-8")
        fields.setdefault("env", {"DSH_TELEMETRY_MODE": "DISABLED"})
        return RuntimeSpec.simulator(script=path, dsh_home=dsh_home, cwd=workspace, **fields)

    return make

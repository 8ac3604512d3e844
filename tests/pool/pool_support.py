"""Helpers of the pool tests: simulated runtimes in-process (virtual time) and as processes."""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import Script, parse_script
from dsh_orchestra.testing._simulator import open_simulator_stream

POOL_SCRIPT = """
[[rules]]
name = "slow"
match = "SLOW"
reply = "slow done"
delay = 5.0

[[rules]]
name = "hang"
match = "HANG"
hang = true

[[rules]]
name = "crash"
match = "CRASH"
crash = true

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children done"

[[rules.spawn]]
description = "child task one"
prompt = "CHILD: one"
reply = "one done"

[[rules.spawn]]
description = "child task two"
prompt = "CHILD: two"
reply = "two done"

[[rules]]
name = "deploy"
match = "DEPLOY"
reply = "deploy was {outcome}"
approval = { tool = "bash", reason = "needs network" }
"""

FAST_LADDER: dict[str, Any] = dict(shutdown_timeout=0.5, eof_grace=0.5, terminate_grace=0.5)


def script_of(text: str) -> Script:
    """A scenario script from TOML text."""
    return parse_script(tomllib.loads(text), source="<test>")


def in_process(script: Script, *, name: str = "sim", **kwargs: Any) -> RuntimeSpec:
    """A spec whose runtime is the simulator in this process (works under MockClock)."""
    return RuntimeSpec(connect=lambda: open_simulator_stream(script), name=name, **kwargs)


@pytest.fixture
def pool_script() -> Script:
    return script_of(POOL_SCRIPT)


@pytest.fixture
def sim_process(tmp_path: Path) -> Callable[..., RuntimeSpec]:
    """``sim_process(script_text=POOL_SCRIPT, **spec_overrides)``: the simulator as a process."""

    def make(script_text: str = POOL_SCRIPT, **overrides: Any) -> RuntimeSpec:
        script = tmp_path / "pool-script.toml"
        script.write_text(script_text)
        home = tmp_path / "dsh-home"
        home.mkdir(exist_ok=True)
        values: dict[str, Any] = dict(FAST_LADDER, dsh_home=home, cwd=tmp_path,
                                      env={"DSH_TELEMETRY_MODE": "DISABLED"})
        values.update(overrides)
        return RuntimeSpec.simulator(script=script, **values)

    return make


PYTHON = sys.executable

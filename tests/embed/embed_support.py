"""Helpers of the embedding tests (sync, aio, frames): a simulator scenario and its spec."""

from __future__ import annotations

from pathlib import Path

import orjson

from dsh_orchestra.runtime import RuntimeSpec

SCENARIO = """
default_reply = "echo: {prompt}"

[[rules]]
name = "stuck"
match = "HANG"
hang = true

[[rules]]
name = "escalation"
match = "BASHESC"
approval = { tool = "bash", reason = "delete build/" }
reply = "The bash call was {outcome}."
"""

DATASET = [
    {"id": "a", "prompt": "alpha", "target": "echo: alpha", "metadata": {"topic": "greek", "level": 1}},
    {"id": "b", "prompt": "beta", "target": "nope", "metadata": {"topic": "greek", "level": 2}},
    {"id": "c", "prompt": "gamma", "target": ["echo: gamma", "x"], "metadata": {"topic": "other", "level": 1}},
]


def sim_spec(tmp_path: Path) -> RuntimeSpec:
    """The simulator (a process) with ``SCENARIO``, in a fresh DSH_HOME under ``tmp_path``."""
    script = tmp_path / "scenario.toml"
    script.write_text(SCENARIO)
    (tmp_path / "home").mkdir(exist_ok=True)
    return RuntimeSpec.simulator(script=script, dsh_home=tmp_path / "home", cwd=tmp_path)


def write_dataset(tmp_path: Path) -> Path:
    """``DATASET`` as a JSON Lines file."""
    path = tmp_path / "dataset.jsonl"
    path.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in DATASET))
    return path

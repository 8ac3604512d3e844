"""The README's Quick start: the first command's job runs as written (on the simulator)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    """The shell commands of the README's Quick start section, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)]


def test_the_quick_start_has_exactly_two_commands() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "pip install ." in commands[0] and "dsh-orchestra batch" in commands[0]
    assert "pip install '.[test" in commands[1] and commands[1].endswith("python -m pytest")


def test_the_first_command_runs_the_batch_and_resumes(tmp_path: Path) -> None:
    """The batch part of command one, run twice from a fresh directory: all ok, then all resumed."""
    batch = quick_start_commands()[0].split("&& dsh-orchestra ", 1)[1]
    argv = [sys.executable, "-m", "dsh_orchestra.cli._main", *shlex.split(batch), "--json"]  # the summary as JSON
    argv = [str(ROOT / a) if a.startswith("recipes/") else a for a in argv]
    for round_ in range(2):
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["total"] == 5 and summary["ok"] == 5
        assert summary["resumed"] == (5 if round_ else 0)
    lines = [json.loads(text) for text in (tmp_path / "results.jsonl").read_text().splitlines()]
    by_id = {line["id"]: line for line in lines}
    assert sorted(by_id) == ["approval", "greet", "question", "spawn-review", "summarise"]
    assert len(by_id["spawn-review"]["subagents"]) == 2
    assert by_id["approval"]["approvals"][0]["outcome"] == "rejected"
    assert by_id["question"]["final_response"] == "Deploying to staging."

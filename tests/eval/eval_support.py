"""Helpers of the evaluation tests: datasets, results files, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def result(item_id: str, response: str | None, *, status: str = "ok", epoch: int | None = None, **extra: Any) -> dict[str, Any]:
    """A result line as ``batch`` writes it."""
    line: dict[str, Any] = {
        "id": item_id, "status": status, "session_id": f"s-{item_id}-{epoch}", "final_response": response,
        "finish_reason": "completed" if status == "ok" else "error", "subagents": [], "approvals": [],
        "attempts": 1, "duration_s": 0.1, "error": None if status == "ok" else {"type": "TurnFailed", "message": "x"},
        "metadata": {},
    }
    if epoch is not None:
        line["epoch"] = epoch
    line.update(extra)
    return line


def run_cli(args: Sequence[str], *, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a real subprocess (telemetry off)."""
    full_env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", **(env or {})}
    return subprocess.run([*CLI, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)

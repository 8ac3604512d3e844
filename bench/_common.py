"""Shared helpers of the foundation benchmarks (W1, W2): frames, statistics, machine facts.

The realistic notifications come from ``bench/data/session_events.jsonl``: every real
``session.event`` frame of the recorded transcripts whose compact encoding is 300-1,500
bytes. Regenerate it with ``python bench/_common.py --extract /work/shared/transcripts``.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
EVENTS_FILE = BENCH_DIR / "data" / "session_events.jsonl"
FAKE_RUNTIME = BENCH_DIR / "fake_runtime.py"
MIN_SIZE, MAX_SIZE = 300, 1500

BLAST = "bench/blast"
"""Fake-runtime method: answer ``{}`` at once, then write ``count`` notifications."""


_SCRATCH: list[Path] = []


def scratch_file(name: str) -> Path:
    """A path ``name`` in a fresh directory of this benchmark's scratch space (one temporary
    directory per process, removed when it exits)."""
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="dsh-bench-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return Path(tempfile.mkdtemp(dir=_SCRATCH[0])) / name


def compact(frame: Any) -> bytes:
    """The frame as the runtime writes it: compact JSON, one line."""
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def extract(transcripts: Path) -> list[bytes]:
    """Every server-to-client ``session.event`` frame of 300-1,500 bytes, in file order."""
    lines: list[bytes] = []
    for path in sorted(transcripts.glob("*.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(raw)
            frame = record["frame"]
            if record["dir"] != "s2c" or not isinstance(frame, dict):
                continue
            if frame.get("method") != "session.event":
                continue
            line = compact(frame)
            if MIN_SIZE <= len(line) - 1 <= MAX_SIZE:
                lines.append(line)
    return lines


def event_lines() -> list[bytes]:
    """The benchmark's notification frames, each ending in ``\\n``."""
    return [line + b"\n" for line in EVENTS_FILE.read_bytes().splitlines() if line]


def fake_runtime_command() -> tuple[str, ...]:
    """How to launch the fake runtime process."""
    return (sys.executable, str(FAKE_RUNTIME))


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (``fraction`` in 0..1)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def median(values: list[float]) -> float:
    return statistics.median(values)


def machine() -> dict[str, str]:
    """The facts a reader needs to compare figures: cores, CPU model, Python, OS."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
    }


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--extract":
        sys.exit("usage: python bench/_common.py --extract <transcripts dir>")
    found = extract(Path(sys.argv[2]))
    EVENTS_FILE.parent.mkdir(exist_ok=True)
    EVENTS_FILE.write_bytes(b"".join(found))
    sizes = sorted(len(line) - 1 for line in found)
    print(f"wrote {len(found)} frames to {EVENTS_FILE} "
          f"(bytes: min {sizes[0]}, median {sizes[len(sizes) // 2]}, max {sizes[-1]})")

"""Checkpoint journal size and cost: a fan-out of N prompt steps on the in-process simulator.

    python bench/workflow_journal.py --items 1000 --trials 5

Per trial, in a fresh temporary directory and a fresh in-process simulated runtime (memory
streams; the simulator answers at once with a fixed 200-character reply):

* ``plain``: ``run_workflow`` of a function step returning N items and a prompt step fanned
  out over them (concurrency 16), no checkpoint;
* ``checkpoint``: the same with ``checkpoint=`` (one committed row per item as it completes).

For ``checkpoint`` it records the journal's bytes on disk after the run (the SQLite file plus
its WAL, ``size_of``), the bytes of the items' JSON rows, the bytes after ``compact_checkpoint``,
and a resume of the finished run (wall time; prompts sent: none). Modes are interleaved; the
figures are medians. ``--commit-cost`` also times 2,000 one-row commits with
``synchronous=NORMAL`` (what the journal uses) and ``FULL`` (an fsync per commit) in the same
directory. One JSON line per trial on stdout, then a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from dsh_orchestra.runtime import RuntimeSpec  # noqa: E402
from dsh_orchestra.testing._script import parse_script  # noqa: E402
from dsh_orchestra.testing._simulator import open_simulator_stream  # noqa: E402
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, compact_checkpoint, run_workflow  # noqa: E402
from dsh_orchestra.workflow._journal import size_of  # noqa: E402

REPLY = ("The change is fine: the loop is bounded, errors propagate, and the test covers it. " * 3)[:200]
SCRIPT = parse_script(tomllib.loads(f'default_reply = "{REPLY}"\n'), source="workflow_journal")


def fan_out(items: int) -> Workflow:
    wf = Workflow("journal")

    @wf.step()
    async def files(ctx: StepContext) -> list[str]:
        return [f"src/module_{i:05d}.py" for i in range(items)]

    wf.prompt("review", "REVIEW {item}", fan_out="files", concurrency=16)
    return wf


def spec(cwd: Path) -> RuntimeSpec:
    return RuntimeSpec(connect=lambda: open_simulator_stream(SCRIPT), cwd=cwd)


async def trial(items: int, mode: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wf-journal-") as tmp:
        root = Path(tmp)
        path = root / "run.ckpt" if mode == "checkpoint" else None
        started = time.perf_counter()
        result = await run_workflow(fan_out(items), WorkflowOptions(spec=spec(root), checkpoint=path))
        wall = time.perf_counter() - started
        assert result.ok, result.summary()
        row: dict[str, Any] = {"mode": mode, "items": items, "wall_s": wall}
        if path is None:
            return row
        row["bytes"] = size_of(path)
        with sqlite3.connect(path) as db:
            row["item_json_bytes"] = db.execute("SELECT sum(length(record)) FROM items").fetchone()[0]
            row["output_bytes"] = items * len(REPLY)
        started = time.perf_counter()
        again = await run_workflow(fan_out(items), WorkflowOptions(spec=spec(root), checkpoint=path, resume=True))
        row["resume_s"] = time.perf_counter() - started
        assert again.ok and again.output("review") == result.output("review")
        row["bytes_after_resume"] = size_of(path)
        before, after = compact_checkpoint(path)
        row["compacted_bytes"] = after
        return row


def commit_cost(directory: Path, commits: int = 2000) -> dict[str, float]:
    out = {}
    for sync in ("NORMAL", "FULL"):
        path = directory / f"commit-{sync}.db"
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={sync}")
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
        started = time.perf_counter()
        for k in range(commits):
            with db:
                db.execute("INSERT INTO t VALUES (?, ?)", (k, b"x" * 700))
        out[sync] = (time.perf_counter() - started) / commits * 1e6
        db.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--commit-cost", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    trio.run(trial, 20, "checkpoint")  # warm-up
    for _ in range(args.trials):
        for mode in ("plain", "checkpoint"):
            row = trio.run(trial, args.items, mode)
            rows.append(row)
            print(json.dumps(row), flush=True)
    plain = statistics.median(r["wall_s"] for r in rows if r["mode"] == "plain")
    ckpt = [r for r in rows if r["mode"] == "checkpoint"]
    med = {k: statistics.median(r[k] for r in ckpt) for k in ckpt[0] if k not in ("mode", "items")}
    summary: dict[str, Any] = {
        "machine": machine(), "load": os.getloadavg(), "items": args.items, "trials": args.trials,
        "plain_wall_s": plain, "checkpoint_wall_s": med["wall_s"], "ratio": med["wall_s"] / plain,
        "journal_bytes": med["bytes"], "bytes_per_step": med["bytes"] / args.items,
        "item_json_bytes_per_step": med["item_json_bytes"] / args.items,
        "output_bytes_per_step": len(REPLY), "resume_s": med["resume_s"],
        "bytes_after_resume": med["bytes_after_resume"], "compacted_bytes": med["compacted_bytes"],
    }
    if args.commit_cost:
        with tempfile.TemporaryDirectory(prefix="wf-commit-", dir=Path.cwd()) as tmp:
            summary["commit_us"] = commit_cost(Path(tmp))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

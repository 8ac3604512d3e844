"""``score`` and ``compare`` on large results files, and ``--resume`` of a complete file (issues
25 item 7 and 30 part 2): wall time and peak RSS of each command, run as a user runs it (a fresh
process, ``/usr/bin/time -f "%e %U %M"``), interleaved, ``--runs`` times; medians and every trial.

Writes a dataset of ``--items`` items and two results files of ``--items`` x ``--epochs`` lines,
scored by ``exact``, ``includes``, ``numeric`` and ``f1`` with the values those scorers give the
lines' responses (``exact`` 1 -> 0 on 10 % of the items and 0 -> 1 on 11 %: the issue's b and c;
``f1`` 1 or 2/3), so that ``score`` and ``compare`` see the same kind of values; with
``--continuous``, ``f1`` is a uniform draw instead (over 64 distinct values: the bootstrap draws
10,000 x n indices for it, see docs/evaluation.md), as bench/compare_large.py writes it. Then:

* ``score BASE --dataset DATASET`` with the 4 scorers (RESCORED to a file);
* ``compare BASE CANDIDATE --json`` (the document to /dev/null);
* with ``--resume``, ``batch DATASET --out RESULTS --resume`` over a complete file of the
  dataset's lines (no scorers: nothing runs; the read of the file, the dataset check, the summary).

    python bench/score_compare_large.py --items 100000 --runs 3 --resume
    python bench/score_compare_large.py --items 1000000 --runs 1
    python bench/score_compare_large.py --items 100000 --epochs 10 --runs 1 --only score
    python bench/score_compare_large.py --items 100000 --runs 3 --continuous --baseline-src /tmp/base

``--baseline-src TREE`` also times each command with the ``dsh_orchestra`` package of TREE (for
instance ``git archive fc97e3f dsh_orchestra | tar -x -C /tmp/base``) first on ``PYTHONPATH``,
interleaved with this tree's.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402

SCORERS = ["exact", "includes", "numeric", "f1"]
CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]
TARGET = "42 is the answer"


def write_runs(directory: Path, items: int, epochs: int, continuous: bool, seed: int = 30) -> tuple[Path, Path, Path, Path]:
    """The dataset, the two scored results files and one plain complete results file (for --resume)."""
    rnd = random.Random(seed)
    paths = directory / "ds.jsonl", directory / "base.jsonl", directory / "cand.jsonl", directory / "plain.jsonl"
    with open(paths[0], "wb") as ds, open(paths[1], "wb") as b, open(paths[2], "wb") as c, open(paths[3], "wb") as plain:
        for i in range(items):
            item_id = f"item-{i:07d}"
            ds.write(orjson.dumps({"id": item_id, "prompt": f"q {i}", "target": TARGET}) + b"\n")
            plain.write(orjson.dumps(_line(item_id, i, 1, rnd, True, None)) + b"\n")
            for epoch in range(1, epochs + 1):
                draw = rnd.random()
                pair = (1, 0) if draw < 0.10 else (0, 1) if draw < 0.21 else (1, 1) if draw < 0.6 else (0, 0)
                for handle, exact in ((b, pair[0]), (c, pair[1])):
                    scores = _scores(exact, rnd, continuous)
                    handle.write(orjson.dumps(_line(item_id, i, epoch if epochs > 1 else None, rnd, exact, scores)) + b"\n")
    return paths


def _scores(exact: int, rnd: random.Random, continuous: bool) -> dict[str, dict[str, object]]:
    value = float(exact)
    return {
        "exact": {"value": value, "answer": None, "explanation": None},
        "includes": {"value": value, "answer": None, "explanation": None},
        "numeric": {"value": value, "answer": "42" if exact else None, "explanation": None},
        "f1": {"value": rnd.random() if continuous else (1.0 if exact else 2 / 3), "answer": None, "explanation": None},
    }


def _line(item_id: str, i: int, epoch: int | None, rnd: random.Random, exact: bool | int,
          scores: dict[str, dict[str, object]] | None) -> dict[str, object]:
    response = TARGET if exact else f"maybe {rnd.randint(100, 999)} is the answer"
    line: dict[str, object] = {
        "id": item_id, "status": "ok", "session_id": f"s-{i}", "final_response": response, "finish_reason": "completed",
        "subagents": [], "approvals": [], "questions": [], "attempts": 1, "duration_s": rnd.uniform(0.5, 3.0), "error": None,
        "metadata": {},
    }
    if epoch is not None:
        line["epoch"] = epoch
    if scores is not None:
        line["scores"] = scores
    line["usage"] = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
    return line


def timed(args: list[str], cwd: Path, source: str | None = None) -> tuple[float, float, float, float]:
    """(wall s, user CPU s, system CPU s, peak RSS MiB) of one CLI command in a fresh process
    (with the package of the tree ``source`` when given)."""
    env = None if source is None else {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [source, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", *CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    wall, user, system, rss = done.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user), float(system), float(rss) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=1, help="lines per item in each results file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--continuous", action="store_true", help="f1 values uniform draws (> 64 distinct values)")
    parser.add_argument("--resume", action="store_true", help="also time batch --resume over a complete file")
    parser.add_argument("--only", choices=("score", "compare"), default=None, help="time one command only")
    parser.add_argument("--dir", default=None, help="write the files here (kept) instead of a temporary directory")
    parser.add_argument("--baseline-src", default=None, help="also time each command with the package of this tree")
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="score-compare-large-") as temporary:
        directory = Path(args.dir or temporary)
        directory.mkdir(parents=True, exist_ok=True)
        dataset, base, candidate, plain = write_runs(directory, args.items, args.epochs, args.continuous)
        print(f"{args.items:,} items x {args.epochs} epoch(s): {args.items * args.epochs:,} lines per run "
              f"({base.stat().st_size / 2**20:.0f} MiB), f1 {'continuous' if args.continuous else 'as scored (2 values)'}")
        scored = [part for name in SCORERS for part in ("--score", name)]
        commands = {
            "score": ["score", str(base), "--dataset", str(dataset), *scored, "--out", str(directory / "rescored.jsonl")],
            "compare": ["compare", str(base), str(candidate), "--json"],
        }
        if args.only:
            commands = {args.only: commands[args.only]}
        if args.resume:
            commands["resume"] = ["batch", str(dataset), "--out", str(plain), "--resume", "--no-progress"]
        sources: list[tuple[str, str | None]] = [("", None)]
        if args.baseline_src:
            sources.append((" (baseline)", str(Path(args.baseline_src).resolve())))
        trials: dict[str, list[tuple[float, float, float, float, float]]] = {
            kind + label: [] for kind in commands for label, _ in sources}
        for _ in range(args.runs):
            for kind, command in commands.items():
                for label, source in sources:
                    wall, user, system, rss = timed(command, directory, source)
                    trials[kind + label].append((wall, user, system, rss, os.getloadavg()[0]))
        for kind, values in trials.items():
            walls = [v[0] for v in values]
            print(f"{kind}: median {statistics.median(walls):.2f} s wall, user CPU "
                  f"{statistics.median(v[1] for v in values):.2f} s, system CPU {statistics.median(v[2] for v in values):.2f} s, "
                  f"peak RSS {max(v[3] for v in values):.0f} MiB; trials "
                  + ", ".join(f"{w:.2f} s (load {load:.1f})" for w, _, _, _, load in values))


if __name__ == "__main__":
    main()

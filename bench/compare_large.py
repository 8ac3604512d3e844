"""``compare`` of two large scored runs against ``score`` on one of them (issue 25: two
100,000-item runs with 4 scorers compared in under 30 s, and no slower than ``score``).

Writes a dataset and two results files (``--items`` items; scorers ``exact``, ``includes``,
``numeric`` 0/1 and ``f1`` continuous; on ``exact`` 10 % of the pairs go 1 -> 0 and 11 % go
0 -> 1, the issue's b = 10,000 and c = 11,000 at 100,000 items), then times, each in a fresh
process and as a user runs them (wall clock, interleaved, ``--runs`` times):

* ``compare``: ``dsh-orchestra compare BASE CANDIDATE --json`` (the document to /dev/null);
* ``score``: ``dsh-orchestra score BASE --dataset DATASET`` with the same 4 scorers.

    python bench/compare_large.py --items 100000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402

SCORERS = ["exact", "includes", "numeric", "f1"]
CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]


def write_runs(directory: Path, items: int, seed: int = 25) -> tuple[Path, Path, Path]:
    """The dataset and the two results files."""
    rnd = random.Random(seed)
    dataset, base, candidate = directory / "ds.jsonl", directory / "base.jsonl", directory / "cand.jsonl"
    with open(dataset, "wb") as ds, open(base, "wb") as b, open(candidate, "wb") as c:
        for i in range(items):
            item_id = f"item-{i:06d}"
            ds.write(orjson.dumps({"id": item_id, "prompt": f"q {i}", "target": "42 is the answer"}) + b"\n")
            draw = rnd.random()
            pair = (1.0, 0.0) if draw < 0.10 else (0.0, 1.0) if draw < 0.21 else (1.0, 1.0) if draw < 0.6 else (0.0, 0.0)
            for handle, exact in ((b, pair[0]), (c, pair[1])):
                response = "42 is the answer" if exact else f"maybe {rnd.randint(0, 99)} is the answer"
                scores = {
                    "exact": {"value": exact, "answer": None, "explanation": None},
                    "includes": {"value": exact, "answer": None, "explanation": None},
                    "numeric": {"value": float(rnd.random() < 0.5), "answer": "42", "explanation": None},
                    "f1": {"value": rnd.random(), "answer": None, "explanation": None},
                }
                line = {"id": item_id, "status": "ok", "session_id": f"s-{i}", "final_response": response,
                        "finish_reason": "completed", "subagents": [], "approvals": [], "questions": [], "attempts": 1,
                        "duration_s": rnd.uniform(0.5, 3.0), "error": None, "metadata": {}, "scores": scores,
                        "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}}
                handle.write(orjson.dumps(line) + b"\n")
    return dataset, base, candidate


def timed(args: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([*CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="compare-large-") as temporary:
        directory = Path(temporary)
        dataset, base, candidate = write_runs(directory, args.items)
        scored = ["--score" if i % 2 == 0 else SCORERS[i // 2] for i in range(2 * len(SCORERS))]
        times: dict[str, list[float]] = {"compare": [], "score": []}
        for _ in range(args.runs):
            times["compare"].append(timed(["compare", str(base), str(candidate), "--json"], directory))
            times["score"].append(timed(["score", str(base), "--dataset", str(dataset), *scored,
                                         "--out", str(directory / "rescored.jsonl")], directory))
        for kind, values in times.items():
            print(f"{kind}: median {statistics.median(values):.2f} s; trials {', '.join(f'{v:.2f}' for v in values)}")
        print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

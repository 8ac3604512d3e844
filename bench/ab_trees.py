"""Our client's W1–W4 figures from two source trees, alternated trial by trial in one run.

    python bench/ab_trees.py --base /tmp/transport-base --runs 5 --json /tmp/ab.json

Each round runs every workload of ``run_targets.WORKLOADS`` once per tree (``--client ours``;
``--clients`` for others), the tree order swapped round by round; a trial is the workload's
own script from that tree, run with that tree first on ``PYTHONPATH`` (so it imports that
tree's package, whatever the environment has installed). Figures are medians over the
rounds; the ratio is this tree's median over the base tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from run_targets import WORKLOADS  # noqa: E402


def trial(tree: Path, argv: list[str], client: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, str(tree / "bench" / argv[0]), *argv[1:], "--client", client]
    load = os.getloadavg()[0]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    record.update(load_before=load, load_after=os.getloadavg()[0])
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the other tree (e.g. a worktree of main)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    parser.add_argument("--clients", default="ours")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "this": BENCH_DIR.parent}
    workloads = args.only.split(",")
    clients = args.clients.split(",")
    rows: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for index in range(args.runs):
        order = ["base", "this"] if index % 2 == 0 else ["this", "base"]
        for workload in workloads:
            for client in clients:
                for tree in order:
                    record = trial(trees[tree], WORKLOADS[workload][0], client)
                    rows.setdefault((workload, client, tree), []).append(record)
                    print(f"round {index + 1} {workload} {client} {tree}: load {record['load_before']:.1f}",
                          file=sys.stderr, flush=True)
    summary = []
    for workload in workloads:
        for client in clients:
            for figure, (get, _lower) in WORKLOADS[workload][2].items():
                base = statistics.median(get(r) for r in rows[(workload, client, "base")])
                this = statistics.median(get(r) for r in rows[(workload, client, "this")])
                spread = {tree: sorted(round(get(r), 3) for r in rows[(workload, client, tree)]) for tree in trees}
                summary.append({"workload": workload, "client": client, "figure": figure, "base": base,
                                "this": this, "ratio": this / base if base else float("nan"), "trials": spread})
                print(f"{workload:11} {client:6} {figure:28} base {base:12.3f}  this {this:12.3f}  "
                      f"ratio {this / base if base else float('nan'):.3f}   {spread}")
    if args.json is not None:
        args.json.write_text(json.dumps({"summary": summary, "trials": {"/".join(k): v for k, v in rows.items()}},
                                        indent=1))


if __name__ == "__main__":
    main()

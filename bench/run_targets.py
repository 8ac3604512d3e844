"""Issue 18's client targets side by side in one run: W1 rate and latency, W2, W3, W4.

    python bench/run_targets.py --runs 5 --json bench/out/targets.json
    python bench/run_targets.py --runs 5 --placement pinned --only W1-rate,W1-latency,W2

Every trial is a fresh process (the workload scripts below, one JSON line each) that starts
its own peer and reaps it. Within each of the ``--runs`` rounds every workload runs each of
its clients once, in an order rotated round by round, so a drift of the shared machine does
not favour one client. Figures are medians over the rounds; ratios are taken between those
medians (the same rounds). ``pinned`` runs each trial under ``taskset -c 0``: the client and
its peer (which inherits the affinity) on one CPU, alike for every client. The 1-minute load
average is read before and after every trial and reported.

Workloads (scripts): W1-rate and W1-latency (``w1_stream.py``, through ``session.events()``),
W2 (``w2_roundtrip.py``), W3 (``w3_sessions.py``), W4 (``runtime_real.py`` with 20 concurrent
sessions: the real runtime with the scripted model; ratios for both its CPU figures, and the
floor clients ``trio-min`` and ``thread-min`` beside ours).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent

Getter = Callable[[dict[str, Any]], float]

# workload -> (script and fixed arguments, clients, {figure: (getter, lower is better)})
WORKLOADS: dict[str, tuple[list[str], tuple[str, ...], dict[str, tuple[Getter, bool]]]] = {
    "W1-rate": (["w1_stream.py", "--mode", "rate", "--count", "100000"],
                ("bare", "trio-bare", "trio-api", "official", "ours"),
                {"events/s": (lambda r: r["rate"], False), "CPU µs/event": (lambda r: r["cpu_us_per_event"], True)}),
    "W1-latency": (["w1_stream.py", "--mode", "latency", "--count", "2000", "--interval-us", "1000"],
                   ("bare", "trio-bare", "trio-reader", "trio-api", "official", "ours"),
                   {"p50 µs": (lambda r: r["p50_us"], True), "p90 µs": (lambda r: r["p90_us"], True)}),
    "W2": (["w2_roundtrip.py", "--count", "10000"],
           ("bare", "trio-bare", "trio-reader", "official", "ours"),
           {"p50 µs": (lambda r: r["p50_us"], True), "p99 µs": (lambda r: r["p99_us"], True)}),
    "W3": (["w3_sessions.py", "--sessions", "200", "--events", "50"],
           ("minimal-drop", "minimal", "official", "ours"),
           {"peak RSS growth KiB": (lambda r: r["rss_growth_kib"], True), "wall s": (lambda r: r["wall_s"], True),
            "CPU s": (lambda r: r["cpu_s"], True)}),
    "W4": (["runtime_real.py", "--sessions", "20", "--turns", "20"],
           ("trio-min", "thread-min", "raw", "official", "ours"),
           {"concurrent CPU ms/prompt": (lambda r: r["conc_cpu_ms_per_turn"], True),
            "sequential CPU ms/prompt": (lambda r: r["seq_cpu_ms_per_turn"], True),
            "concurrent prompts/s": (lambda r: r["conc_prompts_per_s"], False),
            "concurrent switches/prompt": (lambda r: r["conc_switches_per_turn"], True),
            "sequential switches/prompt": (lambda r: r["seq_switches_per_turn"], True)}),
}
BASELINES = {"W1-rate": "bare", "W1-latency": "official", "W2": "official", "W3": "minimal", "W4": "official"}
RATIOS = {"W4": ("concurrent CPU ms/prompt", "sequential CPU ms/prompt")}
"""The figures whose ratio to the baseline gets a column (default: the first figure)."""


def trial(argv: list[str], client: str, pinned: bool) -> dict[str, Any]:
    command = [sys.executable, str(BENCH_DIR / argv[0]), *argv[1:], "--client", client]
    if pinned:
        command = ["taskset", "-c", "0", *command]
    load = os.getloadavg()[0]
    done = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    record.update(client=client, load_before=load, load_after=os.getloadavg()[0])
    return record


def run(runs: int, workloads: list[str], pinned: bool) -> dict[str, Any]:
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {w: {} for w in workloads}
    for index in range(runs):
        for workload in workloads:
            argv, clients, _ = WORKLOADS[workload]
            order = clients[index % len(clients):] + clients[: index % len(clients)]
            for client in order:
                record = trial(argv, client, pinned)
                rows[workload].setdefault(client, []).append(record)
                print(f"round {index + 1}/{runs} {workload} {client}: load {record['load_before']:.2f}", file=sys.stderr)
    return rows


def report(rows: dict[str, dict[str, list[dict[str, Any]]]], pinned: bool) -> str:
    lines: list[str] = []
    for workload, by_client in rows.items():
        _, clients, figures = WORKLOADS[workload]
        base = BASELINES[workload]
        ratios = RATIOS.get(workload, (next(iter(figures)),))
        loads = [r[key] for records in by_client.values() for r in records for key in ("load_before", "load_after")]
        lines += [f"**{workload}** ({'pinned' if pinned else 'free'}; {len(next(iter(by_client.values())))} rounds; "
                  f"load {min(loads):.2f}–{max(loads):.2f})", "",
                  "| client | " + " | ".join(f"{name} (median, range)" for name in figures)
                  + "".join(f" | {name} vs {base}" for name in ratios) + " |",
                  "|---|" + "---:|" * (len(figures) + len(ratios))]
        medians = {c: {n: statistics.median(get(r) for r in by_client[c]) for n, (get, _) in figures.items()}
                   for c in clients if c in by_client}
        for client in clients:
            if client not in by_client:
                continue
            cells = []
            for name, (get, _) in figures.items():
                values = sorted(get(r) for r in by_client[client])
                cells.append(f"{medians[client][name]:,.2f} ({values[0]:,.2f}–{values[-1]:,.2f})")
            for name in ratios:
                ratio = medians[client][name] / medians[base][name] if base in medians else float("nan")
                cells.append(f"{ratio:.2f}x")
            lines.append(f"| {client} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--placement", choices=("free", "pinned"), default="free")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    parser.add_argument("--json", type=Path, help="also write every trial's figures here")
    args = parser.parse_args()
    workloads = [w for w in args.only.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    pinned = args.placement == "pinned"
    if pinned and shutil.which("taskset") is None:
        parser.error("taskset not found: cannot pin")
    started = time.strftime("%H:%M:%S", time.gmtime())
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rows = run(args.runs, workloads, pinned)
    after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"placement": args.placement, "started_utc": started, "uptime_before": uptime,
                                         "uptime_after": after, "rows": rows}, indent=1))
    print(f"started {started} UTC; uptime before: {uptime}; after: {after}\n")
    print(report(rows, pinned))


if __name__ == "__main__":
    main()

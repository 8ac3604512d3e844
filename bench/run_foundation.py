"""Run the foundation benchmarks (W1, W2) side by side and print a markdown report.

    python bench/run_foundation.py                 # 5 trials, both placements
    python bench/run_foundation.py --trials 3 --placement free --json bench/out/foundation.json

Every trial is a fresh client process (``bench/w1_notifications.py`` or
``bench/w2_roundtrip.py``) that spawns its own fake runtime process (``bench/fake_runtime.py``)
and reaps it. Within a trial the clients run in a rotated order, so slow drifts of the machine
do not favour one of them. Figures are medians over the trials.

Placements: ``free`` lets the OS put the client and the fake runtime on any core; ``pinned``
runs both on CPU 0 (``taskset -c 0``), which removes cross-core wake-ups. On a small VM the two
give very different round-trip figures, so both are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BENCH_DIR, REPO_DIR, machine, median  # noqa: E402

W1_CLIENTS = ("bare", "bare-orjson", "official", "ours", "ours-batch", "ours-typed")
W2_CLIENTS = ("bare", "trio-bare", "trio-reader", "official", "ours")


def command(script: str, client: str, count: int, placement: str) -> list[str]:
    argv = [sys.executable, str(BENCH_DIR / script), "--client", client, "--count", str(count)]
    return (["taskset", "-c", "0"] + argv) if placement == "pinned" else argv


def trial(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(argv, cwd=REPO_DIR, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed with status {done.returncode}:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(trials: int, placements: list[str], w1_count: int, w2_count: int) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "trials": trials, "w1_count": w1_count, "w2_count": w2_count,
                               "runs": [], "load": []}
    for placement in placements:
        results["load"].append((placement, "before", os.getloadavg()))
        for index in range(trials):
            for clients, script, count in ((W1_CLIENTS, "w1_notifications.py", w1_count),
                                           (W2_CLIENTS, "w2_roundtrip.py", w2_count)):
                rotated = clients[index % len(clients):] + clients[: index % len(clients)]
                for client in rotated:
                    record = trial(command(script, client, count, placement))
                    record["placement"] = placement
                    record["trial"] = index
                    results["runs"].append(record)
                    print(f"  {placement} trial {index + 1}/{trials} {record['workload']} {client}: "
                          + (f"{record['rate']:,.0f}/s" if record["workload"] == "W1" else f"p50 {record['p50_us']:.1f} us"),
                          file=sys.stderr)
        results["load"].append((placement, "after", os.getloadavg()))
    return results


def medians(results: dict[str, Any], workload: str, placement: str, key: str) -> dict[str, float]:
    out: dict[str, list[float]] = {}
    for record in results["runs"]:
        if record["workload"] == workload and record["placement"] == placement:
            out.setdefault(record["client"], []).append(record[key])
    return {client: median(values) for client, values in out.items()}


def spread(results: dict[str, Any], workload: str, placement: str, client: str, key: str) -> str:
    values = sorted(r[key] for r in results["runs"]
                    if r["workload"] == workload and r["placement"] == placement and r["client"] == client)
    return f"{values[0]:,.0f}–{values[-1]:,.0f}" if workload == "W1" else f"{values[0]:.1f}–{values[-1]:.1f}"


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, {m['os']}; "
        f"{results['trials']} trials per figure, medians shown (range in brackets).",
        "",
    ]
    placements = sorted({r["placement"] for r in results["runs"]}, key=["free", "pinned"].index)
    for placement in placements:
        rate = medians(results, "W1", placement, "rate")
        cpu = medians(results, "W1", placement, "cpu_per_100k")
        lines += [
            f"**W1, {results['w1_count']:,} session.event notifications to one subscriber ({placement})**",
            "",
            "| client | notifications/s | vs official | vs bare loop | client CPU s per 100k |",
            "|---|---:|---:|---:|---:|",
        ]
        for client in W1_CLIENTS:
            if client in rate:
                lines.append(
                    f"| {client} | {rate[client]:,.0f} ({spread(results, 'W1', placement, client, 'rate')}) "
                    f"| {rate[client] / rate['official']:.2f}x | {rate[client] / rate['bare']:.2f}x "
                    f"| {cpu[client]:.2f} |"
                )
        p50 = medians(results, "W2", placement, "p50_us")
        p99 = medians(results, "W2", placement, "p99_us")
        lines += [
            "",
            f"**W2, {results['w2_count']:,} sequential round trips ({placement})**",
            "",
            "| client | p50 µs | p99 µs | p50 vs official | p50 above bare floor |",
            "|---|---:|---:|---:|---:|",
        ]
        for client in W2_CLIENTS:
            if client in p50:
                lines.append(
                    f"| {client} | {p50[client]:.1f} ({spread(results, 'W2', placement, client, 'p50_us')}) "
                    f"| {p99[client]:.1f} | {p50[client] / p50['official']:.2f}x "
                    f"| {p50[client] - p50['bare']:+.1f} µs |"
                )
        lines.append("")
    loads = ", ".join(f"{p} {when}: {' '.join(f'{v:.2f}' for v in load)}" for p, when, load in results["load"])
    lines.append(f"Load average (1/5/15 min): {loads}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--placement", choices=("both", "free", "pinned"), default="both")
    parser.add_argument("--w1-count", type=int, default=100_000)
    parser.add_argument("--w2-count", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="also write every trial's raw figures here")
    args = parser.parse_args()
    placements = ["free", "pinned"] if args.placement == "both" else [args.placement]
    if "pinned" in placements and shutil.which("taskset") is None:
        print("taskset not found: skipping the pinned placement", file=sys.stderr)
        placements.remove("pinned")
    started = time.monotonic()
    results = run(args.trials, placements, args.w1_count, args.w2_count)
    results["seconds"] = time.monotonic() - started
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    print(report(results))


if __name__ == "__main__":
    main()

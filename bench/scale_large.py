"""Large runs on one machine (issue 30): 100,000 items on the simulator, RSS over the run, resume.

One process runs ``run_batch`` over a generated dataset of ``--items`` items on ``--runtimes``
simulator processes (no model delay: the orchestrator is the bottleneck). A thread samples
this process's RSS (``/proc/self/statm``, resident pages) each time the results file passes
another ``--every`` lines, so the figures say how the orchestrator's memory grows with the
items done (target: under 20 MiB from 10k to 100k items). Then:

* ``--resume`` on the complete file: ``run_batch(..., resume=True)`` over the same dataset and
  results, which skips every id (target: under 2 s), timed around the whole call;
* ``--resume`` on the file less its last ``--tail`` lines (those run again), the part of that
  call before the first new line is written reported as the skip cost.

Every run checks its results: one line per id, all ``ok``.

    python bench/scale_large.py [--items 100000] [--runtimes 2] [--every 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    with open("/proc/self/statm", "rb") as handle:
        return int(handle.read().split()[1]) * PAGE / 2**20


class Sampler(threading.Thread):
    """RSS each time the results file passes another ``every`` lines; the first line's time."""

    def __init__(self, path: Path, every: int) -> None:
        super().__init__(daemon=True)
        self.path, self.every = path, every
        self.samples: list[tuple[int, float]] = []
        self.first_line_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        offset, lines, mark = 0, 0, self.every
        while not self.stop.wait(0.02):
            try:
                with open(self.path, "rb") as handle:
                    handle.seek(offset)
                    data = handle.read()
            except FileNotFoundError:
                continue
            offset += len(data)
            lines += data.count(b"\n")
            if lines and self.first_line_at is None:
                self.first_line_at = time.perf_counter()
            while lines >= mark:
                self.samples.append((mark, round(rss_mib(), 1)))
                mark += self.every


def check(path: Path, items: int) -> None:
    import orjson

    ids = set()
    with open(path, "rb") as handle:
        for line in handle:
            result = orjson.loads(line)
            assert result["status"] == "ok", result
            ids.add(result["id"])
    assert len(ids) == items, f"{len(ids)} ids for {items} items"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--runtimes", type=int, default=2)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--tail", type=int, default=1_000, help="lines cut for the second resume")
    args = parser.parse_args()

    import orjson
    import trio

    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    out: dict[str, Any] = {"items": args.items, "runtimes": args.runtimes, "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="bench-scale-large-") as tmp:
        root = Path(tmp)
        dataset = root / "ds.jsonl"
        with open(dataset, "wb") as handle:
            for i in range(args.items):
                handle.write(orjson.dumps({"id": f"item-{i:06d}", "prompt": f"question {i}", "metadata": {"i": i}}) + b"\n")
        (root / "script.toml").write_text('default_reply = "answer"\n')
        (root / "home").mkdir()
        spec = RuntimeSpec.simulator(script=root / "script.toml", dsh_home=root / "home", cwd=root,
                                     env={"DSH_TELEMETRY_MODE": "DISABLED"})
        results = root / "results.jsonl"
        options = BatchOptions(runtimes=args.runtimes, progress="none", retries=0)

        out["rss_before_mib"] = round(rss_mib(), 1)
        sampler = Sampler(results, args.every)
        sampler.start()
        start = time.perf_counter()
        trio.run(run_batch, dataset, results, spec, options)
        wall = time.perf_counter() - start
        sampler.stop.set()
        sampler.join()
        check(results, args.items)
        out["wall_s"] = round(wall, 1)
        out["items_per_s"] = round(args.items / wall, 1)
        out["rss_by_lines_mib"] = sampler.samples
        by = dict(sampler.samples)
        if args.every in by and args.items in by:
            out["rss_growth_first_to_last_mib"] = round(by[args.items] - by[args.every], 1)

        resume = BatchOptions(runtimes=args.runtimes, progress="none", retries=0, resume=True)
        start = time.perf_counter()
        summary = trio.run(run_batch, dataset, results, spec, resume)
        out["resume_complete_s"] = round(time.perf_counter() - start, 3)
        assert summary.processed == 0 and summary.resumed == args.items, summary

        data = results.read_bytes().splitlines(keepends=True)
        half = args.items - args.tail
        results.write_bytes(b"".join(data[:half]))
        sampler = Sampler(results, 10**9)
        with open(results, "rb") as handle:  # start after the kept half
            sampler_offset = len(handle.read())
        sampler.first_line_at = None
        start = time.perf_counter()

        def watch() -> None:
            while not sampler.stop.wait(0.005):
                if results.stat().st_size > sampler_offset:
                    sampler.first_line_at = time.perf_counter()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        summary = trio.run(run_batch, dataset, results, spec, resume)
        total = time.perf_counter() - start
        sampler.stop.set()
        watcher.join()
        check(results, args.items)
        assert summary.resumed == half and summary.processed == args.items - half, summary
        out["resume_tail_until_first_new_line_s"] = round((sampler.first_line_at or start) - start, 3)
        out["resume_tail_total_s"] = round(total, 1)
        out["rss_end_mib"] = round(rss_mib(), 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

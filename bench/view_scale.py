"""The viewer on a 1,000,000-line results file: index build rate, first page, server RSS.

    python bench/view_scale.py [--lines 1000000] [--keep DIR] [--browser]

Writes a synthetic results file (1 in 37 items in error, one scorer, usage, ~500 bytes a line),
then measures:

* index build: ``ResultsIndex.refresh`` over the whole file (byte offsets of every line), in
  lines per second; the column parse (``parse``) separately;
* the server (``dsh-orchestra view FILE --port 0`` as a subprocess): the first page of items
  (``/api/run/0/items?limit=50``) right after the server is up (its index built, the columns
  still being read), and again once every line's columns are read; with ``--browser`` the run
  page in the system Chromium until its first 50 rows are shown;
* the server's peak resident memory (psutil, sampled every 0.1 s) until the columns are read.

Targets (docs/benchmarks.md): index build >= 100k lines/s, first page < 1 s, RSS < 200 MiB.

    python bench/view_scale.py --keep DIR --rounds 3 --baseline-src OLD_TREE

measures only the start (server up, the first page over HTTP and in Chromium right after start,
while the index is built) ``--rounds`` times, alternating this code and the ``dsh_orchestra``
package under OLD_TREE (``git archive REV dsh_orchestra | tar -x -C OLD_TREE``; put first on
the server's PYTHONPATH), and prints each figure's runs, medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import psutil

from dsh_orchestra.view import ResultsIndex

BENCH_DIR = Path(__file__).resolve().parent


def write_results(path: Path, count: int) -> None:
    rng = random.Random(1)
    with open(path, "wb") as handle:
        for i in range(count):
            failed = i % 37 == 0
            line = {
                "id": f"item-{i:07d}", "status": "error" if failed else "ok", "session_id": f"item-{i:024x}",
                "final_response": "" if failed else f"answer {i}: " + "lorem ipsum dolor sit amet " * rng.randint(2, 8),
                "finish_reason": "error" if failed else "completed", "subagents": [], "approvals": [], "attempts": 1,
                "duration_s": round(rng.lognormvariate(0, 0.6), 6),
                "error": {"type": "TurnFailed", "message": "INVALID_REQUEST: scripted"} if failed else None,
                "metadata": {"topic": "abc"[i % 3]},
                "scores": {"exact": {"value": None if failed else int(rng.random() < 0.6), "answer": None, "explanation": None}},
                "usage": {"input_tokens": 40, "output_tokens": 20, "total_tokens": 60},
            }
            handle.write(orjson.dumps(line) + b"\n")


def get(url: str) -> tuple[float, Any]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as answer:  # noqa: S310 - loopback
        body = json.loads(answer.read())
    return time.perf_counter() - started, body


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) the results file in this directory")
    parser.add_argument("--browser", action="store_true", help="also time the run page in the system Chromium")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--rounds", type=int, default=0, help="only the start, this many times per code (see above)")
    parser.add_argument("--baseline-src", type=Path, default=None, help="a tree holding the baseline's dsh_orchestra package")
    args = parser.parse_args()
    directory = args.keep or Path(tempfile.mkdtemp(prefix="view-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / f"results-{args.lines}.jsonl"
    if not results.exists():
        started = time.perf_counter()
        write_results(results, args.lines)
        print(f"wrote {results} ({results.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    figures: dict[str, Any] = {"lines": args.lines, "file_mib": round(results.stat().st_size / 2**20, 1), "cpus": os.cpu_count(),
                               "load_average": os.getloadavg()}
    if args.rounds:
        figures.update(start_rounds(results, args.rounds, args.baseline_src))
        text = json.dumps(figures, indent=2)
        print(text)
        if args.out is not None:
            args.out.write_text(text + "\n", encoding="utf-8")
        return

    index = ResultsIndex(results)
    started = time.perf_counter()
    index.refresh()
    took = time.perf_counter() - started
    figures["index_build_s"] = round(took, 3)
    figures["index_lines_per_s"] = round(len(index) / took)
    started = time.perf_counter()
    while index.parse(20_000):
        pass
    took = time.perf_counter() - started
    figures["columns_parse_s"] = round(took, 2)
    figures["columns_lines_per_s"] = round(index.parsed / took)
    del index

    script = Path(sys.executable).with_name("dsh-orchestra")
    process = subprocess.Popen([str(script), "view", str(results), "--port", "0"], stdout=subprocess.PIPE, text=True)
    sampler = Sampler(process.pid)
    sampler.start()
    try:
        assert process.stdout is not None
        started = time.perf_counter()
        url = process.stdout.readline().split(": ", 1)[1].strip()
        figures["server_up_s"] = round(time.perf_counter() - started, 2)
        base, _, token = url.partition("/?token=")
        first, page = get(f"{base}/api/run/0/items?token={token}&limit=50")
        figures["first_page_while_reading_s"] = round(first, 3)
        figures["first_page_items"] = len(page["items"])
        if args.browser:
            figures["browser_first_rows_s"] = browser_first_rows(f"{base}/run/0?token={token}")
        while True:
            _, run = get(f"{base}/api/run/0?token={token}")
            if run["parsed"] == run["lines"] == args.lines:
                break
            time.sleep(0.5)
        figures["columns_read_by_server_s"] = round(time.perf_counter() - started, 1)
        first, page = get(f"{base}/api/run/0/items?token={token}&limit=50")
        figures["first_page_s"] = round(first, 3)
        took, _ = get(f"{base}/api/run/0?token={token}")
        figures["run_summary_s"] = round(took, 3)
        took, page = get(f"{base}/api/run/0/items?token={token}&limit=50&status=error&sort=duration_s&order=desc")
        figures["filtered_sorted_page_s"] = round(took, 3)
        figures["filtered_total"] = page["total"]
        took, page = get(f"{base}/api/run/0/items?token={token}&limit=50&offset=999950")
        figures["last_page_s"] = round(took, 3)
        if args.browser:
            figures["browser_first_rows_after_columns_s"] = browser_first_rows(f"{base}/run/0?token={token}")
        figures["server_rss_peak_mib"] = round(sampler.peak / 2**20, 1)
        figures["server_rss_now_mib"] = round(psutil.Process(process.pid).memory_info().rss / 2**20, 1)
    finally:
        sampler.running = False
        process.terminate()
        process.wait(timeout=30)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


def start_once(results: Path, source: Path | None) -> dict[str, Any]:
    """Start a server (this code, or the package under ``source``), time the first page right
    after start over HTTP and in Chromium, stop it."""
    script = Path(sys.executable).with_name("dsh-orchestra")
    env = {**os.environ, "PYTHONPATH": str(source)} if source is not None else dict(os.environ)
    process = subprocess.Popen([str(script), "view", str(results), "--port", "0"], stdout=subprocess.PIPE, text=True,
                               env=env, cwd=tempfile.gettempdir())
    out: dict[str, Any] = {"load": round(os.getloadavg()[0], 1)}
    try:
        assert process.stdout is not None
        started = time.perf_counter()
        url = process.stdout.readline().split(": ", 1)[1].strip()
        out["server_up_s"] = round(time.perf_counter() - started, 2)
        base, _, token = url.partition("/?token=")
        took, page = get(f"{base}/api/run/0/items?token={token}&limit=50")
        out["first_page_s"] = round(took, 3)
        out["lines_then"] = page["lines"]
        out["browser_first_rows_s"] = browser_first_rows(f"{base}/run/0?token={token}")
        _, run = get(f"{base}/api/run/0?token={token}")
        out["lines_after"], out["parsed_after"] = run["lines"], run["parsed"]
    finally:
        process.terminate()
        process.wait(timeout=60)
    return out


def start_rounds(results: Path, rounds: int, baseline: Path | None) -> dict[str, Any]:
    """``rounds`` starts of each code, alternating; the figures, their medians and ratios."""
    import statistics

    codes = {"new": None, **({"baseline": baseline} if baseline is not None else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
    for _ in range(rounds):
        for name, source in codes.items():
            runs[name].append(start_once(results, source))
            print(name, runs[name][-1], file=sys.stderr)
    out: dict[str, Any] = {"runs": runs, "medians": {}}
    for name in codes:
        out["medians"][name] = {key: statistics.median(r[key] for r in runs[name])
                                for key in ("server_up_s", "first_page_s", "browser_first_rows_s", "load")}
    if baseline is not None:
        out["ratio_baseline_over_new"] = {key: round(out["medians"]["baseline"][key] / out["medians"]["new"][key], 2)
                                          for key in ("first_page_s", "browser_first_rows_s") if out["medians"]["new"][key]}
    return out


def browser_first_rows(url: str) -> float:
    sys.path.insert(0, str(BENCH_DIR.parent / "tests"))
    from playwright_browser import open_browser

    with open_browser() as browser:
        page = browser.new_page(1280, 1000)
        started = time.perf_counter()
        page.goto(url)
        page.wait_for("document.querySelectorAll('#items-body tr.item-row').length === 50", timeout=120)
        return round(time.perf_counter() - started, 3)


if __name__ == "__main__":
    main()

"""``report`` on a large run: file size, time to build, time to the first render in Chromium.

    python bench/report_large.py [--items 100000] [--keep DIR] [--out FIGURES.json]

Writes synthetic result lines (``view_scale.write_results``: one scorer, usage, 1 in 37 in
error, responses of 60-230 characters), builds the report with ``write_report`` (wall clock,
in-process), then opens it in the system Chromium (Playwright, tests/playwright_browser.py)
and times navigation until the page says it is ready and its first page of rows is shown,
then a search over every item.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from view_scale import write_results

from dsh_orchestra.report import write_report

BENCH_DIR = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) the results file in this directory")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    directory = args.keep or Path(tempfile.mkdtemp(prefix="report-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / f"results-{args.items}.jsonl"
    if not results.exists():
        write_results(results, args.items)
    figures: dict[str, Any] = {"items": args.items, "results_mib": round(results.stat().st_size / 2**20, 1),
                               "load_average_before": [round(x, 1) for x in os.getloadavg()]}
    started = time.perf_counter()
    out = write_report(directory / "report.html", results=results)
    figures["build_s"] = round(time.perf_counter() - started, 2)
    figures["report_mib"] = round(out.stat().st_size / 2**20, 1)

    sys.path.insert(0, str(BENCH_DIR.parent / "tests"))
    from playwright_browser import open_browser

    with open_browser() as browser:
        page = browser.new_page(1280, 1000)
        started = time.perf_counter()
        page.goto(out.as_uri(), timeout=300)
        page.wait_for("document.body.dataset.ready === '1' && document.querySelectorAll('#items-table tbody tr').length > 0", timeout=300)
        figures["first_render_s"] = round(time.perf_counter() - started, 2)
        figures["rows_shown"] = page.evaluate("document.querySelectorAll('#items-table tbody tr').length")
        figures["js_heap_mib"] = round(page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0") / 2**20, 1)
    figures["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

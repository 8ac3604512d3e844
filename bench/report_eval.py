"""Report responsiveness with 10,000 scored items, in headless Chromium, next to the baseline.

Three pages of the same 10,000 synthetic items (responses of 50-300 characters):

* ``baseline``: the result lines as a batch wrote them before evaluations (no scores, no
  usage, no prompts, no transcripts): the report as it was;
* ``evaluation``: the same lines with three scores (0/1, 0/1, continuous), usage, prompts from
  the dataset and a transcript per item (user prompt, reasoning, a tool call with its result,
  the answer), so every row has score columns, previews and an embedded conversation;
* ``compare``: ``compare --out`` of the evaluation run against a second one (scores moved for
  a third of the items).

Per trial (a fresh Chromium each): the time to build the file, its size, navigation until the
page says it is ready, and in-page actions timed with ``performance.now()`` until two animation
frames later (layout and paint included): filter "failed a scorer", sort by a score column,
open an item's drawer, next page; on the comparison page, "only different" and opening a pair.
Medians over the trials.

    python bench/report_eval.py [--items 10000] [--trials 3] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from playwright_browser import find_chromium, open_browser  # noqa: E402

from dsh_orchestra.batch._transcripts import transcript_name  # noqa: E402
from dsh_orchestra.report import write_compare, write_report  # noqa: E402

ACTION = """(async () => {{
  const t0 = performance.now();
  {action};
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}})()"""

REPORT_ACTIONS = {
    "filter failed": "const s = document.getElementById('filter-scored'); s.value = '*'; s.dispatchEvent(new Event('change'))",
    "sort by score": "document.querySelector('th[data-col=\"score:f1\"]').click()",
    "open drawer": "document.querySelector('#items-body tr td.c-id').click()",
    "next page": "document.getElementById('detail-close').click(); document.getElementById('page-next').click()",
}
BASELINE_ACTIONS = {
    "filter status": "const s = document.getElementById('filter-status'); s.value = 'error'; s.dispatchEvent(new Event('change'))",
    "sort by duration": "document.querySelector('th[data-col=\"duration_s\"]').click()",
    "open drawer": "document.querySelector('#items-body tr td.c-id').click()",
    "next page": "document.getElementById('detail-close').click(); document.getElementById('page-next').click()",
}
COMPARE_ACTIONS = {
    "only different": "document.getElementById('only-different').click()",
    "open pair": "document.querySelector('#pairs-body tr').click()",
    "next page": "document.getElementById('pair-close').click(); document.getElementById('pairs-next').click()",
}


def result_line(index: int, rng: random.Random, *, scored: bool, shift: float = 0.0) -> dict[str, Any]:
    failed = index % 37 == 0
    line: dict[str, Any] = {
        "id": f"item-{index:05d}",
        "status": "error" if failed else "ok",
        "session_id": f"item-{index:016x}",
        "final_response": "" if failed else f"answer {index}: " + "lorem ipsum dolor sit amet " * rng.randint(2, 12),
        "finish_reason": "error" if failed else "completed",
        "subagents": [], "approvals": [], "attempts": 1,
        "duration_s": round(rng.lognormvariate(0.0, 0.6), 6),
        "error": {"type": "TurnFailed", "message": "INVALID_REQUEST: scripted HTTP 400"} if failed else None,
        "metadata": {"topic": "abc"[index % 3]},
    }
    if scored:
        f1 = None if failed else min(1.0, max(0.0, rng.random() + shift))
        exact = None if failed else int(f1 is not None and f1 > 0.5)
        line["scores"] = {
            "exact": {"value": exact, "answer": None, "explanation": None},
            "includes": {"value": None if failed else int(rng.random() < 0.8 + shift), "answer": None, "explanation": None},
            "f1": {"value": f1, "answer": None, "explanation": "token F1"},
        }
        line["usage"] = {"input_tokens": 40 + index % 50, "output_tokens": 20 + index % 30, "total_tokens": 60 + index % 80}
    return line


def transcript(item_id: str, prompt: str, response: str) -> bytes:
    session = f"s-{item_id}"

    def event(kind: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"method": "session.event", "params": {"sessionId": session, "event": {"type": kind, "data": data}}}

    records = [
        {"transcript": {"item": item_id, "session_id": session, "message_id": "m", "version": 1}},
        event("user/message", {"content": [{"type": "text", "text": prompt}], "source": {"kind": "user"}}),
        event("assistant/message", {"message": {"content": [
            {"type": "reasoning", "text": "Let me look at the notes first. " * 4},
            {"type": "tool-call", "id": "c1", "name": "read", "arguments": json.dumps({"file_path": "notes.txt"})}]}}),
        event("tool/call", {"callId": "c1", "name": "read", "arguments": json.dumps({"file_path": "notes.txt"})}),
        event("tool/result", {"message": {"toolCallId": "c1", "content": [{"type": "text", "text": "notes: " + "x" * 200}]}}),
        event("assistant/message", {"message": {"content": [{"type": "text", "text": response}]}}),
    ]
    return gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in records), mtime=0)


def make_files(directory: Path, count: int) -> dict[str, Path]:
    rng = random.Random(7)
    baseline = [result_line(i, rng, scored=False) for i in range(count)]
    rng = random.Random(7)
    scored = [result_line(i, rng, scored=True) for i in range(count)]
    rng = random.Random(8)
    candidate = [result_line(i, rng, scored=True, shift=0.1 if i % 3 == 0 else 0.0) for i in range(count)]
    transcripts = directory / "transcripts"
    transcripts.mkdir()
    dataset = []
    for line in scored:
        prompt = f"question {line['id']}: " + "what is the answer to this " * 3
        dataset.append({"id": line["id"], "prompt": prompt})
        (transcripts / transcript_name(line["id"])).write_bytes(transcript(line["id"], prompt, line["final_response"] or ""))
    files = {"baseline": directory / "baseline.jsonl", "scored": directory / "scored.jsonl",
             "candidate": directory / "candidate.jsonl", "dataset": directory / "dataset.jsonl", "transcripts": transcripts}
    for name, lines in (("baseline", baseline), ("scored", scored), ("candidate", candidate), ("dataset", dataset)):
        files[name].write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in lines))
    return files


def measure_page(url: str, actions: dict[str, str], ready: str, profile: Path) -> dict[str, float]:
    if find_chromium() is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    with open_browser() as browser:
        page = browser.new_page(1280, 1000)
        started = time.perf_counter()
        page.goto(url, timeout=120)
        page.wait_for(ready, timeout=120)
        out = {"ready_s": time.perf_counter() - started}
        for name, action in actions.items():
            out[name] = float(page.evaluate(ACTION.format(action=action))) / 1000
        problems = page.problems()
        if problems:
            raise SystemExit(f"the page reported problems: {problems}")
        return out


def trial(files: dict[str, Path], directory: Path, index: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    pages = {
        "baseline": (lambda path: write_report(path, results=files["baseline"]), BASELINE_ACTIONS, "document.body.dataset.ready === '1'"),
        "evaluation": (lambda path: write_report(path, results=files["scored"], dataset=files["dataset"], transcripts=files["transcripts"]),
                       REPORT_ACTIONS, "document.body.dataset.ready === '1'"),
        "compare": (lambda path: write_compare(path, base=files["scored"], candidate=files["candidate"], dataset=files["dataset"]),
                    COMPARE_ACTIONS, "document.body.dataset.compareReady === '1'"),
    }
    for name, (build, actions, ready) in pages.items():
        path = directory / f"{name}-{index}.html"
        started = time.perf_counter()
        build(path)
        figures = {"build_s": time.perf_counter() - started, "size_mib": path.stat().st_size / 2**20}
        profile = directory / f"profile-{name}-{index}"
        profile.mkdir()
        figures.update(measure_page(path.as_uri(), actions, ready, profile))
        out[name] = figures
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        files = make_files(directory, args.items)
        trials = [trial(files, directory, i) for i in range(args.trials)]
    medians = {page: {key: statistics.median(t[page][key] for t in trials) for key in trials[0][page]} for page in trials[0]}
    result = {"items": args.items, "trials": args.trials, "load": os.getloadavg(), "cpus": os.cpu_count(), "medians": medians}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.items:,} items, {args.trials} trials, {os.cpu_count()} CPUs, load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for page, figures in medians.items():
        print(f"\n{page}")
        for key, value in figures.items():
            unit = " MiB" if key == "size_mib" else " ms"
            shown = value if key == "size_mib" else value * 1000
            print(f"  {key:>18}: {shown:10.1f}{unit}")


if __name__ == "__main__":
    main()

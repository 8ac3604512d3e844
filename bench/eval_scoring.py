"""Scoring cost next to the batch's own CPU per item (issue 15: under 5 %).

Three measurements, each trial in a fresh process, the medians of ``--runs`` trials:

* ``batch``: ``run_batch`` over ``--items`` items on 2 simulator *processes* (fresh DSH_HOME,
  telemetry off) without scorers; the orchestrator's CPU (``time.process_time``: this process,
  every thread; the simulators are other processes) per item. The baseline.
* ``batch+score``: the same batch (same dataset) with the six built-in text scorers (``exact``, ``includes``,
  ``choice``, ``numeric``, ``f1``, ``regex:NAME``) and ``--epochs 1``: its CPU per item.
* ``score-10k``: 10,000 results scored in one process: per result, ``turn_usage`` of a real
  ``TurnResult`` (recorded from the simulator: 12 root events, two of them model steps) and
  ``score_attempt`` with the six scorers, the line's evaluation fields and the tally (the typed
  ``ResultLine`` and ``EvalTally.add``, as the batch does; ``line_fields`` and ``add_line`` on
  a baseline tree from before issue 24); then the summary (``EvalTally``: reduce, mean,
  stderr, a 10,000-resample bootstrap per scorer). CPU per result.

numpy (the bootstrap's) is imported before the window in every kind: a one-off cost of about
0.3 s per process, like importing trio, not a per-item one.

Reported: each CPU per item, ``score-10k`` / ``batch`` and (``batch+score`` − ``batch``) /
``batch`` as percentages.

    python bench/eval_scoring.py --runs 3 --items 1000            # a markdown table to paste
    python bench/eval_scoring.py --runs 3 --items 1000 --baseline /path/to/other/checkout
    python bench/eval_scoring.py --one batch --items 1000          # one trial, one JSON line
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402

SCORERS = ["exact", "includes", "choice", "numeric", "f1", "regex:digits"]
SCORING = '[regex.digits]\npattern = "[0-9]+"\n'
SCRIPT = 'default_reply = "The answer is 42. ANSWER: B"\n'
RESULTS = 10_000
KINDS = ("batch", "batch+score", "score-10k")
ANSWERS = ["It is 43, I think. ANSWER: C", "forty-two", "No idea; the options all look wrong.", "42 (B)"]


def _dataset(path: Path, items: int) -> None:
    import orjson

    with open(path, "wb") as handle:
        for i in range(items):
            row = {"id": f"item-{i:06d}", "prompt": f"question {i}: what is 6 x 7?", "target": ["42", "forty-two"],
                   "choices": ["41", "42", "43", "44"], "metadata": {"level": ["easy", "hard"][i % 2]}}
            handle.write(orjson.dumps(row) + b"\n")


def batch_trial(items: int, scored: bool) -> dict[str, Any]:
    import trio

    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        root = Path(tmp)
        dataset = root / "ds.jsonl"
        _dataset(dataset, items)
        (root / "script.toml").write_text(SCRIPT)
        (root / "scoring.toml").write_text(SCORING)
        home = root / "home"
        home.mkdir()
        spec = RuntimeSpec.simulator(script=root / "script.toml", dsh_home=home, cwd=root, env={"DSH_TELEMETRY_MODE": "DISABLED"})
        extra: dict[str, Any] = {"scorers": SCORERS, "scoring": root / "scoring.toml", "group_by": "level"} if scored else {}
        options = BatchOptions(runtimes=2, progress="none", retries=0, **extra)
        import numpy.random  # noqa: F401  (a one-off import, as trio's: outside the window of both kinds)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        summary = trio.run(run_batch, dataset, root / "results.jsonl", spec, options)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        assert summary.ok == items, summary
        return {"kind": "batch+score" if scored else "batch", "items": items, "cpu_per_item_us": cpu / items * 1e6, "wall_s": wall}


async def _record_turns(count: int) -> list[Any]:
    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.session import open_runtime
    from dsh_orchestra.testing._script import parse_script
    from dsh_orchestra.testing._simulator import open_simulator_stream
    import tomllib

    script = parse_script(tomllib.loads(SCRIPT), source="<bench>")
    spec = RuntimeSpec(connect=lambda: open_simulator_stream(script), name="sim")
    async with open_runtime(spec) as runtime:
        return [await runtime.session(f"s{i}").run(f"question {i}") for i in range(count)]


def score_trial() -> dict[str, Any]:
    import trio

    from dsh_orchestra.eval import (
        EvalItem, EvalResult, bind_scorers, EvalTally, line_fields, make_plan, parse_scoring, score_attempt, turn_usage,
    )
    import tomllib

    try:  # the typed result line (issue 24); a baseline tree from before it has only the dict path
        from dsh_orchestra.eval import evaluated
        from dsh_orchestra.results import ResultLine
        typed = True
    except ImportError:
        typed = False
    turns = trio.run(_record_turns, 50)
    plan = make_plan(SCORERS, scoring=parse_scoring(tomllib.loads(SCORING)), group_by="level")
    scorers = bind_scorers(plan.scorers)
    items = [EvalItem(id=f"item-{i:06d}", prompt="q", target=["42", "forty-two"], choices=["41", "42", "43", "44"],
                      metadata={"level": ["easy", "hard"][i % 2]}) for i in range(RESULTS)]

    def usage_all() -> list[Any]:  # what every result line pays, scored or not ("usage" is always there)
        return [turn_usage(turns[index % len(turns)]) for index in range(len(items))]

    async def score_all(usages: list[Any]) -> EvalTally:
        tally = EvalTally(plan)
        for index, item in enumerate(items):
            turn = turns[index % len(turns)]
            # Every response distinct (no cache hits across items), and scores that vary across
            # items (right, wrong, unparsable), so the summary's bootstraps resample real spreads.
            response = f"Item {index:06d}: {turn.final_response if index % 4 else ANSWERS[index // 4 % len(ANSWERS)]}"
            result = EvalResult(final_response=response, events=turn.events, notifications=turn.notifications,
                                subagents=turn.subagents, usage=usages[index])
            scored = await score_attempt(scorers, item, result)
            if typed:  # what the batch does since issue 24: the typed line, counted once
                tally.add(ResultLine(id=item.id, status="ok", metadata=item.metadata,
                                     **evaluated(plan, usages[index], scored.scores, None, 1, None)))
            else:  # a baseline tree from before it
                tally.add_line({"id": item.id, "metadata": item.metadata,
                                **line_fields(plan, usages[index], scored.scores, None, 1, None)})
        return tally

    import numpy.random  # noqa: F401  (imported by the first bootstrap: a one-off cost, not per result)

    cpu0 = time.process_time()
    usages = usage_all()
    cpu1 = time.process_time()
    tally = trio.run(score_all, usages)
    cpu2 = time.process_time()
    summary = tally.to_json()
    cpu3 = time.process_time()
    assert summary["scores"]["numeric"]["mean"] == 0.8125 and summary["scores"]["numeric"]["n"] == RESULTS  # 3/4 + 1/16 right
    return {"kind": "score-10k", "items": RESULTS, "cpu_per_item_us": (cpu3 - cpu1) / RESULTS * 1e6,
            "usage_per_item_us": (cpu1 - cpu0) / RESULTS * 1e6, "scorers_per_item_us": (cpu2 - cpu1) / RESULTS * 1e6,
            "summary_cpu_s": cpu3 - cpu2}


def one(kind: str, items: int) -> dict[str, Any]:
    if kind == "score-10k":
        return score_trial()
    return batch_trial(items, kind == "batch+score")


def _trial(kind: str, items: int, tree: str | None) -> dict[str, Any]:
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED"}
    if tree is not None:  # another checkout's dsh_orchestra (this script and its bench helpers stay)
        env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, __file__, "--one", kind, "--items", str(items)],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({' / '.join(f'{v:,.0f}' for v in values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--one", choices=KINDS, default=None)
    parser.add_argument("--baseline", metavar="TREE", default=None,
                        help="also run every trial with this checkout's dsh_orchestra first on PYTHONPATH (before/after)")
    parser.add_argument("--json", metavar="FILE", default=None, help="also write every trial as JSON")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.items)))
        return
    trees: dict[str, str | None] = {"this tree": None}
    if args.baseline:
        trees = {"baseline": args.baseline, "this tree": None}
    load_before = os.getloadavg()
    trials: dict[str, dict[str, list[dict[str, Any]]]] = {t: {k: [] for k in KINDS} for t in trees}
    for _ in range(args.runs):  # interleaved: load changes hit every kind (and tree) alike
        for kind in KINDS:
            for name, tree in trees.items():
                trials[name][kind].append(_trial(kind, args.items, tree))
    load_after = os.getloadavg()
    print(f"**Evaluation scoring** ({args.runs} runs, batch of {args.items} items; load {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {machine()['nproc']} CPUs, {machine()['cpu']})\n")
    print("| kind | " + " | ".join(f"{t}: CPU µs per item, median (trials)" for t in trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for kind in KINDS:
        print(f"| `{kind}` | " + " | ".join(_cell([r["cpu_per_item_us"] for r in trials[t][kind]]) for t in trees) + " |")
    print()
    for name in trees:
        median = {k: statistics.median(r["cpu_per_item_us"] for r in trials[name][k]) for k in KINDS}
        ratio = 100 * median["score-10k"] / median["batch"]
        overhead = 100 * (median["batch+score"] - median["batch"]) / median["batch"]
        scored = trials[name]["score-10k"]
        summary_ms = statistics.median(r["summary_cpu_s"] for r in scored) * 1e3
        usage = statistics.median(r.get("usage_per_item_us", 0.0) for r in scored)
        print(f"* {name}: scoring 10,000 results (six scorers, their line fields and tally, the summary's "
              f"metrics) = **{ratio:.2f} %** of the batch's CPU per item (target < 5 %: {'met' if ratio < 5 else 'missed'}); "
              f"the summary {summary_ms:,.0f} ms in all; the usage scan every line pays, scored or not, "
              f"{usage:,.1f} µs per result more ({100 * (median['score-10k'] + usage) / median['batch']:.2f} % with it); "
              f"a scored batch of {args.items} costs {overhead:+.1f} % per item over the same batch unscored")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "load": [load_before, load_after], "runs": args.runs,
                                               "items": args.items, "trees": trees, "trials": trials}, indent=2))


if __name__ == "__main__":
    main()

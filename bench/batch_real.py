"""Pool and batch on the real runtime: 200 items with 1, 2 and 4 runtimes, ours next to the official SDK.

The runtimes are the bundled ``dsh --profile sdk`` (deepseek-harness-runtime-bin 0.2.1rc2),
all sharing one fresh DSH_HOME, telemetry disabled, ``DEEPSEEK_BASE_URL`` at the scripted
model, which runs as its **own process** (``python -m dsh_orchestra.testing fake-model``), so
neither its CPU nor the runtimes' is counted for the client. Clients, one trial per process:

* ``ours``: ``run_batch`` (the batch pipeline: dataset validation, a ``RuntimePool`` of R
  runtimes, 4 sessions in flight per runtime, ``session.run`` = prompt + ``session/wait`` +
  ``TurnResult``, one results line per item written and flushed);
* ``sdk``: the official synchronous SDK (``deepseek_harness`` 0.2.1rc2): R
  ``DeepSeekHarness`` instances (one runtime process each), a ``ThreadPoolExecutor`` of 4R
  threads, item i on harness i mod R (``harness.run(prompt)``: its subscription,
  ``session_prompt``, read until the root's first idle), one JSON line per result written
  under a lock.

The window opens once every runtime is started and greeted (ours: a measuring wrapper around
the pool waits for all R to be live before the first item; sdk: every harness ``start()``ed)
and closes after the last result: wall time (``perf_counter``), client CPU
(``process_time``: this process, every thread) and peak RSS. The whole ``run_batch`` call
(start-up included) is reported too. Every trial checks every result (the scripted reply,
``completed``, one line per id).

    python bench/batch_real.py --runs 3            # both clients x R in (1, 2, 4), interleaved; medians
    python bench/batch_real.py --one ours --runtimes 2 --base-url http://127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402

REPLY = "scripted answer"
ITEMS = 200
PER_RUNTIME = 4
API_KEY = "bench-key-not-a-secret"
ENV = {"DSH_TELEMETRY_MODE": "DISABLED", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prompts(items: int) -> list[tuple[str, str]]:
    return [(f"item-{i:04d}", f"question number {i}") for i in range(items)]


def run_ours(runtimes: int, items: int, base_url: str, root: Path) -> dict[str, Any]:
    import orjson
    import trio

    from dsh_orchestra.batch import BatchOptions, _runner, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    dataset = root / "ds.jsonl"
    dataset.write_bytes(b"".join(orjson.dumps({"id": i, "prompt": p}) + b"\n" for i, p in prompts(items)))
    window: dict[str, float] = {}
    real_open_pool = _runner.open_pool

    @asynccontextmanager
    async def measured_open_pool(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with real_open_pool(*args, **kwargs) as pool:
            await pool.wait_live()  # every runtime greeted before the first item: same start as sdk
            window.update(cpu=time.process_time(), wall=time.perf_counter(), rss=maxrss_mib())
            yield pool
            window.update(cpu_end=time.process_time(), wall_end=time.perf_counter())

    _runner.open_pool = measured_open_pool  # type: ignore[assignment]
    spec = RuntimeSpec(dsh_home=root / "home", cwd=root / "ws", base_url=base_url, api_key=API_KEY, env=ENV)
    out = root / "results.jsonl"
    cpu0, wall0 = time.process_time(), time.perf_counter()
    summary = trio.run(run_batch, dataset, out, spec, BatchOptions(runtimes=runtimes, progress="none", retries=0))
    total_wall, total_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    results = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    check({r["id"]: (r["final_response"], r["finish_reason"]) for r in results}, items)
    if summary.ok != items:
        raise AssertionError(f"{summary.ok} ok of {items}")
    return {
        "wall_s": window["wall_end"] - window["wall"], "cpu_s": window["cpu_end"] - window["cpu"],
        "total_wall_s": total_wall, "total_cpu_s": total_cpu, "peak_rss_mib": maxrss_mib(),
    }


def run_sdk(runtimes: int, items: int, base_url: str, root: Path) -> dict[str, Any]:
    from deepseek_harness import DeepSeekHarness

    harnesses = [
        DeepSeekHarness(dsh_home=str(root / "home"), cwd=str(root / "ws"), base_url=base_url, api_key=API_KEY,
                        env=dict(ENV))
        for _ in range(runtimes)
    ]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        starters = [threading.Thread(target=h.start) for h in harnesses]
        for thread in starters:
            thread.start()
        for thread in starters:
            thread.join()
        lock = threading.Lock()
        seen: dict[str, tuple[str, str | None]] = {}
        out = open(root / "results.jsonl", "w", encoding="utf-8")

        def one(index: int, item_id: str, prompt: str) -> None:
            started = time.perf_counter()
            result = harnesses[index % runtimes].run(prompt)
            line = json.dumps({"id": item_id, "status": "ok" if result.finish_reason == "completed" else "error",
                               "session_id": result.session_id, "final_response": result.final_response,
                               "finish_reason": result.finish_reason, "duration_s": time.perf_counter() - started})
            with lock:
                out.write(line + "\n")
                out.flush()
                seen[item_id] = (result.final_response, result.finish_reason)

        cpu, wall = time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(max_workers=PER_RUNTIME * runtimes) as pool:
            futures = [pool.submit(one, n, i, p) for n, (i, p) in enumerate(prompts(items))]
            for future in futures:
                future.result()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        out.close()
    finally:
        for harness in harnesses:
            harness.close()
    check(seen, items)
    return {"wall_s": wall, "cpu_s": cpu, "total_wall_s": time.perf_counter() - wall0,
            "total_cpu_s": time.process_time() - cpu0, "peak_rss_mib": maxrss_mib()}


def check(results: dict[str, tuple[str, str | None]], items: int) -> None:
    if len(results) != items:
        raise AssertionError(f"{len(results)} results for {items} items")
    for item_id, (final, finish) in results.items():
        if final != REPLY or finish != "completed":
            raise AssertionError(f"{item_id}: {final!r} {finish!r}")


def one_trial(client: str, runtimes: int, items: int, base_url: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-batch-real-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        (root / "ws").mkdir()
        measured = (run_ours if client == "ours" else run_sdk)(runtimes, items, base_url, root)
    return {
        "client": client, "runtimes": runtimes, "items": items,
        "items_per_s": round(items / measured["wall_s"], 2),
        "cpu_per_item_ms": round(measured["cpu_s"] / items * 1000, 3),
        **{k: round(v, 3) for k, v in measured.items()},
    }


def start_fake_model(directory: Path) -> tuple[subprocess.Popen[str], str]:
    script = directory / "model.toml"
    script.write_text(f'default_reply = "{REPLY}"\n')
    process = subprocess.Popen([sys.executable, "-m", "dsh_orchestra.testing", "fake-model", "--port", "0",
                                "--script", str(script)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening on "):
        process.kill()
        raise SystemExit(f"the fake model did not start: {line!r}")
    return process, line.split()[-1]


def many(runs: int, items: int, sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-fake-model-") as tmp:
        model, base_url = start_fake_model(Path(tmp))
        rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
        try:
            for run in range(runs):
                for runtimes in sizes:
                    for client in (("ours", "sdk") if run % 2 == 0 else ("sdk", "ours")):
                        command = [sys.executable, __file__, "--one", client, "--runtimes", str(runtimes),
                                   "--items", str(items), "--base-url", base_url]
                        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
                        if done.returncode != 0:
                            raise SystemExit(f"{command} failed:\n{done.stderr}")
                        row = json.loads(done.stdout.strip().splitlines()[-1])
                        row["run"] = run
                        rows.setdefault((client, runtimes), []).append(row)
                        print(json.dumps(row), flush=True)
        finally:
            model.terminate()
            model.wait(timeout=10)
    summary: dict[str, Any] = {}
    for (client, runtimes), trials in sorted(rows.items()):
        summary[f"{client}-{runtimes}"] = {
            k: round(statistics.median(t[k] for t in trials), 3)
            for k in ("items_per_s", "cpu_per_item_ms", "wall_s", "total_wall_s", "peak_rss_mib")
        }
    for client in ("ours", "sdk"):
        base = summary[f"{client}-{sizes[0]}"]["items_per_s"]
        for runtimes in sizes[1:]:
            summary[f"{client}-{runtimes}"]["speedup_vs_1"] = round(summary[f"{client}-{runtimes}"]["items_per_s"] / base, 2)
    for runtimes in sizes:
        ours, sdk = summary[f"ours-{runtimes}"], summary[f"sdk-{runtimes}"]
        summary[f"ratio-{runtimes}"] = {
            "items_per_s_ours_over_sdk": round(ours["items_per_s"] / sdk["items_per_s"], 2),
            "cpu_per_item_ours_over_sdk": round(ours["cpu_per_item_ms"] / sdk["cpu_per_item_ms"], 2),
        }
    print(json.dumps({"summary": summary, "machine": machine(), "runs": runs, "items": items}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", choices=("ours", "sdk"), help="run one trial in this process")
    parser.add_argument("--runtimes", type=int, default=1)
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--base-url", help="the fake model (with --one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="1,2,4", help="runtime counts, comma-separated")
    args = parser.parse_args()
    if args.one:
        if not args.base_url:
            parser.error("--one needs --base-url")
        print(json.dumps(one_trial(args.one, args.runtimes, args.items, args.base_url)))
    else:
        many(args.runs, args.items, [int(s) for s in args.sizes.split(",")])


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR.parent))
    os.environ.setdefault("DSH_TELEMETRY_MODE", "DISABLED")
    main()

"""Scale-out on Ray: items/s for 1 and 2 actors on the simulator, actor and instance start-up.

One local Ray instance (``LocalRay``, 2 CPUs, no dashboard) for the whole benchmark; this
process is the driver. Measured:

* Ray start-up: ``LocalRay.start()`` (``ray start --head``) and ``ray.init`` connecting;
* actor start-up: a ``HostActor`` created as ``run_batch_ray`` creates it (1 CPU, the
  runtime_env env_vars) until ``start()`` returns with its pool of one simulator runtime
  ready (worker process, imports, the runtime's spawn and handshake); the runtime's own part
  (``HostInfo.startup_s``) is reported apart;
* throughput: ``run_batch_ray`` with 1 and 2 actors (1 runtime each, 4 items in flight per
  runtime), and ``run_batch`` with 1 and 2 runtimes on one machine for reference, on
  generated datasets, with no model delay (CPU-bound) and with a simulated model latency.
  ``items/s`` is items over the whole call (actor start-up included); ``steady items/s`` is
  the rate between the 10th and the 90th percentile result line (timestamps of the results
  file growing, polled every 5 ms).

Every trial checks its results (one line per id, all ``ok``). Trials of all configurations
are interleaved; medians of ``--runs``. The load average is printed before and after each
trial: run it when the machine is quiet.

    python bench/ray_batch.py [--runs 3] [--items 1000] [--latency-items 600] [--delay 0.05]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

from _common import machine  # noqa: E402


def load() -> float:
    return round(os.getloadavg()[0], 2)


def script_text(delay: float) -> str:
    text = 'default_reply = "answer"\n'
    if delay > 0:
        text += f'\n[[rules]]\nname = "latency"\nreply = "answer"\ndelay = {delay}\n'
    return text


class Watcher:
    """Timestamps of the results file's lines, read as the file grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.times: list[float] = []
        self._offset = 0

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        now = time.perf_counter()
        self.times.extend([now] * data.count(b"\n"))

    def steady_rate(self) -> float:
        times = self.times
        low, high = times[int(len(times) * 0.1)], times[int(len(times) * 0.9) - 1]
        count = int(len(times) * 0.9) - int(len(times) * 0.1) - 1
        return count / (high - low) if high > low else float("nan")


def trial(kind: str, units: int, items: int, delay: float) -> dict[str, Any]:
    import orjson
    import trio

    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.scale import run_batch_ray

    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        dataset = root / "ds.jsonl"
        with open(dataset, "wb") as handle:
            for i in range(items):
                handle.write(orjson.dumps({"id": f"item-{i:06d}", "prompt": f"question {i}"}) + b"\n")
        script = root / "script.toml"
        script.write_text(script_text(delay))
        home = root / "home"
        home.mkdir()
        spec = RuntimeSpec.simulator(script=script, dsh_home=home, cwd=root, env={"DSH_TELEMETRY_MODE": "DISABLED"})
        out = root / "results.jsonl"
        watcher = Watcher(out)

        async def run() -> Any:
            async with trio.open_nursery() as nursery:
                async def watch() -> None:
                    while True:
                        watcher.poll()
                        await trio.sleep(0.005)

                nursery.start_soon(watch)
                if kind == "ray":
                    summary = await run_batch_ray(dataset, out, spec, BatchOptions(progress="none", retries=0),
                                                  actors=units, runtimes_per_actor=1)
                else:
                    summary = await run_batch(dataset, out, spec, BatchOptions(runtimes=units, progress="none", retries=0))
                nursery.cancel_scope.cancel()
            watcher.poll()
            return summary

        before = load()
        began = time.perf_counter()
        summary = trio.run(run)
        wall = time.perf_counter() - began
        ids = set()
        for line in out.read_bytes().splitlines():
            result = orjson.loads(line)
            if result["status"] != "ok":
                raise AssertionError(f"item {result['id']} ended {result['status']}: {result['error']}")
            ids.add(result["id"])
        if len(ids) != items or summary.ok != items:
            raise AssertionError(f"{len(ids)} results for {items} items")
    return {"kind": kind, "units": units, "items": items, "delay_s": delay, "wall_s": round(wall, 3),
            "items_per_s": round(items / wall, 1), "steady_items_per_s": round(watcher.steady_rate(), 1),
            "load_before": before, "load_after": load()}


def actor_startup(ray: Any, trials: int) -> dict[str, Any]:
    """Create, start, close and kill ``trials`` actors one after another, as run_batch_ray does."""
    from dsh_orchestra.batch import BatchOptions
    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.scale import HostConfig, split_spec
    from dsh_orchestra.scale._actor import HostActor

    remote = ray.remote(HostActor)
    totals, runtimes, loads = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-ray-actor-") as tmp:
        script = Path(tmp) / "script.toml"
        script.write_text(script_text(0))
        spec = RuntimeSpec.simulator(script=script, dsh_home=tmp, cwd=tmp, env={"DSH_TELEMETRY_MODE": "DISABLED"})
        actor_spec, settings, secrets = split_spec(spec)
        box = [ray.put(secrets)]
        config = HostConfig.for_items(actor_spec, BatchOptions(), slot=0, runtimes=1, in_flight=4)
        for _ in range(trials):
            loads.append(load())
            began = time.perf_counter()
            actor = remote.options(num_cpus=1, max_concurrency=7, runtime_env={"env_vars": settings}).remote(config)
            info = ray.get(actor.start.remote(box))
            totals.append(time.perf_counter() - began)
            runtimes.append(info.startup_s)
            ray.get(actor.close.remote())
            ray.kill(actor)
            time.sleep(1.0)  # let Ray reap the worker before the next one
    return {"trials": trials, "median_s": round(statistics.median(totals), 3), "min_s": round(min(totals), 3),
            "max_s": round(max(totals), 3), "runtime_part_median_s": round(statistics.median(runtimes), 3),
            "all_s": [round(t, 3) for t in totals], "load": loads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="trials per configuration (medians)")
    parser.add_argument("--items", type=int, default=1000, help="items of the no-delay (CPU-bound) trials")
    parser.add_argument("--latency-items", type=int, default=600, help="items of the trials with model latency")
    parser.add_argument("--delay", type=float, default=0.05, help="simulated model latency per item (s)")
    parser.add_argument("--actor-trials", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback-only benchmark instance
    logging.basicConfig(level=logging.WARNING)

    import ray

    from dsh_orchestra.scale._local import LocalRay

    print(json.dumps({"load_at_start": os.getloadavg(), "machine": machine(), "ray": ray.__version__}), flush=True)
    local = LocalRay(num_cpus=2)
    began = time.perf_counter()
    address = local.start()
    head_s = time.perf_counter() - began
    began = time.perf_counter()
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    init_s = time.perf_counter() - began
    try:
        startup = actor_startup(ray, args.actor_trials)
        print(json.dumps({"ray_head_start_s": round(head_s, 3), "ray_init_s": round(init_s, 3), "actor_startup": startup}),
              flush=True)
        plan = [(kind, units, items, delay)
                for items, delay in ((args.items, 0.0), (args.latency_items, args.delay))
                for kind, units in (("local", 1), ("local", 2), ("ray", 1), ("ray", 2))]
        results: dict[str, list[dict[str, Any]]] = {}
        for run in range(args.runs):
            for kind, units, items, delay in plan:
                result = trial(kind, units, items, delay)
                result["run"] = run
                results.setdefault(f"{kind}-{units}-delay{delay:g}", []).append(result)
                print(json.dumps(result), flush=True)
        summary = {
            name: {key: round(statistics.median(t[key] for t in trials), 1)
                   for key in ("wall_s", "items_per_s", "steady_items_per_s", "load_before", "load_after")}
            for name, trials in results.items()
        }
        print(json.dumps({"summary": summary, "ray_head_start_s": round(head_s, 3), "ray_init_s": round(init_s, 3),
                          "actor_startup": startup, "runs": args.runs, "load_at_end": os.getloadavg()}, indent=2))
    finally:
        ray.shutdown()
        stopping = time.perf_counter()
        local.stop()
        print(json.dumps({"ray_stop_s": round(time.perf_counter() - stopping, 3)}))


if __name__ == "__main__":
    main()

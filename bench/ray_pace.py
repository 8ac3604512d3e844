"""429s absorbed under ``--ray`` against a quota: node gateways with and without learned pacing,
beside the same batch on one machine.

One local Ray instance (``LocalRay``, 2 CPUs); for each round and each mode, a fresh fake model
with ``--rate-limit R/s`` (default 20/s) and a CLI batch of ``--items`` one-call items (default
200) on the real runtime, ``--concurrency 64``, in a fresh DSH_HOME:

* ``local``: ``--runtimes 2`` on this machine (the local gateway: AIMD and learned pacing);
* ``ray``: ``--ray ADDRESS --ray-actors 2 --runtimes-per-actor 1`` (one node gateway, its
  share from the quota coordinator) with this tree's code;
* ``ray-base``: the same with another tree's ``dsh_orchestra`` (``--baseline DIR``, e.g. a
  ``git archive`` of main before the change) first on the PYTHONPATH of the CLI and of the Ray
  workers (``--ray-runtime-env`` env_vars), side by side in the same rounds.

``--nodes N`` (N >= 2): a ``ray.cluster_utils.Cluster`` on this machine instead (a head with no
actor resources and N worker nodes of 2 CPUs), one actor of one runtime on each worker (``--ray-actor-resources``):
N node gateways on one quota, sharing the run's learned gap through the coordinator.

Per run: items failed, ``passed_back`` (the summary's ``model.calls - model.upstream_calls``:
calls whose 429 reached the runtime, since the gateway counts a call as upstream only once it
is answered 200), ``absorbed_429`` (``model.retries``), the fake model's ``rate_limited`` and
``answered``, wall time, the quota used over the wall, the CLI's CPU time (user+sys of its
process tree as the OS reports for reaped children; Ray's workers not included) and the load
average before and after. Medians per mode at the end.

    python bench/ray_pace.py [--rounds 3] [--rate 20] [--items 200] [--modes local,ray-base,ray] [--baseline DIR] [--nodes 1]
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
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsh_orchestra.scale._local import LocalRay  # noqa: E402

CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]
ENV = {"DSH_TELEMETRY_MODE": "DISABLED", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def start_model(rate: float, stats: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "dsh_orchestra.testing", "fake-model", "--rate-limit", f"{rate:g}/s",
                                "--stats", str(stats)], stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    return process, process.stdout.readline().split()[-1]


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def once(mode: str, *, rate: float, items: int, address: str, baseline: str | None, nodes: int = 1) -> dict[str, Any]:
    env = {**os.environ, **ENV}
    if mode == "ray-base":
        assert baseline, "ray-base needs --baseline DIR"
        env["PYTHONPATH"] = baseline
    with tempfile.TemporaryDirectory(prefix="raypace-") as tmp:
        root = Path(tmp)
        (root / "ds.jsonl").write_text("".join(json.dumps({"id": f"i{i}", "prompt": f"question {i}"}) + "\n"
                                               for i in range(items)))
        model, url = start_model(rate, root / "stats.json", env)
        where = ["--runtimes", "2"]
        if mode != "local":
            where = ["--ray", address, "--ray-actors", str(max(2, nodes)), "--runtimes-per-actor", "1"]
            if nodes > 1:
                where += ["--ray-actor-resources", json.dumps([{f"node_{n}": 1} for n in range(nodes)])]
            if mode == "ray-base":
                where += ["--ray-runtime-env", json.dumps({"env_vars": {"PYTHONPATH": baseline}})]
        args = ["batch", "ds.jsonl", "--out", "out.jsonl", "--runtime", "dsh", "--dsh-home", str(root / "home-{actor}"),
                "--workspace", str(root), "--no-progress", "--summary", "summary.json", "--timeout", "600",
                "--concurrency", "64", *where]
        before, cpu = load(), children_cpu()
        began = time.monotonic()
        try:
            done = subprocess.run([*CLI, *args], cwd=root, env={**env, "DEEPSEEK_API_KEY": "bench-key",
                                                                 "DEEPSEEK_BASE_URL": url},
                                  capture_output=True, text=True, timeout=900, check=False)
            wall = time.monotonic() - began
            cpu = children_cpu() - cpu
        finally:
            stop(model)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"{mode}: exit {done.returncode}: {done.stderr[-3000:]}")
        summary = json.loads((root / "summary.json").read_text())
        seen = json.loads((root / "stats.json").read_text())
    model_totals = summary.get("model") or {}
    return {"mode": mode, "nodes": model_totals.get("nodes", 0), "ok": summary["ok"], "failed": summary["error"], "wall_s": round(wall, 1),
            "passed_back": model_totals.get("calls", 0) - model_totals.get("upstream_calls", 0),
            "absorbed_429": model_totals.get("retries"), "at_model_429": seen["rate_limited"], "answered": seen["answered"],
            "quota_used_wall": round(seen["answered"] / (rate * wall), 3),
            "model_active_s": round((seen["last_end_s"] or 0) - (seen["first_start_s"] or 0), 2),
            "concurrency": {k: (model_totals.get("concurrency") or {}).get(k) for k in ("final", "min", "max")},
            "cli_cpu_s": round(cpu, 2), "load_before": before, "load_after": load()}


MEDIANS = ("failed", "passed_back", "absorbed_429", "at_model_429", "wall_s", "model_active_s", "quota_used_wall",
           "cli_cpu_s", "load_before")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--modes", default="local,ray-base,ray")
    parser.add_argument("--baseline", default=None, help="a directory holding the baseline's dsh_orchestra package")
    parser.add_argument("--nodes", type=int, default=1, help="worker nodes (>= 2: a ray.cluster_utils.Cluster)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if args.nodes > 1:
        from ray.cluster_utils import Cluster

        node = {"num_cpus": 2, "object_store_memory": 80 * 2**20}
        cluster = Cluster(initialize_head=True, connect=False, head_node_args={**node, "include_dashboard": False})
        for number in range(args.nodes):
            cluster.add_node(**node, resources={f"node_{number}": 1})
        cluster.wait_for_nodes()
        address, stop_ray = cluster.address, cluster.shutdown
    else:
        local = LocalRay(num_cpus=2)
        address, stop_ray = local.start(), local.stop
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for number in range(1, args.rounds + 1):
            for mode in modes:
                row = once(mode, rate=args.rate, items=args.items, address=address, baseline=args.baseline, nodes=args.nodes)
                row["round"] = number
                rows.setdefault(mode, []).append(row)
                print("ray-pace", json.dumps(row), flush=True)
    finally:
        stop_ray()
    for mode, runs in rows.items():
        print("ray-pace-median", json.dumps({"mode": mode, "runs": len(runs),
                                             **{k: round(statistics.median(r[k] for r in runs), 3) for k in MEDIANS}}),
              flush=True)


if __name__ == "__main__":
    main()

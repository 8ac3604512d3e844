"""The driver's calls to a node gateway per attempt under ``--ray``: ``tag`` (the item's epoch,
before the attempt; only with ``--cache`` and independent epochs) and ``take`` (the session's
counts, after it), side by side.

One local Ray instance (``LocalRay``, 2 CPUs); this process is the driver. One node gateway is
started as a Ray run starts it (``NodeGateways.route_box``); then ``--calls`` rounds of
``tag(node, session, 1)`` and ``take(node, session)`` for a fresh session each, interleaved,
awaited one at a time from trio as ``RayRunner.attempt`` does. Prints the median and p99 of
each (ms), and the driver's CPU time (user+sys) per call, with the load average before and after.

    python bench/ray_gateway_calls.py [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsh_orchestra.gateway import GatewayOptions  # noqa: E402
from dsh_orchestra.scale._gateways import NodeGatewayConfig, NodeGateways  # noqa: E402
from dsh_orchestra.scale._local import LocalRay  # noqa: E402


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def measure(ray: object, calls: int, cache: str) -> dict[str, object]:
    config = NodeGatewayConfig(options=GatewayOptions(cache=cache), upstream="http://127.0.0.1:9")
    gateways = NodeGateways(ray, "bench", config, None, actor_options={})
    try:
        node = ray.get_runtime_context().get_node_id()  # type: ignore[attr-defined]
        await gateways.route_box(node)
        times: dict[str, list[float]] = {"tag": [], "take": []}
        spent = {"tag": 0.0, "take": 0.0}
        for i in range(calls):
            session = f"item-bench{i:020d}"
            for name in ("tag", "take"):
                began, used = time.perf_counter(), cpu()
                if name == "tag":
                    await gateways.tag(node, session, 1)
                else:
                    await gateways.take(node, session)
                times[name].append(1000 * (time.perf_counter() - began))
                spent[name] += cpu() - used
        return {name: {"median_ms": round(statistics.median(v), 3), "p99_ms": round(p99(v), 3),
                       "driver_cpu_ms_per_call": round(1000 * spent[name] / calls, 3)} for name, v in times.items()}
    finally:
        gateways.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    import tempfile

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    local = LocalRay(num_cpus=2)
    address = local.start()
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        with tempfile.TemporaryDirectory(prefix="ray-gw-calls-") as cache:
            load = os.getloadavg()
            result = trio.run(measure, ray, args.calls, cache)
            print(json.dumps({"calls": args.calls, "load_before": [round(x, 2) for x in load],
                              "load_after": [round(x, 2) for x in os.getloadavg()], **result}, indent=2))
    finally:
        ray.shutdown()
        local.stop()


if __name__ == "__main__":
    main()

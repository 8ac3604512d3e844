"""The model gateway: added latency, streaming throughput, and goodput against a quota.

The fake model runs as its own process (``python -m dsh_orchestra.testing fake-model``), the
gateway in this process, the client (httpx on trio) in this process too.

* ``latency``: one short answer (the default script's reply, 7 SSE frames) per request, p50
  and p99 of the whole request (headers to the last byte), direct to the fake model and
  through the gateway, at 1 and 64 concurrent streams; the gateway's added latency is the
  difference of the two.
* ``throughput``: one long answer (1 MiB of text in 64-byte deltas: 16,384 frames) read
  whole, direct and through the gateway: MiB/s.
* ``goodput``: the fake model with ``--rate-limit 20/s``; ``run_batch`` of 200 items on 2
  real runtimes, 64 items in flight, with the gateway (default options) and without
  (``gateway=None``; the runtime's own retries, then the batch's 2 retries): items failed,
  wall time, and the share of the quota used (model answers / (20/s x wall time)).

    python bench/gateway.py latency throughput goodput
    GATEWAY_BENCH_RATE=2 python bench/gateway.py goodput    # another quota (requests/s)
"""

from __future__ import annotations

import json
import os
from functools import partial
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402

from dsh_orchestra.gateway import Gateway, GatewayOptions  # noqa: E402

BODY = json.dumps({"model": "m", "stream": True, "max_tokens": 100,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}]}).encode()
ENV = {"DSH_TELEMETRY_MODE": "DISABLED", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def start_model(*extra: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "dsh_orchestra.testing", "fake-model", *extra],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.split()[-1]


def quantiles(values: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(values, n=100)
    return cuts[49] * 1000, cuts[98] * 1000


async def load(url: str, key: str, streams: int, total: int, body: bytes = BODY) -> tuple[list[float], int]:
    latencies: list[float] = []
    size = 0
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(trust_env=False, limits=limits, timeout=120) as client:
        async def worker(count: int) -> None:
            nonlocal size
            for _ in range(count):
                start = time.perf_counter()
                async with client.stream("POST", url + "/v1/messages", content=body, headers={"x-api-key": key}) as response:
                    async for chunk in response.aiter_raw():
                        size += len(chunk)
                latencies.append(time.perf_counter() - start)
        async with trio.open_nursery() as nursery:
            for _ in range(streams):
                nursery.start_soon(worker, total // streams)
    return latencies, size


async def latency(model_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    gateway = Gateway(GatewayOptions(model_concurrency=128), upstream=model_url, api_key="k")
    async with trio.open_nursery() as nursery:
        await nursery.start(gateway.run)
        for streams, total in ((1, 400), (64, 1280)):
            for _ in range(2):  # interleaved twice; the better p50 of each is kept
                for name, url, key in (("direct", model_url, "k"), ("gateway", gateway.base_url, gateway.token)):
                    await load(url, key, streams, min(total, 128))  # warm connections
                    lat, _ = await load(url, key, streams, total)
                    p50, p99 = quantiles(lat)
                    row = out.setdefault(f"{name}@{streams}", {"p50_ms": p50, "p99_ms": p99})
                    if p50 < row["p50_ms"]:
                        row.update(p50_ms=p50, p99_ms=p99)
            for stat in ("p50_ms", "p99_ms"):
                out[f"added@{streams}_{stat}"] = out[f"gateway@{streams}"][stat] - out[f"direct@{streams}"][stat]
        nursery.cancel_scope.cancel()
    return out


async def throughput(model_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    gateway = Gateway(upstream=model_url, api_key="k")
    body = BODY.replace(b"Say hello", b"LONG")
    async with trio.open_nursery() as nursery:
        await nursery.start(gateway.run)
        for name, url, key in (("direct", model_url, "k"), ("gateway", gateway.base_url, gateway.token)) * 2:
            start = time.perf_counter()
            _, size = await load(url, key, 1, 2, body)
            rate = size / (time.perf_counter() - start) / 2**20
            out[f"{name}_MiB_s"] = max(out.get(f"{name}_MiB_s", 0.0), rate)
        nursery.cancel_scope.cancel()
    return out


async def goodput(model_url: str, *, use_gateway: bool, rate: float) -> dict[str, Any]:
    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        dataset = root / "ds.jsonl"
        dataset.write_text("".join(json.dumps({"id": f"i{i}", "prompt": f"question {i}"}) + "\n" for i in range(200)))
        spec = RuntimeSpec(dsh_home=root / "home", cwd=root, base_url=model_url, api_key="bench-key", env=ENV,
                           handshake_timeout=120)
        options = BatchOptions(runtimes=2, concurrency=64, progress="none", timeout=600,
                               gateway=GatewayOptions() if use_gateway else None)
        start = time.perf_counter()
        summary = await run_batch(dataset, root / "out.jsonl", spec, options)
        wall = time.perf_counter() - start
    answers = summary.ok  # the default script answers each item in one model call
    return {"gateway": use_gateway, "ok": summary.ok, "failed": summary.error, "wall_s": round(wall, 1),
            "batch_retries": summary.retries, "quota_used": round(answers / (rate * wall), 3),
            "model": summary.model and {k: summary.model[k] for k in ("calls", "upstream_calls", "retries")}}


def main() -> None:
    parts = sys.argv[1:] or ["latency", "throughput", "goodput"]
    print(json.dumps(machine()))
    script = Path(tempfile.mkdtemp()) / "long.toml"
    script.write_text('[[rules]]\nname = "long"\nmatch = "LONG"\nreply = "' + "x" * 2**20 + '"\n')
    model, url = start_model("--script", str(script))
    try:
        if "latency" in parts:
            print("latency", json.dumps(trio.run(latency, url), indent=1))
        if "throughput" in parts:
            print("throughput", json.dumps(trio.run(throughput, url)))
    finally:
        model.terminate()
        model.wait()
    if "goodput" in parts:
        rate = float(os.environ.get("GATEWAY_BENCH_RATE", "20"))  # requests/s of the quota
        for use_gateway in (True, False):
            quota, quota_url = start_model("--rate-limit", f"{rate}/s")
            try:
                row = trio.run(partial(goodput, quota_url, use_gateway=use_gateway, rate=rate))
            finally:
                quota.terminate()
                quota.wait()
            print("goodput", json.dumps(row))


if __name__ == "__main__":
    main()

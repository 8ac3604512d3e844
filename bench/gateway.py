"""The model gateway: added latency, streaming throughput, and goodput against a quota.

The fake model runs as its own process (``python -m dsh_orchestra.testing fake-model``); for
``latency`` and ``throughput`` the gateway runs in a process of its own too
(``bench/_gateway_process.py``), and the client (httpx on trio) in this one, so the gateway's
CPU is not taken from the client's.

* ``latency``: one short answer (the default script's reply, 7 SSE frames) per request, p50
  and p99 of the whole request (headers to the last byte), direct to the fake model and
  through the gateway, at 1 and 64 concurrent streams, interleaved (direct, gateway, direct,
  gateway); the gateway's added latency is the difference of the medians of the runs.
* ``throughput``: one long answer (1 MiB of text in 64-byte deltas: 16,384 frames) read
  whole, direct and through the gateway: MiB/s.
* ``goodput``: the fake model with ``--rate-limit R/s`` (default 20/s, ``GATEWAY_BENCH_RATE``);
  ``run_batch`` of 200 items (one model call each) on 2 real runtimes, 64 items in flight, in
  the modes of ``GATEWAY_BENCH_MODES`` (default ``auto,rate,none``): ``auto`` the gateway with
  its defaults (AIMD), ``auto-all`` the same with every worker started at once (the batch
  before its start ramp, ``batch/_ramp.py``; ``GATEWAY_BENCH_RAMP=FIRST,GROW`` tries other
  ramps in the other gateway modes), ``old`` the same with the retry pause of the first release (the longer
  of the exponential backoff and ``retry-after``: the 68 % of last session), ``rate`` the
  gateway with ``--model-rate R/s``, ``none`` no gateway (the runtime's own retries, then the
  batch's 2). Items failed, wall time, and the share of the quota used: answers / (R x wall
  time, starting the runtimes included) and answers / (the requests the quota let through
  over the active span, from the first request that reached the model to the last: the
  bucket's max(1, R) plus R x the span). The wall time is ``run_batch``'s alone (imports, the
  fake model and the dataset come before it; the imports' time is printed apart, ``imports_s``),
  cut in start-up (to the first request that reached the model), model-active (to the end of
  the last answer) and tail (to ``run_batch`` returning), with the answers per half second.

    python bench/gateway.py latency throughput goodput
    GATEWAY_BENCH_RATE=2 GATEWAY_BENCH_MODES=old,auto,rate python bench/gateway.py goodput
"""

from __future__ import annotations

import json
import os
import resource
from functools import partial
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import trio

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402

from dsh_orchestra.gateway import Gateway, GatewayOptions  # noqa: E402

IMPORTS_S = time.time() - psutil.Process().create_time()  # the interpreter's start and these imports, apart

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


def start_gateway(upstream: str, concurrency: str = "128") -> tuple[subprocess.Popen[str], str, str]:
    process = subprocess.Popen([sys.executable, str(BENCH_DIR / "_gateway_process.py"), upstream, concurrency],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    _, url, token = process.stdout.readline().split()
    return process, url, token


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait()


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def latency(model_url: str, gateway_url: str, token: str, gateway_pid: int) -> dict[str, Any]:
    """Per path and stream count: p50/p99 of each of two interleaved runs; the added latency
    (medians); and the gateway process's CPU time per call (user + system), which the machine's
    load inflates far less than wall-clock latency."""
    out: dict[str, Any] = {}
    for streams, total in ((1, 400), (64, 1280)):
        runs: dict[str, list[tuple[float, float]]] = {"direct": [], "gateway": []}
        cpu: list[float] = []
        for _ in range(2):  # interleaved twice
            for name, url, key in (("direct", model_url, "k"), ("gateway", gateway_url, token)):
                await load(url, key, streams, min(total, 128))  # warm connections
                before = cpu_s(gateway_pid)
                lat, _ = await load(url, key, streams, total)
                if name == "gateway":
                    cpu.append((cpu_s(gateway_pid) - before) / len(lat) * 1000)
                runs[name].append(quantiles(lat))
        out[f"gateway_cpu_ms_per_call@{streams}"] = [round(c, 3) for c in cpu]
        for name, pairs in runs.items():
            out[f"{name}@{streams}"] = {"p50_ms": [round(p, 3) for p, _ in pairs], "p99_ms": [round(q, 3) for _, q in pairs]}
        for index, stat in enumerate(("p50_ms", "p99_ms")):
            direct = statistics.median(pair[index] for pair in runs["direct"])
            through = statistics.median(pair[index] for pair in runs["gateway"])
            out[f"added@{streams}_{stat}"] = round(through - direct, 3)
        out[f"load@{streams}"] = os.getloadavg()[0]
    return out


async def throughput(model_url: str, gateway_url: str, token: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    body = BODY.replace(b"Say hello", b"LONG")
    for name, url, key in (("direct", model_url, "k"), ("gateway", gateway_url, token)) * 2:
        start = time.perf_counter()
        _, size = await load(url, key, 1, 2, body)
        rate = size / (time.perf_counter() - start) / 2**20
        out.setdefault(f"{name}_MiB_s", []).append(round(rate, 3))
    out["load"] = os.getloadavg()[0]
    return out


def _old_pause(self: Gateway, attempt: int, retry_after: float | None) -> float:
    """The first release's retry pause: the longer of the backoff and retry-after (+ up to 10 %)."""
    backoff = self.backoff(attempt)
    if retry_after is not None:
        return max(backoff, retry_after * (1.0 + self._rng.random() / 10))
    return backoff


def _all_at_once(workers: int) -> Any:
    """A start ramp open from the start (``auto-all``: the batch before the ramp)."""
    from dsh_orchestra.batch._ramp import StartRamp

    return StartRamp(workers, first=workers)


async def goodput(model_url: str, *, mode: str, rate: float) -> dict[str, Any]:
    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    import dsh_orchestra.batch._runner as runner_module
    from dsh_orchestra.batch._ramp import StartRamp

    gateway = {"none": None, "auto": GatewayOptions(), "old": GatewayOptions(), "auto-all": GatewayOptions(),
               "rate": GatewayOptions(model_rate=rate)}[mode]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        dataset = root / "ds.jsonl"
        dataset.write_text("".join(json.dumps({"id": f"i{i}", "prompt": f"question {i}"}) + "\n" for i in range(200)))
        spec = RuntimeSpec(dsh_home=root / "home", cwd=root, base_url=model_url, api_key="bench-key", env=ENV,
                           handshake_timeout=120)
        options = BatchOptions(runtimes=2, concurrency=64, progress="none", timeout=600, gateway=gateway)
        saved = Gateway.pause
        if mode == "old":
            Gateway.pause = _old_pause  # type: ignore[method-assign]
        if mode == "auto-all":  # every worker at once: the batch before the start ramp
            runner_module.StartRamp = _all_at_once  # type: ignore[assignment,attr-defined]
        elif os.environ.get("GATEWAY_BENCH_RAMP"):  # "FIRST,GROW": try other start ramps
            first, grow = (int(n) for n in os.environ["GATEWAY_BENCH_RAMP"].split(","))
            runner_module.StartRamp = partial(StartRamp, first=first, grow=grow)  # type: ignore[assignment,attr-defined]
        try:
            cpu = resource.getrusage(resource.RUSAGE_SELF)
            start = time.monotonic()
            summary = await run_batch(dataset, root / "out.jsonl", spec, options)
            end = time.monotonic()
            wall = end - start
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            Gateway.pause = saved  # type: ignore[method-assign]
            runner_module.StartRamp = StartRamp  # type: ignore[attr-defined]
    answers = summary.ok  # the default script answers each item in one model call
    model = summary.model or {}
    return {"mode": mode, "ok": summary.ok, "failed": summary.error, "wall_s": round(wall, 1),
            "batch_retries": summary.retries, "quota_used_wall": round(answers / (rate * wall), 3),
            "model": model and {k: model[k] for k in ("calls", "upstream_calls", "retries")},
            "concurrency": model and {k: model["concurrency"][k] for k in ("final", "min", "max")},
            "cpu_s_this_process": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 2),
            "monotonic": [start, end], "load": os.getloadavg()[0]}


def breakdown(row: dict[str, Any], seen: dict[str, Any], rate: float) -> dict[str, Any]:
    """The wall time of ``run_batch`` cut in three, on one clock (``time.monotonic``; the fake
    model's times moved onto it by its ``monotonic_offset_s``): start-up (the call of
    ``run_batch`` to the first request that reached the model: gateway, runtimes, their first
    sessions), model-active (that request to the end of the last answer) and tail (that end to
    ``run_batch`` returning: the runtimes closed, the summary). Also the answers in each half
    second of the active span (the limiter's ramp at the start and its tail at the end)."""
    start, end = row.pop("monotonic")
    starts = [s + seen["monotonic_offset_s"] for s in seen.get("starts_s") or []]
    if not starts:
        return {}
    first, last = starts[0], seen["last_end_s"] + seen["monotonic_offset_s"]
    bins = [0] * (int((last - first) / 0.5) + 1)
    for s in starts:
        bins[int((s - first) / 0.5)] += 1
    return {"startup_s": round(first - start, 2), "active_s": round(last - first, 2), "tail_s": round(end - last, 2),
            "ideal_active_s": round(max(0.0, (len(starts) - max(1.0, rate)) / rate), 2),
            "answers_per_half_second": bins}


def main() -> None:
    parts = sys.argv[1:] or ["latency", "throughput", "goodput"]
    print(json.dumps({**machine(), "imports_s": round(IMPORTS_S, 2)}))
    script = Path(tempfile.mkdtemp()) / "long.toml"
    script.write_text('[[rules]]\nname = "long"\nmatch = "LONG"\nreply = "' + "x" * 2**20 + '"\n')
    if "latency" in parts or "throughput" in parts:
        model, url = start_model("--script", str(script))
        gateway, gateway_url, token = start_gateway(url)
        try:
            if "latency" in parts:
                print("latency", json.dumps(trio.run(latency, url, gateway_url, token, gateway.pid)), flush=True)
            if "throughput" in parts:
                print("throughput", json.dumps(trio.run(throughput, url, gateway_url, token)), flush=True)
        finally:
            stop(gateway)
            stop(model)
    if "goodput" in parts:
        rate = float(os.environ.get("GATEWAY_BENCH_RATE", "20"))  # requests/s of the quota
        for mode in os.environ.get("GATEWAY_BENCH_MODES", "auto,rate,none").split(","):
            stats = Path(tempfile.mkdtemp()) / "model-stats.json"
            quota, quota_url = start_model("--rate-limit", f"{rate}/s", "--stats", str(stats))
            try:
                row = trio.run(partial(goodput, quota_url, mode=mode, rate=rate))
            finally:
                stop(quota)
            seen = json.loads(stats.read_text())
            span = (seen["last_start_s"] or 0) - (seen["first_start_s"] or 0)
            row.update(breakdown(row, seen, rate))
            row["at_model"] = {k: v for k, v in seen.items() if k not in ("starts_s", "monotonic_offset_s")}
            # the bucket starts full (max(1, R) tokens) and refills at R/s: what it made available
            row["quota_used_active"] = round(seen["answered"] / (max(1.0, rate) + rate * span), 3)
            print("goodput", json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

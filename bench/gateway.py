"""The model gateway: added latency, streaming throughput, and goodput against a quota.

The fake model runs as its own process (``python -m dsh_orchestra.testing fake-model``); for
``latency`` and ``throughput`` the gateway runs in a process of its own too
(``bench/_gateway_process.py``), and the load comes from lean client processes
(``bench/_gateway_client.py``: raw sockets, one selectors loop), several for 64 streams, so
neither the client nor the gateway takes the other's CPU. ``GATEWAY_BENCH_BASELINE=DIR`` adds a
third path: the gateway of another version (DIR holds its ``dsh_orchestra`` package).
``GATEWAY_BENCH_FLOOR=1`` adds a relay that does no work (``bench/_relay_process.py``: bytes
copied both ways, on trio): what one more process on a call's path costs on this machine, the
floor under any proxy's added latency.

* ``latency``: p50 and p99 of the whole request (written to the last byte), and of the time to
  the answer's first byte (``first_*``), each path run twice, interleaved; the added latency is
  the difference of the medians of the runs; CPU per
  call (user + system) of the gateway, the model and the clients. Cases: 1 stream (400 calls,
  no delay); 64 streams in 8 processes against a model that answers after
  ``GATEWAY_BENCH_DELAY`` s (default 1) with a random think time as long before each call
  (``GATEWAY_BENCH_CALLS`` timed calls per stream, default 16); 64 streams closed-loop (no
  delay: saturation); 1 stream paced as the 64 are (twice the calls): the same spacing
  between calls without the other 63 streams, which tells what the 64-stream case pays for
  idleness (cold caches, sleeping CPUs) from what it pays for concurrency.
  ``GATEWAY_BENCH_CASES=0,1`` picks cases by index; ``GATEWAY_BENCH_REPEATS=N`` runs each path
  N times, interleaved (default 2). Each row also gives, per call, the time
  the model, the gateway and the clients waited on a run queue (``*_runq_ms``, from
  /proc/PID/task/*/schedstat: runnable but not running) and the gateway's wake-ups
  (timeslices); ``GATEWAY_BENCH_TRACE=1`` adds the gateway's own spans of a call (``in``:
  request read to upstream request started; ``out``: last upstream chunk to the end of the
  answer written; see bench/_gateway_process.py), at the cost of its wrappers' CPU.
* ``throughput``: one long answer (1 MiB of text in 64-byte deltas: 16,384 frames) read
  whole, 3 times per run: MiB/s and the gateway's CPU per MiB.
* ``goodput``: the fake model with ``--rate-limit R/s`` (default 20/s; ``GATEWAY_BENCH_RATE``,
  one rate or several, e.g. ``20,10,5``; ``GATEWAY_BENCH_ROUNDS=N`` rounds, each running every
  rate and mode in turn, then their medians; ``GATEWAY_BENCH_HOME=fresh`` (default), ``warm``
  or ``fresh,warm``: each run in a new empty DSH_HOME, or in a copy of one a runtime has used
  once, as a user's ``--dsh-home`` is after its first run: the runtime's first turn then checks
  its plugin packages instead of writing them);
  ``run_batch`` of 200 items (one model call each) on 2 real runtimes, 64 items in flight, in
  the modes of ``GATEWAY_BENCH_MODES`` (default ``auto,rate,none``): ``auto`` the gateway with
  its defaults (AIMD), ``auto-all`` the same with every worker started at once (the batch
  before its start ramp, ``batch/_ramp.py``; ``GATEWAY_BENCH_RAMP=FIRST,GROW`` tries other
  ramps in the other gateway modes), ``auto-call`` the ramp opened fully at the first model
  call (an experiment: no better, docs/benchmarks.md), ``auto-herd`` the same without learned
  pacing (a ``retry-after`` only holds: the gateway before it), ``auto-nocc`` the
  same with ``RuntimeSpec(compile_cache="off")`` (the runtimes before their compile cache), ``old`` the same with the retry pause of the first release (the longer
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
    GATEWAY_BENCH_BASELINE=/tmp/gw-base python bench/gateway.py latency throughput
    GATEWAY_BENCH_RATE=2 GATEWAY_BENCH_MODES=old,auto,rate python bench/gateway.py goodput
    GATEWAY_BENCH_RATE=20,10,5 GATEWAY_BENCH_ROUNDS=3 GATEWAY_BENCH_MODES=auto,rate,none python bench/gateway.py goodput
    GATEWAY_BENCH_RATE=20,10,5 GATEWAY_BENCH_ROUNDS=3 GATEWAY_BENCH_HOME=fresh,warm GATEWAY_BENCH_MODES=auto,none \
        python bench/gateway.py goodput
"""

from __future__ import annotations

import json
import os
import resource
import shutil
from functools import partial
import statistics
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import trio

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine, scratch_file  # noqa: E402

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


def start_gateway(upstream: str, concurrency: str = "128", *,
                  source: str | None = None) -> tuple[subprocess.Popen[str], str, str]:
    """The gateway in a process of its own; ``source``: a directory holding another version's
    ``dsh_orchestra`` package to run instead (put first on its PYTHONPATH)."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = source
    if TRACE:
        env["GATEWAY_BENCH_TRACE"] = TRACE + "-{pid}"
    process = subprocess.Popen([sys.executable, str(BENCH_DIR / "_gateway_process.py"), upstream, concurrency],
                               stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    _, url, token = process.stdout.readline().split()
    return process, url, token


def start_relay(upstream: str) -> tuple[subprocess.Popen[str], str, str]:
    """The zero-work relay (bench/_relay_process.py) in a process of its own: the floor."""
    process = subprocess.Popen([sys.executable, str(BENCH_DIR / "_relay_process.py"), upstream],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    _, url, _ = process.stdout.readline().split()
    RELAYS.add(process.pid)
    return process, url, "k"


RELAYS: set[int] = set()  # relay pids: no trace to ask them for


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait()


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def sched(pid: int) -> tuple[float, int, float]:
    """Seconds the process's threads spent waiting on a run queue (runnable, not running),
    their timeslices (about one per wake-up), and their seconds on a CPU (to the nanosecond,
    where psutil's CPU times count 10 ms ticks), from /proc/PID/task/*/schedstat (0 elsewhere)."""
    wait, slices, ran = 0.0, 0, 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            on_cpu, waited, runs = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        wait += int(waited) / 1e9
        slices += int(runs)
        ran += int(on_cpu) / 1e9
    return wait, slices, ran


def traced(gateway: subprocess.Popen[str] | None) -> list[tuple[float, float]] | None:
    """The calls the gateway timed since the last ask (GATEWAY_BENCH_TRACE, see
    bench/_gateway_process.py): (request read -> upstream request started, last upstream chunk
    -> end of the answer written), seconds."""
    if gateway is None or not TRACE or gateway.pid in RELAYS:
        return None
    count = TRACED[gateway.pid] = TRACED.get(gateway.pid, 0) + 1
    gateway.send_signal(signal.SIGUSR1)
    path = Path(f"{TRACE}-{gateway.pid}.{count}")
    deadline = time.monotonic() + 30
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the gateway wrote no trace ({path})")
        time.sleep(0.01)
    return [tuple(row) for row in json.loads(path.read_text())]  # type: ignore[misc]


TRACE = os.environ.get("GATEWAY_BENCH_TRACE") and str(scratch_file("trace"))
TRACED: dict[int, int] = {}


def clients(url: str, key: str, *, streams: int, procs: int, calls: int, warmup: int, body: Path,
            think: float = 0.0) -> dict[str, Any]:
    """``procs`` lean client processes (bench/_gateway_client.py) holding ``streams`` connections
    between them, run to the end; their latencies, bytes and CPU merged."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    share = [streams // procs + (i < streams % procs) for i in range(procs)]
    running = [subprocess.Popen([sys.executable, str(BENCH_DIR / "_gateway_client.py"), host, port, key, str(n),
                                 str(calls), str(warmup), str(body), str(think)], stdout=subprocess.PIPE, text=True)
               for n in share if n]
    merged: dict[str, Any] = {"latencies": [], "firsts": [], "bytes": 0, "cpu_s": 0.0, "calls": 0, "runq_s": 0.0}
    for process in running:
        out, _ = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"a client process failed ({process.returncode})")
        row = json.loads(out)
        merged["latencies"] += row["latencies"]
        merged["firsts"] += row.get("firsts", [])
        merged["bytes"] += row["bytes"]
        merged["cpu_s"] += row["cpu_s"]
        merged["calls"] += row["calls"]
        merged["runq_s"] += row.get("runq_s", 0.0)
    return merged


def write_body(text: str) -> Path:
    path = scratch_file("body.json")
    path.write_bytes(BODY.replace(b"Say hello", text.encode()))
    return path


Path_ = tuple[str, str, str, "subprocess.Popen[str] | None"]  # name, URL, key, the gateway process (None: direct)


def latency(model: subprocess.Popen[str], paths: list[Path_]) -> dict[str, Any]:
    """Per case (streams, client processes, the model's delay before answering): p50/p99 of
    each of ``GATEWAY_BENCH_REPEATS`` (default 2) interleaved runs (direct, gateway, direct,
    gateway, ...), the added latency (the difference of the medians of the runs), calls/s, and CPU per call (user + system) of the
    gateway, the fake model and the clients, which the machine's load inflates far less than
    wall-clock latency."""
    delay = float(os.environ.get("GATEWAY_BENCH_DELAY", "1.0"))
    paced = int(os.environ.get("GATEWAY_BENCH_CALLS", "16"))
    repeats = int(os.environ.get("GATEWAY_BENCH_REPEATS", "2"))  # interleaved runs per path
    cases = [(1, 1, 0.0, 400), (64, 8, delay, paced), (64, 8, 0.0, 40), (1, 1, delay, 2 * paced)]
    wanted = os.environ.get("GATEWAY_BENCH_CASES")  # e.g. "0,1": a subset of the cases, by index
    if wanted:
        cases = [cases[int(i)] for i in wanted.split(",")]
    bodies = {0.0: write_body("Say hello"), delay: write_body("Say SLOW")}
    out: dict[str, Any] = {}
    for streams, procs, wait, calls in cases:
        case = f"{streams}x{procs}p_delay{wait:g}"
        runs: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in paths}
        for _ in range(repeats):  # interleaved
            for name, url, key, gateway in paths:
                cpu = (cpu_s(model.pid), cpu_s(gateway.pid) if gateway else 0.0)
                waits = (sched(model.pid), sched(gateway.pid) if gateway else (0.0, 0, 0.0))
                traced(gateway)  # starts the gateway's trace afresh
                start = time.perf_counter()
                row = clients(url, key, streams=streams, procs=procs, calls=calls, warmup=2 if wait else 10,
                              body=bodies[wait], think=wait)
                wall = time.perf_counter() - start
                p50, p99 = quantiles(row["latencies"])
                first50, first99 = quantiles(row["firsts"])
                per_call = 1000 / row["calls"]
                runs[name].append({"p50_ms": round(p50, 3), "p99_ms": round(p99, 3),
                                   "first_p50_ms": round(first50, 3), "first_p99_ms": round(first99, 3),
                                   "calls_s": round(row["calls"] / wall, 1),
                                   "model_cpu_ms": round((cpu_s(model.pid) - cpu[0]) * per_call, 3),
                                   "gateway_cpu_ms": round((cpu_s(gateway.pid) - cpu[1]) * per_call, 3) if gateway else 0.0,
                                   "client_cpu_ms": round(row["cpu_s"] * per_call, 3),
                                   **waiting(model, gateway, waits, row, per_call),
                                   **inside(traced(gateway)),
                                   "load": round(os.getloadavg()[0], 2)})
        out[case] = runs
        for name, *_ in paths[1:]:
            for stat in ("p50_ms", "p99_ms", "first_p50_ms", "first_p99_ms"):
                direct = statistics.median(run[stat] for run in runs["direct"])
                through = statistics.median(run[stat] for run in runs[name])
                out[case][f"{name}_added_{stat}"] = round(through - direct, 3)
        print("latency", case, json.dumps(out[case]), flush=True)
    return out


def waiting(model: subprocess.Popen[str], gateway: subprocess.Popen[str] | None,
            before: tuple[tuple[float, int, float], tuple[float, int, float]], row: dict[str, Any],
            per_call: float) -> dict[str, float]:
    """Per call: ms the model, the gateway and the clients waited on a run queue (runnable but
    not running: the machine's load, seen directly), the gateway's wake-ups, and its ms on a
    CPU by the scheduler's count (``gateway_oncpu_ms``: as ``gateway_cpu_ms``, finer)."""
    model_wait = sched(model.pid)[0] - before[0][0]
    out = {"model_runq_ms": round(model_wait * per_call, 3), "client_runq_ms": round(row["runq_s"] * per_call, 3)}
    if gateway is not None:
        wait, slices, ran = sched(gateway.pid)
        out["gateway_runq_ms"] = round((wait - before[1][0]) * per_call, 3)
        out["gateway_wakeups"] = round((slices - before[1][1]) * per_call / 1000, 1)
        out["gateway_oncpu_ms"] = round((ran - before[1][2]) * per_call, 3)
    return out


def inside(calls: list[tuple[float, float]] | None) -> dict[str, float]:
    """Medians and p99 (ms) of the gateway's own spans of a call (GATEWAY_BENCH_TRACE)."""
    if not calls:
        return {}
    out: dict[str, float] = {}
    for index, name in ((0, "in"), (1, "out")):
        values = sorted(call[index] for call in calls)
        out[f"{name}_p50_ms"] = round(values[len(values) // 2] * 1000, 3)
        out[f"{name}_p99_ms"] = round(values[min(len(values) - 1, int(len(values) * 0.99))] * 1000, 3)
    return out


def throughput(paths: list[Path_]) -> dict[str, Any]:
    """One stream reads a 1 MiB answer (16,384 SSE frames) whole, 3 times per run, runs
    interleaved: MiB/s, and the gateway's CPU per MiB."""
    out: dict[str, Any] = {}
    body = write_body("LONG")
    for name, url, key, gateway in paths * 2:
        before = cpu_s(gateway.pid) if gateway else 0.0
        start = time.perf_counter()
        row = clients(url, key, streams=1, procs=1, calls=3, warmup=1, body=body)
        mib = row["bytes"] / 2**20
        out.setdefault(f"{name}_MiB_s", []).append(round(mib / (time.perf_counter() - start), 3))
        if gateway:
            out.setdefault(f"{name}_cpu_s_per_MiB", []).append(round((cpu_s(gateway.pid) - before) / mib, 4))
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


def make_warm_home() -> Path:
    """A DSH_HOME that one runtime has used for one turn (against a fake model of its own): its
    ``.cache/pkg`` holds the runtime's plugin packages, as any DSH_HOME does after its first run
    (``--dsh-home`` is the user's own and kept), and ``.cache/node-compile-cache`` V8's compiled
    code (``RuntimeSpec.compile_cache``), as it does after its second. The goodput runs of ``GATEWAY_BENCH_HOME=warm``
    start each from a copy of it, made before the timed part."""
    from dsh_orchestra import open_runtime
    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.testing._fake_model import open_fake_model

    root = scratch_file("goodput-warm")
    root.mkdir()
    (root / "home").mkdir()

    async def one_turn() -> None:
        async with open_fake_model() as model:
            spec = RuntimeSpec(dsh_home=root / "home", cwd=root, base_url=model.base_url, api_key="bench-key", env=ENV,
                               compile_cache="on")  # it holds V8's compile cache too, as a home does after two runs
            async with open_runtime(spec, gateway=None) as runtime:
                await runtime.session("warm-up").run("hello")

    trio.run(one_turn)
    return root / "home"


class _OpenAtCall:
    """``auto-call`` (an experiment): the start ramp opens fully at the first model call or item end."""

    def __new__(cls, workers: int) -> Any:
        from dsh_orchestra.batch._ramp import StartRamp

        class Ramp(StartRamp):
            def progress(self) -> None:
                self.open_all()

            def ready(self) -> None:  # a further runtime ready: as before
                StartRamp.progress(self)

        return Ramp(workers)


async def _grow_on_ready_as_before(ramp: Any, runner: Any) -> None:
    from dsh_orchestra.batch._ramp import grow_on_ready

    class Proxy:
        open = property(lambda self: ramp.open)

        def progress(self) -> None:
            ramp.ready()

    await grow_on_ready(Proxy(), runner)  # type: ignore[arg-type]


async def goodput(model_url: str, *, mode: str, rate: float, home: Path | None = None) -> dict[str, Any]:
    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    import dsh_orchestra.batch._runner as runner_module
    from dsh_orchestra.batch._ramp import StartRamp

    import dsh_orchestra.gateway._limiter as limiter_module

    gateway = {"none": None, "auto": GatewayOptions(), "old": GatewayOptions(), "auto-all": GatewayOptions(),
               "auto-herd": GatewayOptions(), "auto-nocc": GatewayOptions(),
               "auto-call": GatewayOptions(), "rate": GatewayOptions(model_rate=rate)}[mode]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if home is None:
            (root / "home").mkdir()
        else:  # a copy of a used home (``make_warm_home``), not timed
            await trio.to_thread.run_sync(partial(shutil.copytree, home, root / "home", symlinks=True))
        dataset = root / "ds.jsonl"
        dataset.write_text("".join(json.dumps({"id": f"i{i}", "prompt": f"question {i}"}) + "\n" for i in range(200)))
        spec = RuntimeSpec(dsh_home=root / "home", cwd=root, base_url=model_url, api_key="bench-key", env=ENV,
                           handshake_timeout=120, compile_cache="off" if mode == "auto-nocc" else "auto")
        options = BatchOptions(runtimes=2, concurrency=64, progress="none", timeout=600, gateway=gateway)
        saved = Gateway.pause
        if mode == "old":
            Gateway.pause = _old_pause  # type: ignore[method-assign]
        saved_learn = limiter_module.AdaptiveLimiter._learn
        if mode == "auto-herd":  # no learned pacing: a retry-after only holds (the gateway before it)
            limiter_module.AdaptiveLimiter._learn = lambda self, ticket, outcome, retry_after: None  # type: ignore[method-assign]
        saved_grow = runner_module.grow_on_ready  # type: ignore[attr-defined]
        if mode == "auto-all":  # every worker at once: the batch before the start ramp
            runner_module.StartRamp = _all_at_once  # type: ignore[assignment,attr-defined]
        elif mode == "auto-call":
            runner_module.StartRamp = _OpenAtCall  # type: ignore[assignment,attr-defined]
            runner_module.grow_on_ready = _grow_on_ready_as_before  # type: ignore[attr-defined]
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
            limiter_module.AdaptiveLimiter._learn = saved_learn  # type: ignore[method-assign]
            runner_module.StartRamp = StartRamp  # type: ignore[attr-defined]
            runner_module.grow_on_ready = saved_grow  # type: ignore[attr-defined]
    answers = summary.ok  # the default script answers each item in one model call
    model = summary.model or {}
    return {"mode": mode, "ok": summary.ok, "failed": summary.error, "wall_s": round(wall, 1),
            "batch_retries": summary.retries, "quota_used_wall": round(answers / (rate * wall), 3),
            "model": model and {k: model[k] for k in ("calls", "upstream_calls", "retries")},
            "passed_back": model and model["calls"] - model["upstream_calls"],
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
    script = scratch_file("long.toml")
    delay = float(os.environ.get("GATEWAY_BENCH_DELAY", "1.0"))
    script.write_text('[[rules]]\nname = "long"\nmatch = "LONG"\nreply = "' + "x" * 2**20 + '"\n'
                      f'[[rules]]\nname = "slow"\nmatch = "SLOW"\ndelay = {delay}\n')
    if "latency" in parts or "throughput" in parts:
        model, url = start_model("--script", str(script))
        paths: list[Path_] = [("direct", url, "k", None)]
        baseline = os.environ.get("GATEWAY_BENCH_BASELINE")  # another version's source tree, run side by side
        try:
            for name, source in (("gateway", None), ("baseline", baseline)):
                if name == "gateway" or source:
                    process, gateway_url, token = start_gateway(url, source=source)
                    paths.append((name, gateway_url, token, process))
            if os.environ.get("GATEWAY_BENCH_FLOOR"):  # a relay that does nothing: what one more process costs
                process, relay_url, key = start_relay(url)
                paths.append(("relay", relay_url, key, process))
            if "latency" in parts:
                print("latency", json.dumps(latency(model, paths)), flush=True)
            if "throughput" in parts:
                print("throughput", json.dumps(throughput(paths)), flush=True)
        finally:
            for *_, running in paths:
                if running is not None:
                    stop(running)
            stop(model)
    if "goodput" in parts:
        goodput_runs()


def goodput_rates() -> list[float]:
    """``GATEWAY_BENCH_RATE``: one quota or several, comma-separated (requests/s; default 20)."""
    return [float(r) for r in os.environ.get("GATEWAY_BENCH_RATE", "20").split(",") if r.strip()]


def goodput_once(rate: float, mode: str, home: Path | None = None) -> dict[str, Any]:
    """One goodput run (a fresh fake model with quota ``rate``) in ``mode``, in a fresh DSH_HOME
    or a copy of ``home``: its row."""
    stats = scratch_file("model-stats.json")
    quota, quota_url = start_model("--rate-limit", f"{rate:g}/s", "--stats", str(stats))
    load_before = os.getloadavg()[0]
    try:
        row = trio.run(partial(goodput, quota_url, mode=mode, rate=rate, home=home))
    finally:
        stop(quota)
    seen = json.loads(stats.read_text())
    span = (seen["last_start_s"] or 0) - (seen["first_start_s"] or 0)
    row = {"rate": rate, "home": "fresh" if home is None else "warm", **row, "load_before": load_before}
    row.update(breakdown(row, seen, rate))
    row["at_model"] = {k: v for k, v in seen.items() if k not in ("starts_s", "monotonic_offset_s")}
    if row.get("model"):
        row["absorbed_429"] = row["model"]["retries"]
    # the bucket starts full (max(1, R) tokens) and refills at R/s: what it made available
    row["quota_used_active"] = round(seen["answered"] / (max(1.0, rate) + rate * span), 3)
    if "startup_s" in row:
        row["startup_share_of_wall"] = round(row["startup_s"] / row["wall_s"], 3)
    return row


GOODPUT_MEDIANS = ("failed", "passed_back", "absorbed_429", "wall_s", "startup_s", "active_s", "tail_s", "quota_used_wall", "quota_used_active",
                   "startup_share_of_wall", "cpu_s_this_process", "load")


def goodput_runs() -> None:
    """``GATEWAY_BENCH_ROUNDS`` rounds (default 1); in each, every rate of ``GATEWAY_BENCH_RATE``
    and every mode of ``GATEWAY_BENCH_MODES`` one after the other (so the modes of a rate run
    side by side, interleaved); then the medians per rate and mode (``goodput-median`` lines)."""
    rounds = int(os.environ.get("GATEWAY_BENCH_ROUNDS", "1"))
    modes = os.environ.get("GATEWAY_BENCH_MODES", "auto,rate,none").split(",")
    homes = os.environ.get("GATEWAY_BENCH_HOME", "fresh").split(",")  # fresh, warm or both
    warm = make_warm_home() if "warm" in homes else None
    rows: dict[tuple[float, str, str], list[dict[str, Any]]] = {}
    try:
        for number in range(1, rounds + 1):
            for rate in goodput_rates():
                for home in homes:
                    for mode in modes:
                        row = goodput_once(rate, mode, warm if home == "warm" else None)
                        row["round"] = number
                        rows.setdefault((rate, home, mode), []).append(row)
                        print("goodput", json.dumps(row), flush=True)
    finally:
        if warm is not None:
            shutil.rmtree(warm.parent)
    if rounds > 1:
        for (rate, home, mode), runs in rows.items():
            medians = {key: round(statistics.median(r[key] for r in runs), 3) for key in GOODPUT_MEDIANS
                       if all(key in r for r in runs)}
            print("goodput-median", json.dumps({"rate": rate, "home": home, "mode": mode, "rounds": len(runs), **medians,
                                                "failed_each": [r["failed"] for r in runs],
                                                "load_range": [min(r["load_before"] for r in runs),
                                                               max(r["load"] for r in runs)]}), flush=True)

if __name__ == "__main__":
    main()

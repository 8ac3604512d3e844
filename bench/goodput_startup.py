"""Where the goodput run's wall time goes before the first model call: a timeline.

The run of ``bench/gateway.py goodput`` (200 items, 2 real runtimes, 64 in flight, a fake
model with a quota of ``GATEWAY_BENCH_RATE`` requests a second), once, with timestamps from
hooks wrapped around the orchestrator's own steps (monkeypatched here, nothing changes in the
package): the gateway's start, each runtime's spawn (the bubblewrap probe included),
``initialize`` sent and answered, the pool's first runtime ready, the first ``session/prompt``
and ``session/wait`` of each runtime and its last, the gateway's first request from a runtime, its
first call's place asked of the limiter and its first upstream request sent and answered, the
model's first and last answer (the fake model's clock moved onto ``time.monotonic``), the pool's
close: each runtime's ``shutdown`` sent and answered, and its reap (stdin closed, process exited).
Every time is in seconds from the call of ``run_batch``.

    python bench/goodput_startup.py [auto|auto-all|rate|none] [auto|bwrap|none]

``auto-all``: the gateway's defaults with every worker started at once (the batch before its
start ramp). The second argument is ``--sandbox`` (default: the spec's, ``auto``).
``GOODPUT_STARTUP_HOME=warm``: the run's DSH_HOME is a copy of one a runtime has used once
(``bench/gateway.py``'s ``make_warm_home``), not a new empty one.
``GOODPUT_STARTUP_PATCHES=a.yml,b.yml``: ``--patch`` overlays for the runtimes (``RuntimeSpec.patches``).
``GOODPUT_STARTUP_COMPILE_CACHE=auto|on|off``: ``RuntimeSpec.compile_cache`` (default ``auto``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import trio

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import dsh_orchestra.batch._local as local_module  # noqa: E402
import dsh_orchestra.batch._runner as runner_module  # noqa: E402
import dsh_orchestra.gateway._server as server_module  # noqa: E402
import dsh_orchestra.runtime._actor as actor_module  # noqa: E402
import dsh_orchestra.transport._connection as connection_module  # noqa: E402
from dsh_orchestra.batch import BatchOptions, run_batch  # noqa: E402
from dsh_orchestra.batch._ramp import StartRamp  # noqa: E402
from dsh_orchestra.gateway import GatewayOptions  # noqa: E402
from dsh_orchestra.gateway._upstream import UpstreamClient  # noqa: E402
from dsh_orchestra.runtime import RuntimeSpec  # noqa: E402

from _common import scratch_file  # noqa: E402
from gateway import ENV, make_warm_home, start_model, stop  # noqa: E402

ORIGIN: list[float] = []
EVENTS: list[tuple[float, str]] = []
WARM: list[Path] = []  # GOODPUT_STARTUP_HOME=warm: a DSH_HOME a runtime has used once (copied for the run)
LAST: dict[str, float] = {}  # each runtime's last session/wait answered (its last item's end)


def mark(what: str) -> None:
    EVENTS.append((time.monotonic() - ORIGIN[0], what))


def hook() -> None:
    """Wrap the orchestrator's start-up steps with ``mark``."""
    gateway_for = runner_module.gateway_for  # type: ignore[attr-defined]

    @asynccontextmanager
    async def timed_gateway(*args: Any) -> AsyncIterator[Any]:
        mark("gateway: starting")
        async with gateway_for(*args) as value:
            mark("gateway: listening")
            yield value

    runner_module.gateway_for = timed_gateway  # type: ignore[attr-defined,assignment]
    pool_open = local_module.PoolExecutor.open

    @asynccontextmanager
    async def timed_pool(self: Any, *args: Any) -> AsyncIterator[Any]:
        mark("pool: opening")
        async with pool_open(self, *args) as value:
            mark("pool: first runtime ready, items may start")
            yield value
            mark("pool: closing (every item done)")
        mark("pool: closed (every runtime reaped)")

    local_module.PoolExecutor.open = timed_pool  # type: ignore[method-assign,assignment]
    spawn = actor_module.RuntimeActor._spawn

    async def timed_spawn(self: Any, stack: Any) -> Any:
        mark(f"{self.name}: spawning (sandbox set-up first)")
        stream = await spawn(self, stack)
        mark(f"{self.name}: process started")
        return stream

    actor_module.RuntimeActor._spawn = timed_spawn  # type: ignore[method-assign]
    probe = actor_module.bwrap_problem  # type: ignore[attr-defined]

    def timed_probe() -> str | None:
        started = time.monotonic()
        problem = probe()
        EVENTS.append((started - ORIGIN[0], f"bubblewrap probe ({time.monotonic() - started:.3f} s)"))
        return problem

    actor_module.bwrap_problem = timed_probe  # type: ignore[attr-defined]
    request = connection_module.Connection.request
    seen: set[tuple[str, str]] = set()

    async def timed_request(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        first = (self.name, method) not in seen and method in ("initialize", "session/prompt", "session/wait", "shutdown")
        seen.add((self.name, method))
        if first:
            mark(f"{self.name}: first {method} sent")
        result = await request(self, method, *args, **kwargs)
        if first:
            mark(f"{self.name}: first {method} answered")
        if method == "session/wait":
            LAST[self.name] = time.monotonic() - ORIGIN[0]
        return result

    connection_module.Connection.request = timed_request  # type: ignore[method-assign]
    respond = server_module.Gateway._respond
    calls = [0]

    async def timed_respond(self: Any, *args: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            mark("gateway: first request from a runtime")
        await respond(self, *args)

    server_module.Gateway._respond = timed_respond  # type: ignore[method-assign,assignment]
    attempt = server_module._Call._attempt
    tries = [0]

    async def timed_attempt(self: Any, **kwargs: Any) -> Any:
        tries[0] += 1
        if tries[0] == 1:
            mark("gateway: first call's place asked of the limiter")
        return await attempt(self, **kwargs)

    server_module._Call._attempt = timed_attempt  # type: ignore[method-assign]
    send = UpstreamClient.post
    sends = [0]

    async def timed_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        sends[0] += 1
        first = sends[0] == 1
        if first:
            mark("gateway: first upstream request sent")
        response = await send(self, *args, **kwargs)
        if first:
            mark("gateway: first upstream response headers")
        return response

    UpstreamClient.post = timed_send  # type: ignore[method-assign]
    reap = actor_module.RuntimeActor._reap

    async def timed_reap(self: Any, process: Any) -> None:
        mark(f"{self.name}: reap: stdin closed next")
        await reap(self, process)
        mark(f"{self.name}: reaped (exit status {process.returncode})")

    actor_module.RuntimeActor._reap = timed_reap  # type: ignore[method-assign]


def _all_at_once(workers: int) -> StartRamp:
    return StartRamp(workers, first=workers)


async def one_run(url: str, mode: str, rate: float, sandbox: str | None) -> Any:
    gateway = {"none": None, "auto": GatewayOptions(), "auto-all": GatewayOptions(),
               "rate": GatewayOptions(model_rate=rate)}[mode]
    if mode == "auto-all":
        runner_module.StartRamp = _all_at_once  # type: ignore[attr-defined,assignment]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if WARM:
            shutil.copytree(WARM[0], root / "home", symlinks=True)  # noqa: ASYNC240 - before the timed part
        else:
            (root / "home").mkdir()
        dataset = root / "ds.jsonl"
        dataset.write_text("".join(json.dumps({"id": f"i{i}", "prompt": f"question {i}"}) + "\n" for i in range(200)))
        patches = [p for p in os.environ.get("GOODPUT_STARTUP_PATCHES", "").split(",") if p]
        spec = RuntimeSpec(dsh_home=root / "home", cwd=root, base_url=url, api_key="bench-key", env=ENV,
                           handshake_timeout=120, patches=tuple(patches),
                           compile_cache=os.environ.get("GOODPUT_STARTUP_COMPILE_CACHE", "auto"))
        options = BatchOptions(runtimes=2, concurrency=64, progress="none", timeout=600, gateway=gateway, sandbox=sandbox)
        ORIGIN.append(time.monotonic())
        summary = await run_batch(dataset, root / "out.jsonl", spec, options)
        mark("run_batch returned")
    return summary


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "auto"
    sandbox = sys.argv[2] if len(sys.argv) > 2 else None
    rate = float(os.environ.get("GATEWAY_BENCH_RATE", "20"))
    if os.environ.get("GOODPUT_STARTUP_HOME", "fresh") == "warm":
        WARM.append(make_warm_home())
    hook()
    stats = scratch_file("model-stats.json")
    model, url = start_model("--rate-limit", f"{rate}/s", "--stats", str(stats))
    try:
        summary = trio.run(one_run, url, mode, rate, sandbox)
    finally:
        stop(model)
        if WARM:
            shutil.rmtree(WARM[0].parent)
    seen = json.loads(stats.read_text())
    offset = seen["monotonic_offset_s"] - ORIGIN[0]
    if seen["starts_s"]:
        EVENTS.append((seen["starts_s"][0] + offset, "model: first request answered"))
        EVENTS.append((seen["last_end_s"] + offset, "model: last answer ended"))
    EVENTS.extend((at, f"{name}: last session/wait answered (its last item ended)") for name, at in LAST.items())
    print(json.dumps({"mode": mode, "home": "warm" if WARM else "fresh", "sandbox": sandbox or "auto",
                      "compile_cache": os.environ.get("GOODPUT_STARTUP_COMPILE_CACHE", "auto"), "ok": summary.ok, "failed": summary.error,
                      "load": os.getloadavg()[0]}))
    for at, what in sorted(EVENTS):
        print(f"{at:8.3f}  {what}")


if __name__ == "__main__":
    main()

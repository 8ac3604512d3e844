"""Real runtime: start-to-ready, sequential turns, concurrent sessions, client CPU per turn.

Both clients drive the same REAL bundled runtime (``deepseek-harness-sdk-runtime``
0.2.1-rc.2) against the same scripted fake model, which runs in its own process (so that
neither client's CPU figure includes it) on 127.0.0.1. Every trial gets a fresh DSH_HOME and
workspace, telemetry disabled. One trial per invocation, printed as one JSON line::

    python bench/runtime_real.py --client ours

Clients: ``ours`` (``open_runtime`` + ``Session.run``: prompt, ``session/wait``, collect) and
``official`` (``deepseek_harness.DeepSeekHarness(...)``, ``.start()``, ``.start_session().run``;
one thread per session when concurrent). ``raw`` is an analysis baseline, not a client: our
runtime actor and connection with only ``session/prompt`` + ``session/wait`` requests per turn
(no session layer, nothing collected), i.e. the cost of trio and the transport alone.

A trial measures, in order, on one runtime:

1. ``start_s``: start to ready (spawn + ``initialize`` answered): ``open_runtime`` entered /
   ``DeepSeekHarness.start()`` returned;
2. one warm-up turn (not counted);
3. sequential: ``--turns`` (20) one-step turns on one session, each timed on its own;
4. concurrent: ``--turns`` turns across ``--sessions`` (4) sessions at once (each session runs
   its share one after the other), timed as a whole: ``prompts_per_s`` = turns / wall.

Client CPU is ``time.process_time()`` of this process (all threads; the runtime child and the
fake model are other processes and not counted), over each phase, divided by its turns.
Every turn is checked: ``completed`` and the fake model's reply.

``--runs N`` runs N trials of each client in fresh processes, alternating, and prints one JSON
line per trial plus a summary line with medians and ratios (ours / official).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
CLIENTS = ("ours", "official", "raw")
DEFAULT_CLIENTS = "ours,official"
REPLY = "Hello from the fake model"
PROMPT = "Reply with one short sentence."
ENV = {"DSH_TELEMETRY_MODE": "DISABLED"}
API_KEY = "bench-placeholder-key"


@contextmanager
def fake_model() -> Iterator[str]:
    """The scripted fake model (default script) in its own process; yields its base URL."""
    code = "import sys; from dsh_orchestra.testing._fake_model import fake_model_main; sys.exit(fake_model_main(0, None))"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO_DIR)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"fake model did not start: {line!r}")
        yield line.removeprefix("listening on ")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))],
            "mean": statistics.fmean(ordered), "min": ordered[0], "max": ordered[-1]}


def check(final: str, finish: str | None) -> None:
    if final != REPLY or finish != "completed":
        raise AssertionError(f"unexpected turn: {final!r} {finish!r}")


def run_ours(base_url: str, turns: int, sessions: int, *, raw: bool = False) -> dict[str, Any]:
    import trio

    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.session import Session, open_runtime

    from dsh_orchestra.protocol import SESSION_PROMPT, SESSION_WAIT, EmptyResult, PromptResult

    async def raw_turn(session: Session) -> None:
        """The raw baseline: the two requests of a turn, nothing collected."""
        connection = session.runtime.connection
        await connection.request(SESSION_PROMPT, {"sessionId": session.id, "contentBlocks": [
            {"type": "text", "text": PROMPT}]}, PromptResult)
        await connection.request(SESSION_WAIT, {"sessionId": session.id}, EmptyResult)

    async def turn(session: Session) -> None:
        if raw:
            await raw_turn(session)
        else:
            result = await session.run(PROMPT)
            check(result.final_response, result.finish_reason)

    async def main(home: str, workspace: str) -> dict[str, Any]:
        spec = RuntimeSpec(dsh_home=home, cwd=workspace, base_url=base_url, api_key=API_KEY, env=ENV)
        out: dict[str, Any] = {}
        started = time.perf_counter()
        async with open_runtime(spec) as runtime:
            out["start_s"] = time.perf_counter() - started
            await turn(runtime.session())  # warm-up

            session = runtime.session()
            samples: list[float] = []
            cpu = time.process_time()
            for _ in range(turns):
                began = time.perf_counter()
                await turn(session)
                samples.append(time.perf_counter() - began)
            out["seq_cpu_ms_per_turn"] = (time.process_time() - cpu) * 1000 / turns
            out["seq_turn_ms"] = summary([s * 1000 for s in samples])

            async def share(session: Session, count: int) -> None:
                for _ in range(count):
                    await turn(session)

            shares = [turns // sessions + (1 if i < turns % sessions else 0) for i in range(sessions)]
            cpu, began = time.process_time(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for count in shares:
                    nursery.start_soon(share, runtime.session(), count)
            wall = time.perf_counter() - began
            out["conc_cpu_ms_per_turn"] = (time.process_time() - cpu) * 1000 / turns
            out["conc_wall_s"], out["conc_prompts_per_s"] = wall, turns / wall
        return out

    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as workspace:
        return trio.run(main, home, workspace)


def run_official(base_url: str, turns: int, sessions: int) -> dict[str, Any]:
    from deepseek_harness import DeepSeekHarness

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as workspace:
        harness = DeepSeekHarness(dsh_home=home, cwd=workspace, base_url=base_url, api_key=API_KEY, env=dict(ENV))
        started = time.perf_counter()
        harness.start()
        out["start_s"] = time.perf_counter() - started
        try:
            warm = harness.start_session().run(PROMPT)
            check(warm.final_response, warm.finish_reason)

            session = harness.start_session()
            samples: list[float] = []
            cpu = time.process_time()
            for _ in range(turns):
                began = time.perf_counter()
                result = session.run(PROMPT)
                samples.append(time.perf_counter() - began)
                check(result.final_response, result.finish_reason)
            out["seq_cpu_ms_per_turn"] = (time.process_time() - cpu) * 1000 / turns
            out["seq_turn_ms"] = summary([s * 1000 for s in samples])

            errors: list[BaseException] = []

            def share(count: int) -> None:
                try:
                    mine = harness.start_session()
                    for _ in range(count):
                        result = mine.run(PROMPT)
                        check(result.final_response, result.finish_reason)
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)

            shares = [turns // sessions + (1 if i < turns % sessions else 0) for i in range(sessions)]
            cpu, began = time.process_time(), time.perf_counter()
            threads = [threading.Thread(target=share, args=(count,)) for count in shares]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - began
            if errors:
                raise errors[0]
            out["conc_cpu_ms_per_turn"] = (time.process_time() - cpu) * 1000 / turns
            out["conc_wall_s"], out["conc_prompts_per_s"] = wall, turns / wall
        finally:
            harness.close()
    return out


def trial(client: str, turns: int, sessions: int) -> dict[str, Any]:
    with fake_model() as base_url:
        if client == "official":
            figures = run_official(base_url, turns, sessions)
        else:
            figures = run_ours(base_url, turns, sessions, raw=client == "raw")
    return {"workload": "runtime-real", "client": client, "turns": turns, "sessions": sessions, **figures}


def machine() -> dict[str, Any]:
    sys.path.insert(0, str(BENCH_DIR))
    from _common import machine as facts

    return {**facts(), "loadavg_1m": os.getloadavg()[0]}


def many(runs: int, turns: int, sessions: int, clients: list[str]) -> None:
    print(json.dumps({"workload": "runtime-real", "machine": machine()}), flush=True)
    rows: dict[str, list[dict[str, Any]]] = {client: [] for client in clients}
    for _ in range(runs):
        for client in clients:
            done = subprocess.run([sys.executable, __file__, "--client", client, "--turns", str(turns),
                                   "--sessions", str(sessions)], capture_output=True, text=True, check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows[client].append(row)
            print(json.dumps(row), flush=True)
    keys = {"start_s": lambda r: r["start_s"], "seq_turn_ms": lambda r: r["seq_turn_ms"]["median"],
            "seq_cpu_ms_per_turn": lambda r: r["seq_cpu_ms_per_turn"],
            "conc_prompts_per_s": lambda r: r["conc_prompts_per_s"],
            "conc_cpu_ms_per_turn": lambda r: r["conc_cpu_ms_per_turn"]}
    result: dict[str, Any] = {"workload": "runtime-real", "summary": True, "runs": runs,
                              "loadavg_1m_end": os.getloadavg()[0]}
    for key, get in keys.items():
        for client in clients:
            result[f"{client}_{key}_median"] = statistics.median(get(r) for r in rows[client])
        if "ours" in rows and "official" in rows:
            result[f"ratio_{key}"] = result[f"ours_{key}_median"] / result[f"official_{key}_median"]
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--runs", type=int, help="run N trials of each client in fresh processes")
    parser.add_argument("--clients", default=DEFAULT_CLIENTS, help="with --runs: comma-separated clients")
    args = parser.parse_args()
    if args.runs:
        many(args.runs, args.turns, args.sessions, args.clients.split(","))
    elif args.client:
        print(json.dumps(trial(args.client, args.turns, args.sessions)))
    else:
        parser.error("give --client or --runs")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_DIR))
    main()

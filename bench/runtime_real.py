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

Two floor clients speak JSON-RPC to the same runtime (same argv, environment, sessions and
turns) with no library of ours, to measure what a turn costs any client of one design:
``trio-min`` (one trio task reads the pipe: ``wait_readable`` + ``os.read``, ``orjson``; per turn
``session/prompt`` then ``session/wait``, a ``trio.Event`` per request; nothing else) and
``thread-min`` (the same requests from trio tasks, but a blocking reader thread reads and
decodes every frame and wakes trio, via ``TrioToken.run_sync_soon``, only for a read that
completed a request). They also report frames and reads per turn.

A trial measures, in order, on one runtime:

1. ``start_s``: start to ready (spawn + ``initialize`` answered): ``open_runtime`` entered /
   ``DeepSeekHarness.start()`` returned;
2. one warm-up turn (not counted);
3. sequential: ``--turns`` (20) one-step turns on one session, each timed on its own;
4. concurrent: ``--turns`` turns across ``--sessions`` (4) sessions at once (each session runs
   its share one after the other), timed as a whole: ``prompts_per_s`` = turns / wall.

Client CPU is ``time.process_time()`` of this process (all threads; the runtime child and the
fake model are other processes and not counted), over each phase, divided by its turns;
``*_switches_per_turn`` are the process's voluntary context switches over the phase
(``getrusage``: how often a thread blocked, i.e. the wake-ups that followed).
Every turn is checked: ``completed`` and the fake model's reply.

``--runs N`` runs N trials of each client in fresh processes, alternating, and prints one JSON
line per trial plus a summary line with medians and ratios (ours / official).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
CLIENTS = ("ours", "official", "raw", "trio-min", "thread-min")
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


class Meter:
    """Client CPU over a phase: ``time.process_time()`` of this process (all threads), and
    its voluntary context switches (``getrusage(RUSAGE_SELF).ru_nvcsw``: each time a thread of
    this process blocked with nothing to do, i.e. the wake-ups that followed)."""

    def __init__(self) -> None:
        self.cpu, self.switches = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw

    def per_turn(self, phase: str, turns: int) -> dict[str, float]:
        cpu, switches = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        return {f"{phase}_cpu_ms_per_turn": (cpu - self.cpu) * 1000 / turns,
                f"{phase}_switches_per_turn": (switches - self.switches) / turns}


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
            meter = Meter()
            for _ in range(turns):
                began = time.perf_counter()
                await turn(session)
                samples.append(time.perf_counter() - began)
            out.update(meter.per_turn("seq", turns))
            out["seq_turn_ms"] = summary([s * 1000 for s in samples])

            async def share(session: Session, count: int) -> None:
                for _ in range(count):
                    await turn(session)

            shares = [turns // sessions + (1 if i < turns % sessions else 0) for i in range(sessions)]
            meter, began = Meter(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for count in shares:
                    nursery.start_soon(share, runtime.session(), count)
            wall = time.perf_counter() - began
            out.update(meter.per_turn("conc", turns))
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
            meter = Meter()
            for _ in range(turns):
                began = time.perf_counter()
                result = session.run(PROMPT)
                samples.append(time.perf_counter() - began)
                check(result.final_response, result.finish_reason)
            out.update(meter.per_turn("seq", turns))
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
            meter, began = Meter(), time.perf_counter()
            threads = [threading.Thread(target=share, args=(count,)) for count in shares]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - began
            if errors:
                raise errors[0]
            out.update(meter.per_turn("conc", turns))
            out["conc_wall_s"], out["conc_prompts_per_s"] = wall, turns / wall
        finally:
            harness.close()
    return out


class _MinClient:
    """The floor clients' shared part: the bundled runtime spawned with the same argv and
    environment as the others, requests written with ``orjson``, a ``trio.Event`` per request.
    How replies arrive is the subclass's (``trio-min``: one trio task; ``thread-min``: a
    blocking reader thread). Nothing is collected; frames and reads are counted."""

    def __init__(self, base_url: str, home: str, workspace: str) -> None:
        from deepseek_harness_runtime import resolve_bundled_launch_args

        env = {**os.environ, **ENV, "DSH_HOME": home, "DEEPSEEK_BASE_URL": base_url, "DEEPSEEK_API_KEY": API_KEY}
        argv = [*resolve_bundled_launch_args(), "--profile", "sdk"]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, cwd=workspace, env=env)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin.fileno(), self.process.stdout.fileno()
        self.workspace = workspace
        self.waiting: dict[int, tuple[Any, list[Any]]] = {}  # id -> (trio.Event, [frame])
        self.next_id = 0
        self.frames = self.reads = 0

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        import orjson
        import trio

        self.next_id += 1
        ident = self.next_id
        event, box = trio.Event(), []
        self.waiting[ident] = (event, box)
        data = orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}) + b"\n"
        while data:  # the pipe is non-blocking in trio-min; a frame this small fits at once
            try:
                data = data[os.write(self.stdin, data):]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.stdin)
        await event.wait()
        frame = box[0]
        if "error" in frame:
            raise RuntimeError(f"{method}: {frame['error']}")
        return frame["result"]

    def dispatch(self, chunk: bytes, rest: bytes, done: list[Any]) -> bytes:
        """Decode the whole lines of ``rest + chunk``; replies' events go to ``done``."""
        import orjson

        self.reads += 1
        lines = (rest + chunk).split(b"\n")
        for line in lines[:-1]:
            if not line:
                continue
            frame = orjson.loads(line)
            self.frames += 1
            if "method" not in frame:
                waiter = self.waiting.pop(frame["id"], None)
                if waiter is not None:
                    waiter[1].append(frame)
                    done.append(waiter[0])
        return lines[-1]

    def lost(self) -> list[Any]:
        """End of the runtime's stdout: fail every waiting request (their events to set)."""
        events = []
        for event, box in self.waiting.values():
            box.append({"error": "the runtime closed its stdout"})
            events.append(event)
        self.waiting.clear()
        return events

    async def turn(self, session_id: str) -> None:
        await self.request("session/prompt", {"sessionId": session_id, "contentBlocks": [
            {"type": "text", "text": PROMPT}]})
        await self.request("session/wait", {"sessionId": session_id})

    async def session(self) -> str:
        import uuid

        return f"session-{uuid.uuid4().hex}"

    async def handshake(self) -> None:
        await self.request("initialize", {"cwd": self.workspace, "provider": "deepseek-official",
                                          "model": "deepseek-v4-flash"})

    async def shutdown(self) -> None:
        await self.request("shutdown", {})

    def reap(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _TrioMin(_MinClient):
    """``trio-min``: one trio task reads the pipe (``wait_readable`` + ``os.read``), decodes
    every frame and sets the event of each reply."""

    async def reader(self) -> None:
        import trio

        os.set_blocking(self.stdout, False)
        rest, done = b"", []
        while True:
            await trio.lowlevel.wait_readable(self.stdout)
            try:
                chunk = os.read(self.stdout, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                for event in self.lost():
                    event.set()
                return
            rest = self.dispatch(chunk, rest, done)
            for event in done:
                event.set()
            done.clear()

    def start(self, nursery: Any) -> None:
        os.set_blocking(self.stdin, False)
        nursery.start_soon(self.reader)


class _ThreadMin(_MinClient):
    """``thread-min``: a blocking reader thread decodes every frame and wakes trio once per
    read that completed a request (``TrioToken.run_sync_soon``); notifications never wake it."""

    def start(self, nursery: Any) -> None:
        import trio

        token = trio.lowlevel.current_trio_token()

        def wake(events: list[Any]) -> None:
            for event in events:
                event.set()

        def loop() -> None:
            rest = b""
            while chunk := os.read(self.stdout, 65536):
                done: list[Any] = []
                rest = self.dispatch(chunk, rest, done)
                if done:
                    token.run_sync_soon(wake, done)
            try:
                token.run_sync_soon(lambda: wake(self.lost()))
            except trio.RunFinishedError:
                pass  # EOF after trio.run ended (the normal end: shutdown, then reap)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()


def run_min(base_url: str, turns: int, sessions: int, *, thread: bool) -> dict[str, Any]:
    """The floor clients: JSON-RPC to the same runtime, timed as the others, no library of ours."""
    import trio

    async def main(home: str, workspace: str) -> dict[str, Any]:
        client = (_ThreadMin if thread else _TrioMin)(base_url, home, workspace)
        out: dict[str, Any] = {}
        try:
            async with trio.open_nursery() as nursery:
                started = time.perf_counter()
                client.start(nursery)
                with trio.fail_after(120):  # a runtime that never answers fails the trial
                    await client.handshake()
                out["start_s"] = time.perf_counter() - started
                await client.turn(await client.session())  # warm-up

                session = await client.session()
                samples: list[float] = []
                frames, reads, meter = client.frames, client.reads, Meter()
                for _ in range(turns):
                    began = time.perf_counter()
                    await client.turn(session)
                    samples.append(time.perf_counter() - began)
                out.update(meter.per_turn("seq", turns))
                out["seq_turn_ms"] = summary([s * 1000 for s in samples])
                out["seq_frames_per_turn"] = (client.frames - frames) / turns
                out["seq_reads_per_turn"] = (client.reads - reads) / turns

                async def share(count: int) -> None:
                    mine = await client.session()
                    for _ in range(count):
                        await client.turn(mine)

                shares = [turns // sessions + (1 if i < turns % sessions else 0) for i in range(sessions)]
                frames, reads = client.frames, client.reads
                meter, began = Meter(), time.perf_counter()
                async with trio.open_nursery() as inner:
                    for count in shares:
                        inner.start_soon(share, count)
                wall = time.perf_counter() - began
                out.update(meter.per_turn("conc", turns))
                out["conc_wall_s"], out["conc_prompts_per_s"] = wall, turns / wall
                out["conc_frames_per_turn"] = (client.frames - frames) / turns
                out["conc_reads_per_turn"] = (client.reads - reads) / turns
                await client.shutdown()
                nursery.cancel_scope.cancel()  # the trio-min reader; a thread ends at EOF
        finally:
            client.reap()
        return out

    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as workspace:
        return trio.run(main, home, workspace)


def trial(client: str, turns: int, sessions: int) -> dict[str, Any]:
    with fake_model() as base_url:
        if client == "official":
            figures = run_official(base_url, turns, sessions)
        elif client in ("trio-min", "thread-min"):
            figures = run_min(base_url, turns, sessions, thread=client == "thread-min")
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

"""Client memory per session in flight: N sessions on ONE runtime connection (the simulator).

All N sessions call ``session.run(prompt)`` at once on one simulator process whose model
answers after ``--delay`` seconds, so every turn is in flight together: its prompt answered,
its ``session/wait`` pending, its first events collected. When all N are in flight the client
process's RSS (psutil) and, in a separate trial, its traced Python allocations
(``tracemalloc``) are read; minus the same figures just before the first prompt, minus the
memory of the events the N turn collectors hold by then (their compact JSON bytes objects,
``sys.getsizeof``), divided by N:
what one session in flight costs the client beyond its events. The runs are then cancelled
(the sessions are abandoned) and the runtime closed. One trial per invocation::

    python bench/client_scale.py --sessions 10000
    python bench/client_scale.py --sessions 10000 --tracemalloc
    python bench/client_scale.py --sessions 10000 --client raw
    python bench/client_scale.py --sessions 10000 --client many      # one task, a turn group
    python bench/client_scale.py --sessions 10000 --client trio-task     # the floor: parked tasks

``--client many`` keeps the N turns in flight without a task each: one task starts them all
in one ``runtime.turns()`` group (``turns.start(session, prompt)``) and iterates it, the
connection's reader settling each turn through a request callback.

``--client raw`` is the floor of any client built on trio and our transport: one task per
session sending ``session/prompt`` then ``session/wait`` on the runtime's connection, one sink
keeping each session's events as compact JSON, no session layer. ``--client trio-task`` and
``trio-event`` need no runtime: N bare trio tasks parked at once (the memory of a task per
session, whatever it runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dsh_orchestra import RuntimeSpec, open_runtime  # noqa: E402

SCENARIO = '[[rules]]\nname = "slow"\nreply = "done"\ndelay = {delay}\n'


RAW: dict[str, list[bytes]] = {}


def held_event_bytes(runtime: Any) -> tuple[int, int]:
    """(sessions with a started collector, memory of the events their collectors hold)."""
    if RAW:
        return len(RAW), sum(sys.getsizeof(line) for lines in RAW.values() for line in lines)
    started = total = 0
    for targets in runtime.router._subscriptions.values():
        for feed in targets if type(targets) is list else (targets,):
            collector = getattr(feed, "_collector", None)
            if collector is None:
                continue
            started += 1
            for lines in (collector._events, collector._prelude or ()):  # the open turn's: in _events
                total += sum(sys.getsizeof(line) for line in lines)
    return started, total


async def raw_run(runtime: Any, session_id: str) -> None:
    import orjson

    from dsh_orchestra.protocol import (
        SESSION_PROMPT, SESSION_WAIT, EmptyResult, PromptParams, PromptResult, SessionIdParams,
    )

    connection = runtime.connection
    await connection.request(SESSION_PROMPT, PromptParams(session_id=session_id, content_blocks=[
        {"type": "text", "text": "hello"}]), PromptResult)  # type: ignore[list-item]
    RAW[session_id] = []
    await connection.request(SESSION_WAIT, SessionIdParams(session_id=session_id), EmptyResult)
    del orjson


async def many_client(runtime: Any, sessions: int) -> None:
    """All ``sessions`` turns in one turn group, started and awaited by this one task."""
    async with runtime.turns() as turns:
        for index in range(sessions):
            await turns.start(runtime.session(f"scale-{index:05d}"), "hello")
        async for _ in turns:
            pass


def raw_sink(notifications: list[Any]) -> None:
    import orjson

    for notification in notifications:
        lines = RAW.get(notification.params.get("sessionId"))
        if lines is not None and notification.method == "session.event":
            lines.append(orjson.dumps(notification.params["event"], option=orjson.OPT_APPEND_NEWLINE)[:-1])


async def trial(sessions: int, delay: float, traced: bool, client: str = "ours") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        script = Path(home) / "scenario.toml"
        script.write_text(SCENARIO.format(delay=delay), encoding="utf-8")
        spec = RuntimeSpec.simulator(script=script, dsh_home=home, cwd=home)
        me = psutil.Process()
        async with open_runtime(spec) as runtime:
            if traced:
                tracemalloc.start()
            rss_before = me.memory_info().rss
            traced_before = tracemalloc.get_traced_memory()[0] if traced else 0
            started = time.perf_counter()
            raw = client == "raw"
            if raw:
                runtime.connection.add_sink(raw_sink)
            async with trio.open_nursery() as nursery:
                if client == "many":
                    nursery.start_soon(many_client, runtime, sessions)
                for index in range(sessions if client != "many" else 0):
                    if raw:
                        nursery.start_soon(raw_run, runtime, f"scale-{index:05d}")
                    else:
                        nursery.start_soon(runtime.session(f"scale-{index:05d}").run, "hello")
                connection = runtime.connection
                while True:  # every prompt answered and every wait pending: all in flight
                    await trio.sleep(0.05)
                    ready, _ = held_event_bytes(runtime)
                    if ready == sessions and connection.statistics().pending_requests == sessions:
                        break
                    if time.perf_counter() - started > delay * 0.9:
                        raise RuntimeError(f"only {ready} of {sessions} in flight before the model answers")
                in_flight_s = time.perf_counter() - started
                await trio.sleep(0.5)  # let the first events of the last turns arrive
                ready, event_bytes = held_event_bytes(runtime)
                rss_peak = me.memory_info().rss
                traced_now = tracemalloc.get_traced_memory()[0] if traced else 0
                nursery.cancel_scope.cancel()
            if traced:
                tracemalloc.stop()
    out: dict[str, Any] = {
        "sessions": sessions, "in_flight_s": in_flight_s, "event_bytes": event_bytes,
        "events_kib_per_session": event_bytes / 1024 / sessions,
        "rss_growth_mib": (rss_peak - rss_before) / 2**20,
        "rss_kib_per_session_beyond_events": (rss_peak - rss_before - event_bytes) / 1024 / sessions,
    }
    if traced:
        out["traced_kib_per_session_beyond_events"] = (traced_now - traced_before - event_bytes) / 1024 / sessions
    return out


async def floor_trial(tasks: int, kind: str) -> dict[str, Any]:
    """The floor of "a task per session": ``tasks`` trio tasks parked at once, no runtime.

    ``trio-task``: each parks in ``wait_task_rescheduled`` (the least a task waiting for a
    reply can hold: its Task, coroutine frames, context); ``trio-event``: each waits on its own
    ``trio.Event`` (a pending request's usual shape). RSS and traced memory per task.
    """
    me = psutil.Process()
    parked = 0
    all_parked = trio.Event()

    async def park_task() -> None:
        nonlocal parked
        parked += 1
        if parked == tasks:
            all_parked.set()
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)

    async def park_event() -> None:
        nonlocal parked
        parked += 1
        if parked == tasks:
            all_parked.set()
        await trio.Event().wait()

    tracemalloc.start()
    rss_before, traced_before = me.memory_info().rss, tracemalloc.get_traced_memory()[0]
    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(park_task if kind == "trio-task" else park_event)
        await all_parked.wait()
        rss, traced = me.memory_info().rss, tracemalloc.get_traced_memory()[0]
        nursery.cancel_scope.cancel()
    tracemalloc.stop()
    return {"sessions": tasks, "rss_kib_per_task": (rss - rss_before) / 1024 / tasks,
            "traced_kib_per_task": (traced - traced_before) / 1024 / tasks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=120.0, help="seconds the model waits (all turns in flight)")
    parser.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations (slower)")
    parser.add_argument("--client", choices=("ours", "raw", "many", "trio-task", "trio-event"), default="ours")
    args = parser.parse_args()
    if args.client.startswith("trio-"):
        out = trio.run(floor_trial, args.sessions, args.client)
        print(json.dumps({"workload": "client-scale", "client": args.client, "load_1m": os.getloadavg()[0], **out}))
        return
    out = trio.run(trial, args.sessions, args.delay, args.tracemalloc, args.client)
    print(json.dumps({"workload": "client-scale", "client": args.client, "load_1m": os.getloadavg()[0], **out}))


if __name__ == "__main__":
    main()

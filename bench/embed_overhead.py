"""The cost of the embedding layers: a turn, and each event of ``session.events()``, through
``dsh_orchestra.aio`` (trio as a guest on asyncio) and ``dsh_orchestra.sync`` (trio in a
thread) against the trio API itself.

    python bench/embed_overhead.py --turns 200 --events 20000 --repeats 5

One simulator process (``RuntimeSpec.simulator``) per API and repeat. Turn: ``--turns``
sequential ``session.run("hi")`` after two warm-up turns; wall and client CPU
(``time.process_time``: this process, every thread, not the simulator) per turn. Events: one
turn whose scenario emits ``--events`` padding events of about 300 bytes, read one by one from
``session.events()`` until ``turn/end``; wall and client CPU per event. Prints one JSON object
(medians over the repeats; ``ratio`` = API / trio).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import trio

from dsh_orchestra import aio, open_runtime, sync
from dsh_orchestra.runtime import RuntimeSpec

SCENARIO = 'default_reply = "ok"\n[[rules]]\nmatch = "PAD"\nreply = "padded"\nevents = {{ count = {count}, size = 300 }}\n'


def spec_in(directory: Path, events: int) -> RuntimeSpec:
    script = directory / "scenario.toml"
    script.write_text(SCENARIO.format(count=events))
    (directory / "home").mkdir()
    return RuntimeSpec.simulator(script=script, dsh_home=directory / "home", cwd=directory)


def is_end(notification: Any) -> bool:
    event = notification.params.get("event")
    return isinstance(event, dict) and event.get("type") == "turn/end"


class Clock:
    """Wall and CPU time of a measured section."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self._wall, time.process_time() - self._cpu


async def async_api(opener: Callable[[RuntimeSpec], Any], spec: RuntimeSpec, turns: int) -> tuple[Clock, Clock, int]:
    """The same turns and events through an async API: trio's ``open_runtime`` or ``aio.open_runtime``."""
    async with opener(spec) as runtime:
        session = runtime.session()
        for _ in range(2):
            await session.run("hi")
        with Clock() as turn_clock:
            for _ in range(turns):
                await session.run("hi")
        count = 0
        with session.events() as events, Clock() as event_clock:
            await session.prompt("PAD")
            async for notification in events:
                count += 1
                if is_end(notification):
                    break
        await session.wait()
    return turn_clock, event_clock, count


def sync_api(spec: RuntimeSpec, turns: int) -> tuple[Clock, Clock, int]:
    with sync.open_runtime(spec) as runtime:
        session = runtime.session()
        for _ in range(2):
            session.run("hi")
        with Clock() as turn_clock:
            for _ in range(turns):
                session.run("hi")
        count = 0
        with session.events() as events, Clock() as event_clock:
            session.prompt("PAD")
            for notification in events:
                count += 1
                if is_end(notification):
                    break
        session.wait()
    return turn_clock, event_clock, count


RUNNERS: dict[str, Callable[[RuntimeSpec, int], tuple[Clock, Clock, int]]] = {
    "trio": lambda spec, turns: trio.run(async_api, open_runtime, spec, turns),
    "aio": lambda spec, turns: asyncio.run(async_api(aio.open_runtime, spec, turns)),
    "sync": sync_api,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in RUNNERS}
    for _ in range(args.repeats):
        for name, runner in RUNNERS.items():  # interleaved: a slower moment of the machine hits each
            with tempfile.TemporaryDirectory() as directory:
                turn, event, count = runner(spec_in(Path(directory), args.events), args.turns)
            found = samples[name]
            for key, value in (("turn_wall_us", turn.wall / args.turns), ("turn_cpu_us", turn.cpu / args.turns),
                               ("event_wall_us", event.wall / count), ("event_cpu_us", event.cpu / count)):
                found.setdefault(key, []).append(value * 1e6)
            found.setdefault("events", []).append(count)
    out: dict[str, Any] = {"turns": args.turns, "padding_events": args.events, "repeats": args.repeats}
    for name, found in samples.items():
        out[name] = {key: round(statistics.median(values), 2) for key, values in found.items()}
    for name in ("aio", "sync"):
        out[name]["ratio"] = {key: round(out[name][key] / out["trio"][key], 3)
                              for key in ("turn_wall_us", "turn_cpu_us", "event_wall_us", "event_cpu_us")}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

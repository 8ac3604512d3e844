"""The CPU one wake-up costs a reader, by design, with frames spaced as the real runtime spaces them.

    python bench/wakeup_floor.py --frames 2000 --interval-ms 3

A writer process sends ``--frames`` lines of 300 bytes, one every ``--interval-ms`` (the real
runtime writes and flushes each notification on its own, 0.2-15 ms apart in a W4 turn), to a
pipe; the reader wakes once per line and reads it. CPU is ``time.process_time()`` of the
reader's process over the whole stream, divided by the lines read:

* ``trio``: one trio task, ``wait_readable`` + ``os.read`` (the least any trio reader does per
  frame: one pass of trio's run loop blocking in epoll);
* ``epoll``: a bare ``select.epoll`` loop + ``os.read`` (no event loop);
* ``thread``: a blocking ``os.read`` in a second thread, the official SDK's design (its reader
  thread), the main thread idle.

The CPU of a wake-up grows with the idle time before it (the caches and branch predictors
are cold after the core ran other work): compare ``--interval-ms 0.5`` and ``10``. Multiplied
by a turn's wake-ups (``docs/benchmarks.md``, W4) it is the floor of a client's CPU per turn.
One JSON line per reader.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Callable

import trio

LINE = b"x" * 299 + b"\n"


def writer(frames: int, interval: float) -> subprocess.Popen[bytes]:
    code = (f"import os, time\nfor _ in range({frames}):\n    os.write(1, {LINE!r}); time.sleep({interval})\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def read_trio(fd: int) -> int:
    async def main() -> int:
        count = 0
        while True:
            await trio.lowlevel.wait_readable(fd)
            if not os.read(fd, 16384):
                return count
            count += 1

    os.set_blocking(fd, False)
    return trio.run(main)  # trio.run's own start and end are a few ms: under 1 % at 2,000 frames


def read_epoll(fd: int) -> int:
    import select

    poller = select.epoll()
    poller.register(fd, select.EPOLLIN)
    count = 0
    os.set_blocking(fd, False)
    while True:
        poller.poll()
        if not os.read(fd, 16384):
            return count
        count += 1


def read_thread(fd: int) -> int:
    counts = [0]

    def loop() -> None:
        while os.read(fd, 16384):
            counts[0] += 1

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()
    return counts[0]


READERS: dict[str, Callable[[int], int]] = {"trio": read_trio, "epoll": read_epoll, "thread": read_thread}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--interval-ms", type=float, default=3.0)
    parser.add_argument("--readers", default=",".join(READERS))
    args = parser.parse_args()
    for name in args.readers.split(","):
        process = writer(args.frames, args.interval_ms / 1000)
        assert process.stdout is not None
        load = os.getloadavg()[0]
        cpu = time.process_time()
        count = READERS[name](process.stdout.fileno())
        cpu = time.process_time() - cpu
        process.wait()
        print(json.dumps({"reader": name, "interval_ms": args.interval_ms, "wakeups": count,
                          "cpu_us_per_wakeup": round(cpu / max(count, 1) * 1e6, 1), "load_1m": load}), flush=True)


if __name__ == "__main__":
    main()

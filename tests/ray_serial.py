"""One Ray cluster at a time among the pytest-xdist workers of one run.

Ray tests start clusters that take seconds and hundreds of MiB each: two at once on a small
machine starve each other. They are marked ``xdist_group("ray")`` (``--dist loadgroup`` sends a
group to one worker), and they also take this lock, because the mark alone does nothing with
pytest 9.2 and pytest-xdist 3.8 (xdist renames ``item._nodeid``, which pytest 9.2 no longer
reads; pytest-dev/pytest-xdist#1386) and nothing under ``--dist load``. The lock is an exclusive ``flock`` on a file in the run's
shared base temporary directory (``popen-gwN``'s parent), held while a module's cluster is up or
a Ray test runs. Without xdist there is one process: nothing to lock. Re-entrant within a process.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

_held = 0


@contextmanager
def ray_serial(factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold the run's Ray lock (wait for it) for the duration of the block."""
    global _held
    if not os.environ.get("PYTEST_XDIST_WORKER") or _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    path = factory.getbasetemp().parent / "ray-serial.lock"
    with open(path, "a", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        _held += 1
        try:
            yield
        finally:
            _held -= 1
            fcntl.flock(file, fcntl.LOCK_UN)

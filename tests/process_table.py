"""Process-table checks shared by the runtime and integration tests (psutil, /proc)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import psutil
import pytest


def group_members(pgid: int) -> list[int]:
    """Pids of every live (or zombie) process whose process group is ``pgid``."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid:
                members.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return members


def assert_gone(pid: int, grace: float = 3.0) -> None:
    """Neither the process (not even as a zombie) nor any member of its process group is left.

    The runtime itself must be reaped already. Grandchildren that outlived it were reparented
    to init, which reaps their corpses a little later: they get ``grace`` seconds.
    """
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        pass
    else:
        pytest.fail(f"pid {pid} is still in the process table ({process.status()})")
    assert not os.path.exists(f"/proc/{pid}"), f"/proc/{pid} still exists"
    deadline = time.monotonic() + grace
    while (members := group_members(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert members == [], f"members of process group {pid} survived: {members}"


def our_children() -> list[psutil.Process]:
    """Every descendant of the test process (running or zombie)."""
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:  # pragma: no cover
        return []


def describe(process: psutil.Process) -> str:
    """A one-line description of ``process`` for failure messages."""
    try:
        return f"pid {process.pid} ({process.status()}): {' '.join(process.cmdline())[:200]}"
    except psutil.Error:
        return f"pid {process.pid} (gone)"


def fail_on_leaks(find: Callable[[], list[psutil.Process]], grace: float, what: str) -> None:
    """Wait up to ``grace`` seconds for ``find()`` to come back empty; otherwise kill and reap
    what it found (so the next test starts clean) and fail the test naming each process."""
    deadline = time.monotonic() + grace
    while (leaked := find()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not leaked:
        return
    report = [describe(p) for p in leaked]
    for process in leaked:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    for process in leaked:
        try:
            if process.ppid() == os.getpid():
                os.waitpid(process.pid, 0)
        except (psutil.Error, ChildProcessError, OSError):
            pass
    pytest.fail(f"the test left {what} behind:\n  " + "\n  ".join(report), pytrace=False)

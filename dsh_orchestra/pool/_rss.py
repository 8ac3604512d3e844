"""Resident memory of a runtime: its process and every descendant, read from /proc (Linux).

The pool reads it when a session ends on a runtime (``max_runtime_rss_mib``): one ``statm``
read per process of the tree and one ``children`` read per thread, no dependency.
"""

from __future__ import annotations

import os

from ..session import Runtime

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MIB = 1024 * 1024


def process_tree_rss(pid: int) -> int | None:
    """Bytes resident in process ``pid`` and its descendants (summed ``statm`` resident pages;
    pages shared between them count once per process). None when ``pid`` is gone or there is
    no /proc (not Linux). Children are found through ``/proc/PID/task/TID/children``; where the
    kernel lacks it, only ``pid`` itself counts."""
    total = 0
    seen: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        resident = _resident_pages(current)
        if resident is None:
            if current == pid:
                return None
            continue  # a child that exited meanwhile
        total += resident * _PAGE
        todo.extend(_children(current))
    return total


def runtime_rss_mib(runtime: Runtime) -> float | None:
    """The runtime's process tree's resident memory in MiB; None for a runtime without a process
    of its own (in-process, ``RuntimeSpec.connect``) or when it cannot be read."""
    pid = runtime.actor.pid
    if pid is None:
        return None
    found = process_tree_rss(pid)
    return None if found is None else found / MIB


def _resident_pages(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as children:
                found.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):
            continue
    return found

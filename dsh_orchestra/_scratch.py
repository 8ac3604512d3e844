"""Scratch directories (temporary DSH_HOMEs, relay directories, judge and compare homes, the
per-item workspaces of a run) that a killed run cannot leave to accumulate.

Each lives in ``<tmp>/dsh-orchestra-<uid>/`` (mode 0700) under a name holding its owner's pid
and, where the system tells it (Linux ``/proc``), the owner's start time:
``<kind>-<pid>-<start>-<random>``. Whoever creates one first removes every directory there
whose owner is no longer running, so a run killed by SIGKILL is cleaned up by the next one. A
live pid with another start time is a reused pid: its directories are removed too. Only our
own directories are removed (the root and each entry must belong to this user; a symlink is
never followed). Imports nothing from dsh_orchestra.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("dsh_orchestra.runtime")

_OWNED = r"-(?P<pid>\d+)-(?:(?P<start>\d+)-)?[a-z0-9_]+"  # after the kind: tempfile's random part has no "-"
_NAME = re.compile(r"[a-z]+" + _OWNED)
_SHORT_BASE = "/tmp"  # for directories that hold a socket (its path must stay short)


def _root_of(base: str) -> Path:
    return Path(base) / f"dsh-orchestra-{os.getuid()}"


def scratch_root(base: str | None = None) -> Path | None:
    """``<base or tmp>/dsh-orchestra-<uid>`` (created 0700), or None when it cannot be trusted
    (not ours, not a directory, a symlink, open to others)."""
    root = _root_of(base if base is not None else tempfile.gettempdir())
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return root


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (state) on, or None when the system does
    not say (no ``/proc``, no such process). ``[1]`` is the parent pid, ``[19]`` the start time."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; split after the last ")".
    return text[text.rfind(")") + 2:].split()


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot: ``/proc/<pid>/stat`` field 22), or
    None when the system does not say."""
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (another user's too: signal 0 is refused to it, not failed)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def _alive(pid: int, started: int | None) -> bool:
    """Whether the owner ``pid`` (started at ``started``, when recorded) still runs."""
    if not pid_alive(pid):
        return False
    if started is None:
        return True
    now = start_time(pid)
    return now is None or now == started  # another start time: the pid was reused


def _sweep_root(root: Path, name: re.Pattern[str] = _NAME) -> list[Path]:
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        match = name.fullmatch(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:  # a symlink or another user's: never followed
            continue
        started = int(match["start"]) if match["start"] is not None else None
        if _alive(int(match["pid"]), started):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)  # fd-based on Linux: does not follow symlinks inside
        removed.append(Path(entry.path))
    return removed


def sweep_scratch(root: Path | None = None) -> list[Path]:
    """Remove the scratch directories whose owner process is gone; return them.

    Without ``root``: the scratch roots of this user (under the temporary directory, and the
    short one under ``/tmp`` used for socket directories, when it exists).
    """
    if root is not None:
        roots = [root]
    else:
        roots = [r for r in {scratch_root(), _existing_short_root()} if r is not None]
    removed = [path for r in roots for path in _sweep_root(r)]
    if removed:
        log.info("removed %d scratch director%s left by runs that died", len(removed), "y" if len(removed) == 1 else "ies")
    return removed


def _existing_short_root() -> Path | None:
    return scratch_root(_SHORT_BASE) if _root_of(_SHORT_BASE).exists() else None


def owned_prefix(kind: str) -> str:
    """``<kind>-<pid>-<start>-`` of this process: the start of a name ``sweep_owned`` knows."""
    pid = os.getpid()
    started = start_time(pid)
    return f"{kind}-{pid}-" if started is None else f"{kind}-{pid}-{started}-"


def _prefix(kind: str) -> str:
    if not re.fullmatch(r"[a-z]+", kind):
        raise ValueError(f"kind must be lower-case letters, not {kind!r}")
    return owned_prefix(kind)


def scratch_dir(kind: str = "home") -> tempfile.TemporaryDirectory[str]:
    """A new temporary directory owned by this process (removed on cleanup, or by the next run
    once this process is gone); sweeps the dead ones first."""
    root = scratch_root()
    sweep_scratch()
    return tempfile.TemporaryDirectory(prefix=_prefix(kind), dir=root)


def scratch_path(kind: str, *, room: int = 0) -> Path:
    """Like ``scratch_dir``, but a plain directory the caller removes (``mkdtemp``); sweeps the
    dead ones first. ``room``: characters the caller will append to the path (a socket's
    name): when the usual root is too long for them, the root under ``/tmp`` is used."""
    root = scratch_root()
    prefix = _prefix(kind)
    if root is not None and room and len(str(root)) + len(prefix) + 10 + room > 100:
        root = scratch_root(_SHORT_BASE)
    sweep_scratch()
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def sweep_owned(directory: Path, kind: str) -> list[Path]:
    """In ``directory`` (outside the scratch roots, e.g. Ray's short temp dirs in /tmp), remove
    the directories named ``owned_prefix(kind)`` + random whose owner is gone; return them.
    The same rules as ``sweep_scratch``: our own directories only, symlinks never followed."""
    removed = _sweep_root(directory, re.compile(re.escape(kind) + _OWNED))
    if removed:
        log.info("removed %d %s director%s left by runs that died", len(removed), kind,
                 "y" if len(removed) == 1 else "ies")
    return removed

"""Scratch directories (temporary DSH_HOMEs) that a killed run cannot leave to accumulate.

Each lives in ``<tmp>/dsh-orchestra-<uid>/`` under a name holding its owner's pid
(``home-<pid>-<random>``). Whoever creates one first removes every directory there whose owner
is no longer running, so a run killed by SIGKILL is cleaned up by the next one. Imports
nothing from dsh_orchestra.
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

_NAME = re.compile(r"[a-z]+-(?P<pid>\d+)-.+")


def scratch_root() -> Path | None:
    """``<tmp>/dsh-orchestra-<uid>`` (created 0700), or None when it cannot be trusted (not
    ours, not a directory, a symlink)."""
    root = Path(tempfile.gettempdir()) / f"dsh-orchestra-{os.getuid()}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return None
    return root


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_scratch(root: Path | None = None) -> list[Path]:
    """Remove the scratch directories whose owner process is gone; return them."""
    root = root if root is not None else scratch_root()
    removed: list[Path] = []
    if root is None:
        return removed
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False) or _alive(int(match["pid"])):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    if removed:
        log.info("removed %d scratch director%s left by runs that died", len(removed), "y" if len(removed) == 1 else "ies")
    return removed


def scratch_dir(kind: str = "home") -> tempfile.TemporaryDirectory[str]:
    """A new temporary directory owned by this process (removed on cleanup, or by the next run
    once this process is gone); sweeps the dead ones first."""
    root = scratch_root()
    sweep_scratch(root)
    return tempfile.TemporaryDirectory(prefix=f"{kind}-{os.getpid()}-", dir=root)

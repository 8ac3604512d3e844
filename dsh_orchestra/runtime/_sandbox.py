"""The sandbox: a runtime process under bubblewrap (``bwrap``), Linux only.

What the runtime sees (``sandbox_argv``): the whole file system read-only (``--ro-bind / /``,
a fresh ``/dev`` and ``/proc``, a PID namespace of its own, every capability dropped); read-write only its working directory (``cwd``), its DSH_HOME and the spec's
``sandbox_writable`` paths (a batch's workspace root); this user's scratch roots
(``<tmp>/dsh-orchestra-<uid>``: other runtimes' homes and relay sockets, the batch's control
socket) replaced by empty directories, with the spec's own directories bound back; and the
spec's ``sandbox_hidden`` paths (a batch's results, summary, audit, transcripts) covered by an
empty entry nobody may open (mode 000, read-only); ``TMPDIR`` a fresh writable directory of
its own (the real runtime spills large outputs there), removed once it was reaped; its caches
in DSH_HOME (``cache_env``: home directories stay read-only). The network is not isolated: the runtime
reaches the model gateway on 127.0.0.1.

Owns: the probe (does bubblewrap work here?), the bwrap argv and its stub files. Must not know
about sessions, pools or batches.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

from .._scratch import scratch_path

log = logging.getLogger("dsh_orchestra.runtime")

SANDBOX_MODES = ("auto", "bwrap", "none")
"""``RuntimeSpec.sandbox`` values: ``auto`` (default) runs the bundled dsh under bubblewrap
when bubblewrap works on this machine (a one-line warning when it does not, then unsandboxed);
``bwrap`` insists (any process runtime; an error where bubblewrap does not work); ``none``
never."""

BWRAP = "bwrap"
PROBE_TIMEOUT = 10.0
"""Seconds the probe (``bwrap ... true``) may take."""

# No --die-with-parent: its PR_SET_PDEATHSIG fires when the *thread* that forked bwrap exits (trio
# spawns from a worker thread, which its thread cache ends after 10 s idle): the runtime was killed
# mid-turn. The runtime's process group is signalled on every path instead (RuntimeActor's close
# ladder), and a runtime whose orchestrator died sees its stdin end.
_BASE = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--cap-drop", "ALL")
_probed: dict[str | None, str | None] = {}
_noticed: set[str] = set()


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot sandbox a runtime here (None: it works): ``bwrap`` is not on PATH,
    or running ``bwrap <the sandbox's base options> true`` fails. Asked once per bwrap path."""
    program = shutil.which(BWRAP)
    if program in _probed:
        return _probed[program]
    if program is None:
        problem: str | None = "bwrap is not on PATH (install bubblewrap: apt-get install bubblewrap)"
    else:
        try:
            run = subprocess.run([program, *_BASE, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, timeout=PROBE_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problem = f"{program} could not run: {exc}"
        else:
            said = run.stderr.decode("utf-8", "replace").strip().splitlines()
            problem = None if run.returncode == 0 else (
                f"{program} fails here (exit status {run.returncode}{': ' + said[-1] if said else ''})")
    _probed[program] = problem
    return problem


def notice_unsandboxed(problem: str) -> None:
    """The one-line warning of ``sandbox="auto"`` without bubblewrap (once per process and problem)."""
    if problem in _noticed:
        return
    _noticed.add(problem)
    log.warning("the runtime runs without a sandbox: %s (sandbox 'none' silences this)", problem)


class SandboxStubs:
    """A private directory holding the empty entries hidden paths are covered with (mode 000):
    made before the runtime starts, removed once it was reaped."""

    def __init__(self) -> None:
        self.directory = scratch_path("sandbox")
        self.file = self.directory / "file"
        self.dir = self.directory / "dir"
        self.tmp = self.directory / "tmp"  # the runtime's TMPDIR: the system's /tmp is read-only there
        self.file.touch()
        self.dir.mkdir()
        self.tmp.mkdir(mode=0o700)
        os.chmod(self.file, 0)
        os.chmod(self.dir, 0)

    def remove(self) -> None:
        """Remove the directory (idempotent)."""
        for path in (self.file, self.dir, self.tmp):
            try:
                os.chmod(path, 0o700)
            except OSError:
                pass
        shutil.rmtree(self.directory, ignore_errors=True)


def scratch_roots() -> list[str]:
    """This user's scratch roots (``_scratch``) as real paths, when they exist."""
    uid = os.getuid()
    roots = {os.path.realpath(os.path.join(base, f"dsh-orchestra-{uid}")) for base in (tempfile.gettempdir(), "/tmp")}
    return sorted(root for root in roots if os.path.isdir(root))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _depth(path: str) -> int:
    return len([part for part in path.split(os.sep) if part])


def sandbox_argv(
    argv: list[str], *, cwd: str, writable: Iterable[str | os.PathLike[str]], readable: Iterable[str | os.PathLike[str]] = (),
    hidden: Iterable[str | os.PathLike[str]] = (), stubs: SandboxStubs, program: str = BWRAP,
    cache: dict[str, str] | None = None,
) -> list[str]:
    """``argv`` run by bubblewrap (see the module docstring), in ``cwd``.

    Mounts are applied parents first (a path's own mount covers its ancestors'), so a hidden
    results file inside a writable workspace stays hidden, and a workspace inside a scratch
    root stays visible. A hidden path that does not exist, or that nothing visible holds, is
    skipped: there is nothing to cover. ``cache``: environment variables set inside (``cache_env``).
    """
    ops: dict[str, str] = {root: "tmpfs" for root in scratch_roots()}  # path -> tmpfs | ro | rw | hide
    for kind, paths in (("ro", readable), ("rw", writable)):
        for path in paths:
            real = os.path.realpath(path)
            if os.path.exists(real):
                ops[real] = kind
    for path in hidden:
        real = os.path.realpath(path)
        if not os.path.exists(real) or real == "/":
            continue
        holder = max((p for p, kind in ops.items() if _inside(real, p)), key=len, default="/")
        if holder == "/" or ops[holder] in ("ro", "rw"):
            ops[real] = "hide"
    command = [program, *_BASE]
    for path in sorted(ops, key=_depth):
        kind = ops[path]
        if kind == "tmpfs":
            command += ["--tmpfs", path]
        elif kind == "ro":
            command += ["--ro-bind", path, path]
        elif kind == "rw":
            command += ["--bind", path, path]
        else:
            stub = stubs.dir if os.path.isdir(path) else stubs.file
            command += ["--ro-bind", str(stub), path]
    command += ["--bind", str(stubs.tmp), str(stubs.tmp), "--setenv", "TMPDIR", str(stubs.tmp)]
    for name, value in (cache or {}).items():
        command += ["--setenv", name, value]
    return [*command, "--chdir", os.path.realpath(cwd), "--", *argv]


def sandbox_paths(values: Iterable[str | os.PathLike[str] | None]) -> tuple[Path, ...]:
    """``values`` as absolute paths, the Nones left out (a spec's ``sandbox_*`` fields)."""
    return tuple(Path(os.path.abspath(os.fspath(v))) for v in values if v is not None)


CACHE_VARIABLES = ("PKG_NATIVE_CACHE_PATH", "XDG_CACHE_HOME")
"""Where the runtime caches: the bundled dsh (a ``pkg`` executable) copies its native modules
to ``$PKG_NATIVE_CACHE_PATH/pkg`` (default ``~/.cache``) at start, and fails every turn when it
cannot; inside the sandbox both point into DSH_HOME (``cache_env``)."""


def cache_env(home: str | os.PathLike[str], given: Iterable[str] = ()) -> dict[str, str]:
    """``CACHE_VARIABLES`` set to ``<home>/.cache``, but those the spec's ``env`` sets (``given``)."""
    path = os.path.join(os.path.realpath(home), ".cache")
    return {name: path for name in CACHE_VARIABLES if name not in set(given)}

"""LocalRay: a Ray head on this machine for one run, that cannot outlive the process that started it.

``ray.init()`` starting a local instance leaves Ray's agents running when the driver is
killed with SIGKILL (measured with Ray 2.60.0: the dashboard and runtime-env agents stay,
re-parented to init). So a local instance is ``ray start --head --block`` as a child process
with a parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, set before ``exec``):
when the driver dies in any way, ``ray start`` gets SIGTERM and stops every Ray process it
started. Elsewhere (no prctl) ``ray.init(address="local")`` is used instead.

Starts a process only when asked; imports no Ray.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .._scratch import owned_prefix, sweep_owned
from ..protocol import OrchestraError

LOCAL_OBJECT_STORE = 256 * 1024 * 1024
"""Object store of a local instance: result lines are small (Ray's floor is 75 MiB)."""

_WRAPPER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when the parent dies\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(3)  # the parent died before the signal was armed\n"
    "from ray.scripts.scripts import main\n"
    "sys.argv = ['ray', *sys.argv[2:]]\n"
    "sys.exit(main())\n"
)


def auth_mode() -> str:
    """The token-authentication mode for a local head, which its drivers must share.

    ``RAY_AUTH_MODE`` when set; otherwise ``token`` when a token is at hand (``RAY_AUTH_TOKEN``,
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``), as ``ray start`` decides, else
    ``disabled``. (Unset, ``ray start`` turns token mode on when it finds a token, while
    ``ray.init(address=...)`` does not: the driver then cannot connect. So the mode is
    decided once and given to both.)
    """
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode:
        return mode
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return "token" if os.environ.get("RAY_AUTH_TOKEN") or os.path.exists(path) else "disabled"


def supported() -> bool:
    """True where a parent-death signal can tie the head to this process (Linux)."""
    return sys.platform.startswith("linux")


_MAX_TEMP_DIR = 40
"""Longest temp dir: Ray's sockets go in ``<it>/session_<date>_<pid>/sockets/plasma_store``
(about 66 more characters) and a socket's path must fit 107 bytes."""


class LocalRayError(OrchestraError):
    """The local Ray head did not start (the message carries the tail of its output)."""


class LocalRay:
    """``ray start --head --block`` for one run; ``start()`` returns its address, ``stop()`` ends it.

    Start it from a thread that lives as long as the run (the main thread): the parent-death
    signal follows the thread that started the child, not the process.
    """

    def __init__(self, *, num_cpus: int, object_store_memory: int = LOCAL_OBJECT_STORE,
                 temp_dir: str | None = None) -> None:
        self.num_cpus = num_cpus
        self.object_store_memory = object_store_memory
        self.auth_mode = auth_mode()
        self._own_temp = temp_dir is None
        base = "/tmp" if os.path.isdir("/tmp") else None  # short: Ray's socket paths must fit 107 bytes
        if temp_dir is None:  # a killed run's is removed by the next one (``_scratch``)
            parent = base or tempfile.gettempdir()
            sweep_owned(Path(parent), "dsh-ray")
            prefix = owned_prefix("dsh-ray")
            if len(os.path.join(parent, prefix)) + 8 > _MAX_TEMP_DIR:  # no room for the start time
                prefix = f"dsh-ray-{os.getpid()}-"
            temp_dir = tempfile.mkdtemp(prefix=prefix, dir=base)
        self.temp_dir = temp_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.address: str | None = None
        self.startup_s = 0.0

    @property
    def log_path(self) -> Path:
        return Path(self.temp_dir) / "ray-start.log"

    def start(self, timeout: float = 120.0) -> str:
        """Start the head; return its GCS address once it accepts drivers (which must run
        with ``RAY_AUTH_MODE=self.auth_mode``).

        Raises:
            LocalRayError: it exited or did not come up within ``timeout`` seconds.
        """
        began = time.monotonic()
        address_file = Path(self.temp_dir) / "ray_current_cluster"
        command = [
            sys.executable, "-c", _WRAPPER, str(os.getpid()),
            "start", "--head", "--block", "--port", "0",
            "--num-cpus", str(self.num_cpus), "--object-store-memory", str(self.object_store_memory),
            "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", self.temp_dir,
        ]
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                            env={**os.environ, "RAY_AUTH_MODE": self.auth_mode})
        deadline = began + timeout
        while True:
            if address_file.exists() and address_file.read_text().strip() and self._started():
                self.address = address_file.read_text().strip()
                self.startup_s = time.monotonic() - began
                return self.address
            status = self.process.poll()
            if status is not None or time.monotonic() > deadline:
                self.stop()
                why = f"exited with status {status}" if status is not None else f"did not start within {timeout:g} s"
                raise LocalRayError(f"the local Ray instance {why}; its output ends with:\n{self._tail()}")
            time.sleep(0.1)

    def _started(self) -> bool:
        try:
            return b"Ray runtime started" in self.log_path.read_bytes()
        except OSError:
            return False

    def _tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no output)"

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the head (it stops every Ray process it started), SIGKILL after ``timeout``;
        then remove its temporary directory. Idempotent."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self._own_temp:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRay:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

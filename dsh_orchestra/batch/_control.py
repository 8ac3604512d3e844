"""The control of a running batch: pause, resume, stop, status and a live concurrency limit,
over a Unix socket only its user can reach.

The batch listens on ``control.sock`` in a fresh private directory (0700; the socket 0600;
a peer of another user, by ``SO_PEERCRED``, is refused) and names the socket in its results
file's lock note (``<results>.lock``), where ``dsh-orchestra ctl RESULTS`` and the viewer
find it. One JSON line asks (``{"command": "pause"}``, ``{"command": "concurrency", "value":
8}``), one JSON line answers (``{"ok": true, "status": {...}}`` or ``{"ok": false, "error":
"..."}``).

Pause stops starting items (those in flight finish); resume starts them again; stop ends the
run as SIGINT does (the process interrupts itself: results kept, exit 130, ``resume=True``
finishes it); concurrency sets how many items may be in flight (1 to the pool's capacity).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import time
from pathlib import Path
from typing import Any, Callable

import orjson
import trio

from .._scratch import pid_alive, scratch_path
from ._progress import Counters

SOCKET_NAME = "control.sock"
COMMANDS = ("pause", "resume", "stop", "status", "concurrency")
MAX_REQUEST = 4096
CLIENT_TIMEOUT = 10.0


class ControlError(Exception):
    """No running batch to control, or it refused the command; the message says which."""


class RunControl:
    """What the workers ask before starting an item, and what the control socket changes."""

    def __init__(self, limit: int, capacity: int, counters: Counters, results: Path) -> None:
        self.capacity = max(1, capacity)
        self.limiter = trio.CapacityLimiter(max(1, min(limit, self.capacity)))
        self.counters = counters
        self.results = results
        self.paused = False
        self.stopping = False
        self._resumed = trio.Event()
        self._resumed.set()
        self.in_flight: dict[object, str] = {}
        self.started = time.monotonic()
        self.socket_path: Path | None = None
        self.on_stop: Callable[[], None] = _interrupt_self

    async def acquire(self, who: object) -> None:
        """Wait while paused, then for a place under the limit."""
        while self.paused:
            await self._resumed.wait()
        await self.limiter.acquire_on_behalf_of(who)
        if self.paused:  # paused while waiting for the place: give it back and wait again
            self.limiter.release_on_behalf_of(who)
            await self.acquire(who)

    def release(self, who: object) -> None:
        self.in_flight.pop(who, None)
        self.limiter.release_on_behalf_of(who)

    def command(self, command: str, value: Any = None) -> dict[str, Any]:
        """Carry out one command; the status after it.

        Raises:
            ControlError: an unknown command or a bad value.
        """
        if command == "pause":
            if not self.paused:
                self.paused = True
                self._resumed = trio.Event()
        elif command == "resume":
            self.paused = False
            self._resumed.set()
        elif command == "stop":
            self.stopping = True  # the interrupt follows the answer (``_answer``)
        elif command == "concurrency":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ControlError(f"concurrency needs a whole number of at least 1, not {value!r}")
            self.limiter.total_tokens = min(value, self.capacity)
        elif command != "status":
            raise ControlError(f"unknown command {command!r}: one of {', '.join(COMMANDS)}")
        return self.status()

    def status(self) -> dict[str, Any]:
        counters = self.counters
        elapsed = time.monotonic() - self.started
        finished_here = counters.done - counters.resumed
        rate = finished_here / elapsed if elapsed > 0 and finished_here > 0 else None
        left = counters.total - counters.done
        return {
            "results": str(self.results), "pid": os.getpid(),
            "state": "stopping" if self.stopping else "paused" if self.paused else "running",
            "paused": self.paused, "concurrency": int(self.limiter.total_tokens), "capacity": self.capacity,
            "in_flight": len(self.in_flight), "in_flight_items": sorted(self.in_flight.values())[:100],
            "done": counters.done, "total": counters.total, "failed": counters.failed, "resumed": counters.resumed,
            "items_per_s": rate, "eta_s": left / rate if rate else None,
        }

    async def serve(self, task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on the control socket until cancelled (then remove its directory)."""
        directory = scratch_path("ctl", room=len("/" + SOCKET_NAME))
        try:
            os.chmod(directory, 0o700)
            path = directory / SOCKET_NAME
            sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
            with sock:
                await sock.bind(str(path))
                os.chmod(path, 0o600)
                sock.listen(16)
                self.socket_path = path
                async with trio.open_nursery() as nursery:
                    task_status.started(path)
                    while True:
                        connection, _ = await sock.accept()
                        nursery.start_soon(self._answer, connection)
        finally:
            self.socket_path = None
            shutil.rmtree(directory, ignore_errors=True)

    async def _answer(self, connection: trio.socket.SocketType) -> None:
        with connection:
            if not _same_user(connection):
                return  # another user: nothing said
            data = b""
            with trio.move_on_after(CLIENT_TIMEOUT):
                while b"\n" not in data and len(data) < MAX_REQUEST:
                    chunk = await connection.recv(MAX_REQUEST)
                    if not chunk:
                        break
                    data += chunk
            stop = False
            try:
                request = orjson.loads(data.split(b"\n", 1)[0])
                if not isinstance(request, dict) or not isinstance(request.get("command"), str):
                    raise ControlError('send one JSON line: {"command": "pause|resume|stop|status|concurrency", "value": N}')
                answer: dict[str, Any] = {"ok": True, "status": self.command(request["command"], request.get("value"))}
                stop = request["command"] == "stop"
            except (orjson.JSONDecodeError, ControlError) as exc:
                answer = {"ok": False, "error": str(exc)}
            reply = orjson.dumps(answer) + b"\n"
            with trio.move_on_after(CLIENT_TIMEOUT):
                while reply:
                    sent = await connection.send(reply)
                    reply = reply[sent:]
        if stop:
            self.on_stop()


def _same_user(connection: Any) -> bool:
    """Whether the peer runs as our user (Linux ``SO_PEERCRED``); True where it cannot be told
    (the 0700 directory is then the only fence, as for the approval relay)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        raw = connection.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return False
    _pid, uid, _gid = struct.unpack("3i", raw)
    return bool(uid == os.getuid())


def _interrupt_self() -> None:
    """End the run as Ctrl-C does: trio raises KeyboardInterrupt in the main task."""
    os.kill(os.getpid(), signal.SIGINT)


def note_control(results: Path, path: Path) -> None:
    """Add the control socket to the results file's lock note (where ``ctl`` finds it)."""
    note = Path(os.path.realpath(results) + ".lock")
    try:
        holder = orjson.loads(note.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return
    if not isinstance(holder, dict) or holder.get("pid") != os.getpid():
        return
    holder["control"] = str(path)
    temporary = note.with_name(f".{note.name}.{os.getpid()}.ctl.tmp")
    temporary.write_bytes(orjson.dumps(holder) + b"\n")
    os.replace(temporary, note)


def control_socket(results: str | os.PathLike[str]) -> Path:
    """The control socket of the batch writing ``results``.

    Raises:
        ControlError: no batch is running on it (no lock note, its process is gone, or it
            has no control socket), or the socket is not private to this user.
    """
    note = Path(os.path.realpath(results) + ".lock")
    try:
        holder = orjson.loads(note.read_bytes())
    except FileNotFoundError:
        raise ControlError(f"no batch is running on {os.fspath(results)!r} (no lock note {str(note)!r})") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ControlError(f"cannot read the lock note {str(note)!r}: {exc}") from None
    pid = holder.get("pid") if isinstance(holder, dict) else None
    if not isinstance(pid, int) or not pid_alive(pid):
        raise ControlError(f"no batch is running on {os.fspath(results)!r} (the process that wrote it, pid {pid}, is gone)")
    path = holder.get("control")
    if not isinstance(path, str):
        raise ControlError(f"the batch running on {os.fspath(results)!r} (pid {pid}) has no control socket")
    info = os.stat(os.path.dirname(path))
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ControlError(f"the control directory of {os.fspath(results)!r} is not private to this user; not used")
    return Path(path)


def send_command(results: str | os.PathLike[str], command: str, value: Any = None, *, timeout: float = CLIENT_TIMEOUT) -> dict[str, Any]:
    """Ask the batch writing ``results``; its status after the command.

    Raises:
        ControlError: no batch running there, it refused the command, or it did not answer.
    """
    path = control_socket(results)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(orjson.dumps({"command": command, "value": value}) + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise ControlError(f"the batch running on {os.fspath(results)!r} did not answer on {str(path)!r}: {exc.strerror or exc}") from None
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ControlError(f"the batch running on {os.fspath(results)!r} answered nothing readable") from None
    if not isinstance(answer, dict) or not answer.get("ok"):
        raise ControlError(str(answer.get("error") if isinstance(answer, dict) else answer))
    status: dict[str, Any] = answer["status"]
    return status

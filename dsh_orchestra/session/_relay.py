"""The approval relay: the real runtime's internal approval chain, answered by our ApprovalService.

The real runtime 0.2.1-rc.2 never sends ``approval/request`` to the client; it decides every
approval through an internal waterfall that nobody answers in the ``sdk`` profile
("unavailable"). With ``RuntimeSpec(relay_approvals=True)`` and a policy, ``open_runtime``:

1. makes a private directory (mode 0700, owned by us) and copies the relay's two files into
   it: ``patch.yml`` (a ``--patch`` overlay) and ``answerer.mjs`` (the plugin it mounts),
   both shipped in ``dsh_orchestra/runtime/relay/``;
2. listens on a Unix socket there and passes its path to the child in
   ``DSH_ORCHESTRA_APPROVAL_SOCKET``, and the patch copy in ``spec.patches``;
3. answers each relayed request (one connection, one JSON line each way) with the same
   ApprovalService as ``approval/request``: same policy, deadline, audit log, fail-closed rules
   and ``TurnResult.approvals``; records say ``via="relay"``.

Limits: subagents never reach it (the runtime pins delegated children to approval policy
``never``); the relay depends on an internal runtime interface (pin the runtime version).
Owns: the directory, the listener and the relay's framing. Must not know about pools or graphs.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket as stdlib_socket
import struct
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import orjson
import trio

from .._logging import SessionContexts
from .._tracing import observed_approvals
from ..approvals import ApprovalService
from ..protocol import ApprovalRequestParams
from ..runtime import RuntimeSpec

log = logging.getLogger("dsh_orchestra.session.relay")

SOCKET_ENV = "DSH_ORCHESTRA_APPROVAL_SOCKET"
"""The child's environment variable naming the relay socket (read by patch.yml)."""

VIA_RELAY = "relay"
"""``DecisionRecord.via`` of a relayed decision."""

RELAY_FILES = ("patch.yml", "answerer.mjs")
MAX_FRAME = 64 * 1024
"""Longest request line accepted from the plugin (bytes)."""
FRAME_TIMEOUT = 10.0
"""Seconds the plugin has to send its request line after connecting."""
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


def relay_source_files() -> dict[str, bytes]:
    """The shipped relay files (package data of ``dsh_orchestra.runtime``), by name."""
    folder = resources.files("dsh_orchestra.runtime").joinpath("relay")
    return {name: folder.joinpath(name).read_bytes() for name in RELAY_FILES}


def _private_dir() -> Path:
    """A fresh directory only we can enter, short enough for a socket path inside it."""
    base = tempfile.gettempdir()
    if len(os.path.join(base, "dsh-orchestra-relay-XXXXXXXX", "approvals.sock")) > _MAX_SOCKET_PATH:
        base = "/tmp"
    path = Path(tempfile.mkdtemp(prefix="dsh-orchestra-relay-", dir=base))
    os.chmod(path, 0o700)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        shutil.rmtree(path, ignore_errors=True)
        raise PermissionError(f"relay directory {str(path)!r} is not private to this user")
    return path


class ApprovalRelay:
    """One runtime's relay: the private directory, the socket listener, the per-request tasks.

    ``prepare(spec)`` makes the directory and returns the spec to launch (env var and patch
    added); ``await nursery.start(relay.run, service)`` listens; ``close()`` stops listening
    (pending requests are left to the service's own close) and ``cleanup()`` removes the
    directory. Both are idempotent.
    """

    def __init__(self) -> None:
        self.directory: Path | None = None
        self.socket_path: str | None = None
        self.relayed = 0
        self._scope = trio.CancelScope()
        # Set by open_runtime: the owning runtime's turn contexts and session-tree roots.
        self.contexts: SessionContexts | None = None
        self.root_of: Callable[[str], str] = lambda session: session

    def prepare(self, spec: RuntimeSpec) -> RuntimeSpec:
        """Make the private directory with the relay files; the spec that mounts them.

        Raises:
            OSError: the directory or the files could not be made.
        """
        files = relay_source_files()
        self.directory = _private_dir()
        try:
            for name, data in files.items():
                target = self.directory / name
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
        except BaseException:
            self.cleanup()
            raise
        self.socket_path = str(self.directory / "approvals.sock")
        patch = str(self.directory / "patch.yml")
        return spec.evolve(env={**spec.env, SOCKET_ENV: self.socket_path}, patches=(*spec.patches, patch))

    async def run(self, service: ApprovalService, *, task_status: trio.TaskStatus[ApprovalRelay] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until ``close()``; started() once the socket accepts connections."""
        if self.socket_path is None:
            raise RuntimeError("ApprovalRelay.run() needs prepare() first")
        with self._scope:
            sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
            with sock:
                await sock.bind(self.socket_path)
                os.chmod(self.socket_path, 0o600)
                sock.listen(128)
                async with trio.open_nursery() as nursery:
                    task_status.started(self)
                    while True:
                        connection, _ = await sock.accept()
                        nursery.start_soon(self._serve, service, connection)

    def close(self) -> None:
        """Stop listening and drop the connections still open (their plugin answers unavailable)."""
        self._scope.cancel(reason="approval relay closed")

    def cleanup(self) -> None:
        """Remove the private directory (socket and files)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    async def _serve(self, service: ApprovalService, connection: trio.socket.SocketType) -> None:
        stream = trio.SocketStream(connection)
        async with stream:
            if not _same_user(connection):
                log.error("approval relay: refused a connection from another user")
                return
            line: bytes | None = None
            with trio.move_on_after(FRAME_TIMEOUT):
                line = await _read_line(stream)
            params = _parse(line) if line is not None else None
            if params is None:
                # Not a request we can attribute to a session: fail closed, record nothing.
                log.error("approval relay: malformed request from the runtime plugin: %r", (line or b"")[:200])
                await _reply(stream, "rejected")
                return
            self.relayed += 1
            result = None
            with trio.CancelScope() as asker:
                async with trio.open_nursery() as nursery:
                    # The plugin closes the connection when the runtime aborts the request: then
                    # the decision is cancelled (recorded as rejected) and no late answer goes out.
                    nursery.start_soon(_cancel_on_hangup, stream, asker)
                    result = await observed_approvals(
                        lambda p: service.handle(p, via=VIA_RELAY), runtime=service.runtime,
                        root_of=self.root_of, contexts=self.contexts,
                    )(params)
                    nursery.cancel_scope.cancel()
            if result is not None and not asker.cancel_called:
                await _reply(stream, result.outcome)


def _same_user(connection: trio.socket.SocketType) -> bool:
    """True when the peer runs as our user (Linux SO_PEERCRED); the 0700 directory is the main fence."""
    option = getattr(stdlib_socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        raw = connection.getsockopt(stdlib_socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return False
    _pid, uid, _gid = struct.unpack("3i", raw)
    return bool(uid == os.getuid())


async def _read_line(stream: trio.SocketStream) -> bytes | None:
    buffer = bytearray()
    while b"\n" not in buffer:
        if len(buffer) > MAX_FRAME:
            return None
        try:
            chunk = await stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        if not chunk:
            return None
        buffer += chunk
    return bytes(buffer[: buffer.index(b"\n")])


def _parse(line: bytes) -> ApprovalRequestParams | None:
    try:
        raw: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict) or raw.get("v") != 1:
        return None
    session_id, tool_name = raw.get("sessionId"), raw.get("toolName")
    call_id, reason = raw.get("callId"), raw.get("reason")
    if not isinstance(session_id, str) or not session_id or not isinstance(tool_name, str) or not tool_name:
        return None
    if not (call_id is None or isinstance(call_id, str)) or not (reason is None or isinstance(reason, str)):
        return None
    return ApprovalRequestParams(session_id=session_id, tool_name=tool_name, call_id=call_id, reason=reason)


async def _cancel_on_hangup(stream: trio.SocketStream, scope: trio.CancelScope) -> None:
    try:
        while await stream.receive_some(4096):
            pass  # nothing more is expected; ignore it
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    scope.cancel(reason="the runtime stopped waiting for this approval")


async def _reply(stream: trio.SocketStream, outcome: str) -> None:
    try:
        await stream.send_all(orjson.dumps({"outcome": outcome}) + b"\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.info("approval relay: the runtime hung up before the answer %r", outcome)

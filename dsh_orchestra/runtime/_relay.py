"""The relay: the real runtime's internal approval and question chains, answered by our services.

The real runtime 0.2.1-rc.2 never sends ``approval/request`` or ``user-question/ask``; it
decides approvals through an internal waterfall that nobody answers in the ``sdk`` profile
("unavailable"), its ``sdk`` profile mounts no question tool, and it pins delegated children
to approval policy ``never``. With a policy or an answerer and ``approval_relay`` ``auto`` or
``on`` (``RuntimeSpec.relays``), ``open_runtime``:

1. makes a private directory (mode 0700, owned by us) and copies the relay's files into it:
   ``patch.yml`` (a ``--patch`` overlay mounting the plugin ``answerer.mjs``) and, when an
   answerer is relayed, ``ask-user.yml`` (mounts the runtime's own question tool);
2. listens on a Unix socket there and passes its path and the relayed features to the child
   (``DSH_ORCHESTRA_APPROVAL_SOCKET``, ``DSH_ORCHESTRA_RELAY_FEATURES``);
3. accepts connections only from the runtime process it launched or its descendants (the
   peer pid from ``SO_PEERCRED``); anything else is closed and audited as refused, and so
   is a frame that does not parse;
4. answers each relayed approval with the same ApprovalService as ``approval/request`` and
   each relayed question with the same QuestionService as ``user-question/ask``; records
   say ``via="relay"``.

Owns: the directory, the listener, the peer check and the relay's framing. Must not know
about pools or graphs.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import socket as stdlib_socket
import struct
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import orjson
import trio

from .._logging import SessionContexts
from .._scratch import proc_stat, scratch_path
from .._tracing import observed_approvals
from ..approvals import ApprovalService
from ..protocol import USER_QUESTION_CANCELLED, ApprovalRequestParams, UserQuestionAskParams, structure, unstructure
from ..questions import QuestionAnswerError, QuestionService
from ._spec import RuntimeSpec

log = logging.getLogger("dsh_orchestra.session.relay")

SOCKET_ENV = "DSH_ORCHESTRA_APPROVAL_SOCKET"
"""The child's environment variable naming the relay socket (read by patch.yml)."""

FEATURES_ENV = "DSH_ORCHESTRA_RELAY_FEATURES"
"""The child's environment variable listing what the plugin relays: approvals, subagents, questions."""

VIA_RELAY = "relay"
"""``DecisionRecord.via`` / ``QuestionRecord.via`` of a relayed request."""

RELAY_FILES = ("patch.yml", "answerer.mjs", "ask-user.yml")
MAX_FRAME = 256 * 1024
"""Longest request line accepted from the plugin (bytes)."""
FRAME_TIMEOUT = 10.0
"""Seconds the plugin has to send its request line after connecting."""
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_MAX_ANCESTRY = 64  # parent links followed from a peer towards the runtime


def relay_source_files() -> dict[str, bytes]:
    """The shipped relay files (package data of ``dsh_orchestra.runtime``), by name."""
    folder = resources.files("dsh_orchestra.runtime").joinpath("relay")
    return {name: folder.joinpath(name).read_bytes() for name in RELAY_FILES}


def relay_warnings(spec: RuntimeSpec, *, approvals: bool, answerer: bool) -> list[str]:
    """What is configured but cannot take effect on ``spec``'s runtime (one sentence each).

    Only the bundled real runtime (0.2.1-rc.2) is known: a runtime given by ``command``
    without ``append_profile`` may implement the newest protocol (as the simulator does),
    unless its program is a dsh (``unpatched_dsh``): then the warning says "may not".
    """
    if spec.relays(approvals=approvals, answerer=answerer):
        return []
    if spec.loads_patches:
        cannot, why, fix = "cannot", "the approval relay is off", "use approval_relay='auto'"
    elif spec.unpatched_dsh:
        cannot, why = "may not", f"the command {spec.display_name!r} gets no --patch files, so the approval relay cannot load"
        fix = "run the bundled runtime (command=None) or pass append_profile=True"
    else:
        return []
    out = []
    if approvals:
        out.append(
            f"the approval policy {cannot} take effect: the real runtime 0.2.1-rc.2 never sends "
            f"approval/request and {why}, so every approval (subagents' included) is decided "
            f"'unavailable' (denied) inside the runtime; {fix}"
        )
    if answerer:
        out.append(
            f"the answerer {cannot} take effect: the real runtime 0.2.1-rc.2 never sends "
            f"user-question/ask and without the approval relay its sdk profile has no question tool, "
            f"so no question can arrive; {fix}"
        )
    return out


def _private_dir() -> Path:
    """A fresh directory only we can enter, short enough for a socket path inside it, where the
    next run removes it if this process dies without doing so (``_scratch``)."""
    path = scratch_path("relay", room=len("/approvals.sock"))
    os.chmod(path, 0o700)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        shutil.rmtree(path, ignore_errors=True)
        raise PermissionError(f"relay directory {str(path)!r} is not private to this user")
    if len(str(path / "approvals.sock")) > _MAX_SOCKET_PATH:
        shutil.rmtree(path, ignore_errors=True)
        raise OSError(f"relay directory {str(path)!r} is too long a path for a socket; set TMPDIR to a shorter one")
    return path


def peer_pid(connection: Any) -> int | None:
    """The connecting process's pid and whether it is our user: (pid or None).

    Linux ``SO_PEERCRED``; None when the platform cannot tell or the peer is another user.
    """
    option = getattr(stdlib_socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        raw = connection.getsockopt(stdlib_socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, _gid = struct.unpack("3i", raw)
    return int(pid) if uid == os.getuid() and pid > 0 else None


def _parent_of(pid: int) -> int | None:
    fields = proc_stat(pid)
    try:
        return int(fields[1]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def is_descendant(pid: int, ancestor: int) -> bool:
    """True when ``pid`` is ``ancestor`` or one of its descendants (Linux ``/proc``)."""
    current: int | None = pid
    for _ in range(_MAX_ANCESTRY):
        if current is None or current <= 1:
            return False
        if current == ancestor:
            return True
        current = _parent_of(current)
    return False


def peer_problem(connection: Any, runtime_pid: int | None) -> str | None:
    """Why a relay connection must be refused, or None when it comes from the runtime's tree."""
    if not sys.platform.startswith("linux"):
        return None  # no SO_PEERCRED: the private 0700 directory is the only fence (documented)
    pid = peer_pid(connection)
    if pid is None:
        return "the peer is another user, or its credentials are unavailable"
    if runtime_pid is None:
        return f"the peer (pid {pid}) connected while no runtime process was running"
    if not is_descendant(pid, runtime_pid):
        return f"the peer (pid {pid}) is neither the runtime (pid {runtime_pid}) nor one of its descendants"
    return None


class ApprovalRelay:
    """One runtime's relay: the private directory, the socket listener, the per-request tasks.

    ``prepare(spec, questions=...)`` makes the directory and returns the spec to launch;
    ``await nursery.start(relay.run, approvals, questions, runtime_pid)`` listens; ``close()``
    stops listening and ``cleanup()`` removes the directory. Both are idempotent.
    """

    def __init__(self) -> None:
        self.directory: Path | None = None
        self.socket_path: str | None = None
        self.relayed = 0
        self.refused = 0
        self._scope = trio.CancelScope()
        self._ids = itertools.count(1)
        # Set by open_runtime: the owning runtime's turn contexts and session-tree roots.
        self.contexts: SessionContexts | None = None
        self.root_of: Callable[[str], str] = lambda session: session

    def prepare(self, spec: RuntimeSpec, *, approvals: bool = True, questions: bool = False) -> RuntimeSpec:
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
        features = [*(("approvals", "subagents") if approvals else ()), *(("questions",) if questions else ())]
        patches = [str(self.directory / "patch.yml"), *([str(self.directory / "ask-user.yml")] if questions else [])]
        env = {**spec.env, SOCKET_ENV: self.socket_path, FEATURES_ENV: ",".join(features)}
        # readable in a sandbox (its scratch root is hidden there): the patches and the socket
        return spec.evolve(env=env, patches=(*spec.patches, *patches), sandbox_readable=(*spec.sandbox_readable, self.directory))

    async def run(
        self,
        approvals: ApprovalService | None,
        questions: QuestionService | None,
        runtime_pid: Callable[[], int | None],
        *,
        task_status: trio.TaskStatus[ApprovalRelay] = trio.TASK_STATUS_IGNORED,
    ) -> None:
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
                        nursery.start_soon(self._serve, approvals, questions, runtime_pid, connection)

    def close(self) -> None:
        """Stop listening and drop the connections still open (their plugin fails closed)."""
        self._scope.cancel(reason="approval relay closed")

    def cleanup(self) -> None:
        """Remove the private directory (socket and files)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    async def _serve(
        self, approvals: ApprovalService | None, questions: QuestionService | None,
        runtime_pid: Callable[[], int | None], connection: trio.socket.SocketType,
    ) -> None:
        stream = trio.SocketStream(connection)
        async with stream:
            problem = peer_problem(connection, runtime_pid())
            if problem is not None:
                self._refuse(approvals, f"relay connection refused: {problem}")
                return  # closed without a word: the peer learns nothing
            line: bytes | None = None
            with trio.move_on_after(FRAME_TIMEOUT):
                line = await _read_line(stream)
            frame = _parse(line) if line is not None else None
            if frame is None:
                # Not a request we can attribute to a session: fail closed, audit it.
                shown = (line or b"")[:200]
                self._refuse(approvals, f"relay frame refused: not a valid request: {shown!r}")
                await _send(stream, {"outcome": "rejected"})
                return
            self.relayed += 1
            if isinstance(frame, ApprovalRequestParams):
                await self._approval(stream, approvals, frame)
            else:
                await self._question(stream, questions, frame)

    def _refuse(self, approvals: ApprovalService | None, error: str) -> None:
        self.refused += 1
        log.error("approval relay: %s", error)
        if approvals is not None:
            approvals.record_refused(error, via=VIA_RELAY)

    async def _approval(self, stream: trio.SocketStream, service: ApprovalService | None, params: ApprovalRequestParams) -> None:
        if service is None:  # the plugin relays approvals only when we have a policy
            await _send(stream, {"outcome": "rejected"})
            return
        result = None
        with trio.CancelScope() as asker:
            async with trio.open_nursery() as nursery:
                # The plugin closes the connection when the runtime aborts the request: then
                # the decision is cancelled (recorded as rejected) and no late answer goes out.
                nursery.start_soon(_cancel_on_hangup, stream, asker.cancel)
                result = await observed_approvals(
                    lambda p: service.handle(p, via=VIA_RELAY), runtime=service.runtime,
                    root_of=self.root_of, contexts=self.contexts,
                )(params)
                nursery.cancel_scope.cancel()
        if result is not None and not asker.cancel_called:
            await _send(stream, {"outcome": result.outcome})

    async def _question(self, stream: trio.SocketStream, service: QuestionService | None, raw: dict[str, Any]) -> None:
        request_id = f"relay-{next(self._ids)}"
        try:
            params = structure({**raw, "requestId": request_id}, UserQuestionAskParams, method="user-questions/request", what="questions")
        except Exception as exc:  # noqa: BLE001 (a malformed question set: fail that question)
            await _send(stream, {"error": f"malformed questions: {exc}"})
            return
        if service is None:
            await _send(stream, {"error": "no answerer is configured"})
            return
        reply: dict[str, Any] | None = None

        def withdrawn() -> None:  # the runtime aborted the question: cancel the answerer's work
            service.on_notification(USER_QUESTION_CANCELLED, {"requestId": request_id})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_hangup, stream, withdrawn)
            try:
                result = await service.handle(params, via=VIA_RELAY)
            except QuestionAnswerError as exc:
                reply = {"error": str(exc)}
            else:
                reply = None if result is None else unstructure(result)
            nursery.cancel_scope.cancel()
        if reply is not None:
            await _send(stream, reply)


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


def _parse(line: bytes) -> ApprovalRequestParams | dict[str, Any] | None:
    """An approval request, a question frame (its raw dict, checked), or None."""
    try:
        raw: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict) or raw.get("v") != 1:
        return None
    kind, session_id = raw.get("kind", "approval"), raw.get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        return None
    if kind == "question":
        questions = raw.get("questions")
        if not isinstance(questions, list) or not questions:
            return None
        return {"sessionId": session_id, "questions": questions}
    if kind != "approval":
        return None
    tool_name, call_id, reason = raw.get("toolName"), raw.get("callId"), raw.get("reason")
    if not isinstance(tool_name, str) or not tool_name:
        return None
    if not (call_id is None or isinstance(call_id, str)) or not (reason is None or isinstance(reason, str)):
        return None
    return ApprovalRequestParams(session_id=session_id, tool_name=tool_name, call_id=call_id, reason=reason)


async def _cancel_on_hangup(stream: trio.SocketStream, cancel: Callable[[], None]) -> None:
    try:
        while await stream.receive_some(4096):
            pass  # nothing more is expected; ignore it
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    cancel()


async def _send(stream: trio.SocketStream, reply: dict[str, Any]) -> None:
    try:
        await stream.send_all(orjson.dumps(reply) + b"\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.info("approval relay: the runtime hung up before the answer %r", reply)

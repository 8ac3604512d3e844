"""The runtime actor: one runtime process (or in-process stream) and its connection.

Owns: spawning, the stderr tail, the ``initialize`` handshake (with retries on a fresh
process), crash detection, and the close ladder (shutdown, stdin EOF, SIGTERM, SIGKILL).
The process is reaped on every path. Must not know about sessions or what notifications mean.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections import deque
from contextlib import AsyncExitStack
from typing import Any, Callable

import trio

from .._redact import redact
from ..protocol import (
    INITIALIZE,
    SHUTDOWN,
    InitializeResult,
    JsonRpcResponseError,
    OrchestraError,
    RequestTimeoutError,
    RuntimeExitedError,
    RuntimeStartError,
    SdkProtocolError,
    TransportClosedError,
)
from ..transport import Connection, Notification
from ._sandbox import SandboxStubs, bwrap_problem, cache_env, notice_unsandboxed, sandbox_argv
from ._spec import RuntimeSpec

log = logging.getLogger("dsh_orchestra.runtime")

Handler = Callable[[Any], Any]

EOF_AFTER_EXIT = 0.5
"""Seconds the reader gets to drain stdout after the process exited, before waiters fail."""


class StderrTail:
    """The last lines a process wrote to stderr (bounded in lines and bytes)."""

    def __init__(self, max_lines: int = 200, max_line_bytes: int = 4096) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._partial = b""
        self._max_line_bytes = max_line_bytes

    def feed(self, data: bytes | bytearray) -> None:
        """Add a chunk of stderr output."""
        data = self._partial + bytes(data)
        *lines, self._partial = data.split(b"\n")
        self._partial = self._partial[-self._max_line_bytes :]
        for line in lines:
            self._lines.append(line[: self._max_line_bytes].decode("utf-8", "replace").rstrip("\r"))

    def text(self) -> str:
        """The tail as text (the unfinished last line included)."""
        lines = list(self._lines)
        if self._partial:
            lines.append(self._partial.decode("utf-8", "replace"))
        return "\n".join(lines)


class RuntimeActor:
    """One runtime connection, ready only after a successful ``initialize``.

    Start it with ``await nursery.start(actor.run)``; ``aclose()`` walks the close ladder.
    Register request handlers and notification sinks before starting it.
    """

    def __init__(
        self,
        spec: RuntimeSpec,
        *,
        approval_requests: bool = False,
        user_questions: bool = False,
    ) -> None:
        self.spec = spec
        self.approval_requests = approval_requests
        self.user_questions = user_questions
        self.connection: Connection | None = None
        self.server_info: InitializeResult | None = None
        self.process: trio.Process | None = None
        self.exit_error: TransportClosedError | None = None
        self.stderr = StderrTail(spec.stderr_tail_lines)
        self._handlers: dict[str, tuple[Handler, type | None]] = {}
        self._sinks: list[Callable[[list[Notification]], None]] = []
        self._close_requested = trio.Event()
        self._stopped = trio.Event()
        self._started = False
        self._stderr_done = trio.Event()
        self._start_cause: BaseException | None = None  # why the handshake failed, when typed
        self._name_spec: RuntimeSpec | None = None  # the spec ``_name`` was worked out for
        self._name = ""

    @property
    def name(self) -> str:
        """The runtime's display name (no secrets), worked out once per ``spec``.

        Every turn reads it (its log context); for a ``command`` without a ``name`` working
        it out redacts the argv with ``spec.secrets()``, a regex search per environment
        variable, which was most of the session layer's CPU per turn (docs/benchmarks.md).
        """
        spec = self.spec
        if self._name_spec is not spec:
            self._name, self._name_spec = spec.display_name, spec
        return self._name

    @property
    def pid(self) -> int | None:
        """The runtime process id, or None for in-process runtimes."""
        return self.process.pid if self.process is not None else None

    def register(self, method: str, handler: Handler, params_type: type | None = None) -> None:
        """Answer the runtime's ``method`` requests (see Connection.register)."""
        self._handlers[method] = (handler, params_type)
        if self.connection is not None:
            self.connection.register(method, handler, params_type)

    def add_sink(self, sink: Callable[[list[Notification]], None]) -> None:
        """Receive every read's notifications in one call, in wire order (see Connection.add_sink)."""
        self._sinks.append(sink)
        if self.connection is not None:
            self.connection.add_sink(sink)

    def _tail(self) -> str:
        return redact(self.stderr.text(), self.spec.secrets())

    # ---- the service -----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[RuntimeActor] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the runtime until ``aclose()`` or its exit; started() once initialized.

        Raises:
            RuntimeStartError: every handshake attempt failed (each process was reaped).
        """
        if self._started:
            raise RuntimeError("RuntimeActor.run() was already started")
        self._started = True
        try:
            attempts = self.spec.handshake_attempts
            for attempt in range(1, attempts + 1):
                try:
                    await self._run_once(task_status)
                    return
                except RuntimeStartError as exc:
                    if attempt == attempts:
                        raise
                    log.warning("handshake attempt %d/%d failed: %s", attempt, attempts, exc)
                    self.stderr = StderrTail(self.spec.stderr_tail_lines)
        finally:
            self._stopped.set()

    async def _run_once(self, task_status: trio.TaskStatus[RuntimeActor]) -> None:
        failure: str | None = None
        async with AsyncExitStack() as stack:
            if self.spec.connect is not None:
                stream = await stack.enter_async_context(self.spec.connect())
            else:
                stream = await self._spawn(stack)
            async with trio.open_nursery() as nursery:
                connection = Connection(stream, name=f"runtime {self.name!r}", lost_hook=self._lost)
                for method, (handler, params_type) in self._handlers.items():
                    connection.register(method, handler, params_type)
                await nursery.start(connection.run)
                if self.process is not None:
                    nursery.start_soon(self._watch_process, connection, self.process)
                failure = await self._handshake(connection)
                if failure is not None:
                    connection.close("handshake failed")
                    nursery.cancel_scope.cancel(reason="handshake failed")
                else:
                    # Sinks join only once greeted: closing a failed attempt's connection would
                    # fail them for good (and the runtime sends nothing before a client request).
                    for sink in self._sinks:
                        connection.add_sink(sink)
                    self.connection = connection
                    log.info("runtime %r ready (pid %s)", self.name, self.pid)
                    task_status.started(self)
                    nursery.start_soon(self._watch, connection)
                    await self._close_requested.wait()
                    await self._shutdown(connection)
                    nursery.cancel_scope.cancel(reason="runtime closed")
        if failure is not None:
            # Raised here, outside the nurseries (so callers get it bare, not in an
            # ExceptionGroup) and after the reap (so the tail holds the process's last words).
            cause, self._start_cause = self._start_cause, None
            raise RuntimeStartError(self.name, self.spec.profile, failure, self._tail()) from cause

    async def _spawn(self, stack: AsyncExitStack) -> trio.abc.Stream:
        spec = self.spec
        argv = spec.argv()
        env = spec.process_env()
        cwd = str(spec.process_cwd or spec.cwd)
        if spec.sandboxed:
            argv = await self._sandboxed(argv, cwd, stack)
        try:
            process = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeStartError(self.name, spec.profile, f"cannot spawn: {exc}") from exc
        self.process = process
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        # Exit order (LIFO): reap the process, then stop draining stderr, then the nursery.
        nursery = await stack.enter_async_context(trio.open_nursery())
        drain_scope = trio.CancelScope()
        stack.callback(drain_scope.cancel)
        stack.push_async_callback(self._reap, process)
        self._stderr_done = trio.Event()
        nursery.start_soon(self._drain_stderr, process.stderr, drain_scope)
        return trio.StapledStream(process.stdin, process.stdout)

    async def _sandboxed(self, argv: list[str], cwd: str, stack: AsyncExitStack) -> list[str]:
        """``argv`` under bubblewrap (``_sandbox``); as it is, after a one-line warning, when
        bubblewrap does not work here and the spec's ``sandbox`` is ``auto``.

        Raises:
            RuntimeStartError: ``sandbox="bwrap"`` and bubblewrap does not work here.
        """
        spec = self.spec
        problem = await trio.to_thread.run_sync(bwrap_problem)
        if problem is not None:
            if spec.sandbox == "bwrap":
                raise RuntimeStartError(self.name, spec.profile, f"sandbox 'bwrap' cannot be used: {problem}")
            notice_unsandboxed(problem)
            return argv
        stubs = SandboxStubs()
        stack.callback(stubs.remove)  # after the reap (pushed before it)
        home = spec.dsh_home if spec.dsh_home is not None else spec.cwd
        readable = [*spec.sandbox_readable, *([spec.process_cwd] if spec.process_cwd is not None else [])]
        return sandbox_argv(argv, cwd=cwd, writable=[spec.cwd, home, *spec.sandbox_writable], readable=readable,
                            hidden=spec.sandbox_hidden, stubs=stubs, cache=cache_env(home, spec.env))

    async def _drain_stderr(self, stream: trio.abc.ReceiveStream, scope: trio.CancelScope) -> None:
        with scope:
            try:
                while data := await stream.receive_some(65536):
                    self.stderr.feed(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._stderr_done.set()

    async def _handshake(self, connection: Connection) -> str | None:
        """Send ``initialize``; None when greeted, else why not (secrets redacted)."""
        params = self.spec.initialize_params(
            approval_requests=self.approval_requests, user_questions=self.user_questions
        )
        timeout = self.spec.handshake_timeout
        try:
            with trio.fail_after(timeout):
                self.server_info = await connection.request(INITIALIZE, params, InitializeResult)
        except trio.TooSlowError:
            self._start_cause = RequestTimeoutError("initialize", timeout)
            reason = f"initialize did not answer within {timeout:g} s"
        except JsonRpcResponseError as exc:
            reason = f"initialize was rejected: {exc.message}"
        except TransportClosedError as exc:
            reason = "the runtime went away during initialize"
            returncode = exc.returncode
            if returncode is None and self.process is not None:  # a failed write: see it exit
                with trio.move_on_after(self.spec.exit_wait):
                    await self.process.wait()
                returncode = self.process.returncode
            if returncode is not None:
                reason += f" (exit status {returncode})"
        except SdkProtocolError as exc:
            reason = f"initialize answered outside the protocol: {exc}"
        else:
            return None
        return redact(reason, self.spec.secrets())

    async def _watch(self, connection: Connection) -> None:
        """When the connection ends on its own (crash, EOF), stop the actor."""
        await connection.wait_closed()
        if not self._close_requested.is_set():
            self.exit_error = connection.closed_error
            log.warning("runtime %r went away: %s", self.name, connection.closed_error)
            self._close_requested.set()

    async def _watch_process(self, connection: Connection, process: trio.Process) -> None:
        """Fail the connection when the process exits but its stdout never ends.

        Usually end of file follows the exit at once and the reader notices first. A child
        the runtime started (a tool, a shell) may still hold the pipe open, though, and then
        no waiter would ever wake.
        """
        await process.wait()
        with trio.move_on_after(EOF_AFTER_EXIT):
            await connection.wait_closed()
        if not connection.closed:
            log.warning("runtime %r exited but its stdout is still open (held by a child)", self.name)
            connection.fail(await self._lost("exited"))

    async def _lost(self, reason: str) -> TransportClosedError:
        """Build the error every waiter gets when the stream ends: exit status and stderr."""
        returncode = None
        if self.process is not None:
            with trio.move_on_after(self.spec.exit_wait):
                await self.process.wait()
            returncode = self.process.returncode
            with trio.move_on_after(0.5):  # let the stderr drain catch the last words
                await self._stderr_done.wait()
        return RuntimeExitedError(self.name, returncode, self._tail())

    # ---- closing ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the runtime: shutdown (bounded), stdin EOF, SIGTERM, SIGKILL. Idempotent."""
        self._close_requested.set()
        if self._started:
            await self._stopped.wait()
        else:
            await trio.lowlevel.checkpoint()

    async def wait_stopped(self) -> None:
        """Wait until the actor has stopped and its process was reaped."""
        await self._stopped.wait()

    async def _shutdown(self, connection: Connection) -> None:
        if connection.closed:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.spec.shutdown_timeout):
                try:
                    await connection.request(SHUTDOWN)
                except OrchestraError as exc:
                    log.info("shutdown request failed: %s", exc)
            connection.close("runtime closed")

    async def _reap(self, process: trio.Process) -> None:
        """Stdin EOF, wait, SIGTERM, wait, SIGKILL, wait: shielded, so it runs when cancelled."""
        spec = self.spec
        with trio.CancelScope(shield=True):
            if process.stdin is not None:
                try:
                    await process.stdin.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            for sig, grace in ((None, spec.eof_grace), (signal.SIGTERM, spec.terminate_grace), (signal.SIGKILL, None)):
                if sig is not None:
                    _signal_group(process, sig)
                if grace is None:
                    await process.wait()
                    break
                with trio.move_on_after(grace):
                    await process.wait()
                if process.returncode is not None:
                    break
            _signal_group(process, signal.SIGKILL)  # leave nothing of its group behind
            with trio.move_on_after(0.5):  # the drain may still hold the last words unread
                await self._stderr_done.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    try:
                        await stream.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
            log.info("runtime %r (pid %s) exited with status %s", self.name, process.pid, process.returncode)


def _signal_group(process: trio.Process, sig: int) -> None:
    """Signal the process group the runtime leads (its children included)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        if process.returncode is None:
            try:
                process.send_signal(sig)
            except ProcessLookupError:
                pass

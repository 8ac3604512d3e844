"""Python (``module:attr``) scorers in a small pool of worker processes.

A scorer is code nobody here wrote: it may block, exit, fork, print or return what JSON cannot
encode. Each call goes to a worker process (``python -m dsh_orchestra.eval._worker``, started
as it is first needed, in a session of its own) and is bounded by a timeout; a worker that
times out or dies is killed with its whole process group and replaced on the next call. What
comes back is the checked record as JSON (``_checked.checked_record``, done in the worker) or
the error's text, never an object of the user's. Closing the pool kills every worker's
process group, so a fork inside a scorer leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
from typing import Any, AsyncIterator, Sequence

import orjson
import trio

from ._score import ScoreRecord

log = logging.getLogger("dsh_orchestra.eval")

SCORER_WORKERS = 2
"""Worker processes of a pool by default (0: Python scorers run in-process)."""

SCORER_TIMEOUT = 60.0
"""Seconds a scorer call may take by default."""

DEFAULT_WORKERS, DEFAULT_TIMEOUT = SCORER_WORKERS, SCORER_TIMEOUT

START_TIMEOUT = 120.0
"""Seconds a worker process may take to start (import the package) before the call fails."""

_HEADER = struct.Struct("!I")
_WORKER = [sys.executable, "-m", "dsh_orchestra.eval._worker"]


class ScorerCallError(RuntimeError):
    """A scorer call in a worker failed: the scorer raised, returned a bad value, took too long,
    or its worker died. The message says which; it is that scorer's error."""


class _Worker:
    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = bytearray()

    async def request(self, payload: bytes) -> dict[str, Any]:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(_HEADER.pack(len(payload)) + payload)
        return await self.reply()

    async def reply(self) -> dict[str, Any]:
        size = _HEADER.unpack(await self._read(_HEADER.size))[0]
        reply = orjson.loads(await self._read(size))
        if not isinstance(reply, dict):
            raise ScorerCallError("the scorer's worker answered something that is not a reply")
        return reply

    async def _read(self, count: int) -> bytes:
        assert self.process.stdout is not None
        while len(self.buffer) < count:
            chunk = await self.process.stdout.receive_some(max(65536, count - len(self.buffer)))
            if not chunk:
                with trio.move_on_after(1):  # its exit status, when it is exiting
                    await self.process.wait()
                raise ScorerCallError(f"the scorer's worker process exited (status {self.process.returncode})")
            self.buffer += chunk
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data

    async def kill(self) -> None:
        """Kill the worker and everything in its process group; wait for it (shielded)."""
        with trio.CancelScope(shield=True):
            _killpg(self.process.pid)
            with trio.move_on_after(5):
                await self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                        await stream.aclose()


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class ScorerWorkers:
    """At most ``size`` worker processes running Python scorers, one call each at a time."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a pool of scorer workers needs size >= 1, not {size!r}")
        self.size = size
        self._slots = trio.Semaphore(size)
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self.started = 0
        self.killed = 0
        self.closed = False

    async def call(self, function: str, item: Any, result: Any, *, timeout: float | None) -> ScoreRecord:  # noqa: ASYNC109
        """Score ``result`` of ``item`` with ``function`` (``module:attr``) in a worker, within
        ``timeout`` seconds (None: no bound).

        Raises:
            ScorerCallError: the scorer failed, returned a bad value, took too long, or its worker died.
        """
        try:
            payload = pickle.dumps((function, item, result), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - what cannot cross to a worker is this scorer's error
            raise ScorerCallError(f"the item or its result cannot be sent to a scorer worker: {exc}") from None
        async with self._slots:
            if self.closed:
                raise ScorerCallError("the scorer workers were closed")
            worker = self._idle.pop() if self._idle else await self._start()
            healthy = False
            try:
                with trio.fail_after(timeout if timeout is not None else float("inf")):
                    reply = await worker.request(payload)
                healthy = True
            except trio.TooSlowError:
                raise ScorerCallError(f"scorer {function!r} did not finish within {timeout:g} s; its worker was "
                                      "killed and is replaced") from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, orjson.JSONDecodeError) as exc:
                raise ScorerCallError(f"scorer {function!r}: its worker process failed ({exc}); it is replaced") from None
            finally:
                if healthy:
                    self._idle.append(worker)
                else:
                    self._all.discard(worker)
                    self.killed += 1
                    await worker.kill()
        if "error" in reply:
            raise ScorerCallError(str(reply["error"]))
        record = reply.get("record")
        if not isinstance(record, dict):
            raise ScorerCallError("the scorer's worker answered no record")
        return record

    async def _start(self) -> _Worker:
        # the worker imports what this process can: its sys.path (the working directory first)
        path = os.pathsep.join([os.getcwd(), *(p for p in sys.path if isinstance(p, str) and p)])
        process = await trio.lowlevel.open_process(
            _WORKER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        worker = _Worker(process)
        self._all.add(worker)
        self.started += 1
        try:  # its imports are not on the first call's clock
            with trio.fail_after(START_TIMEOUT):
                await worker.reply()
        except BaseException as exc:
            self._all.discard(worker)
            await worker.kill()
            if isinstance(exc, (trio.TooSlowError, trio.BrokenResourceError, OSError, ScorerCallError)):
                raise ScorerCallError(f"a scorer worker process did not start: {exc!r}") from None
            raise
        return worker

    async def aclose(self) -> None:
        """Stop every worker and whatever its scorers forked. Idempotent."""
        self.closed = True
        workers, self._all, self._idle = list(self._all), set(), []
        for worker in workers:
            await worker.kill()


def needs_workers(specs: Sequence[Any]) -> bool:
    """Whether any of these ``ScorerSpec``s is a ``module:attr`` scorer (one a pool would run)."""
    return any(spec.kind == "python" and isinstance(spec.settings.get("function"), str) for spec in specs)


@contextlib.asynccontextmanager
async def open_scorer_workers(size: int) -> AsyncIterator[ScorerWorkers | None]:
    """A pool of ``size`` scorer workers for the block (None when ``size`` is 0); every worker
    and whatever it forked is killed on exit."""
    if size <= 0:
        yield None
        return
    workers = ScorerWorkers(size)
    try:
        yield workers
    finally:
        await workers.aclose()

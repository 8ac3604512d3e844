"""One trio run in a dedicated thread; blocking calls from other threads run in it.

``TrioThread`` starts ``trio.run`` in a daemon thread that serves jobs: ``call(fn, *args)``
starts ``await fn(*args)`` as a task of that run, in its own cancel scope, and blocks the
calling thread until it finished, returning its value or raising its exception (the same
object). The caller's wait is interruptible: a KeyboardInterrupt (Ctrl-C) while waiting
cancels the job's scope, waits for the trio side to unwind (runtimes close their ladder, no
process is left), and is raised again. Nothing here touches the caller's own event loop, so
the calls work in a thread where asyncio is running (a Jupyter cell).
"""

from __future__ import annotations

import threading
from typing import Any, Awaitable, Callable, TypeVar

import outcome
import trio

T = TypeVar("T")


def check_not_in_trio(api: str) -> None:
    """Raise RuntimeError when called from inside a trio run (the blocking API would deadlock it).

    Raises:
        RuntimeError: the calling thread runs trio.
    """
    try:
        trio.lowlevel.current_task()  # (not the token: an aio guest run sets it between its ticks)
    except RuntimeError:
        return
    raise RuntimeError(f"{api} blocks its thread and cannot run inside trio: await the trio API "
                       "(dsh_orchestra.open_runtime, run_batch, ...) instead")


class TrioThread:
    """A trio run in its own thread, serving blocking calls until ``close()``."""

    def __init__(self, name: str = "dsh-orchestra-trio") -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:  # pragma: no cover (trio.run failed to start)
            raise self._failure

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # pragma: no cover (reported to the constructor)
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel(reason="the blocking API's trio thread was closed")

    @property
    def alive(self) -> bool:
        """True until ``close()``."""
        return self._thread.is_alive() and self._stop is not None and not self._stop.is_set()

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run the plain function ``fn(*args)`` in the trio thread and return its value."""
        return self.call(_as_async(fn), *args)

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(*args)`` in the trio thread and return its value (or raise its error).

        A KeyboardInterrupt (or any exception) raised in the calling thread while it waits
        cancels the job and waits for it to unwind before being raised again.

        Raises:
            RuntimeError: the thread was closed, or its trio side cancelled the job.
        """
        token, nursery = self._token, self._nursery
        if token is None or nursery is None or not self.alive:
            raise RuntimeError("this blocking context is closed")
        finished = threading.Event()
        scope = trio.CancelScope()
        box: list[outcome.Outcome[T]] = []

        async def job() -> None:
            try:
                with scope:
                    box.append(await outcome.acapture(fn, *args))
            finally:
                finished.set()

        token.run_sync_soon(nursery.start_soon, job)
        try:
            finished.wait()
        except BaseException:
            try:
                token.run_sync_soon(scope.cancel)
            except trio.RunFinishedError:  # pragma: no cover (the thread ended meanwhile)
                pass
            _wait_uninterrupted(finished)
            raise
        if not box:  # the scope was cancelled from the trio side (the thread is closing)
            raise RuntimeError("this blocking context was closed while the call ran")
        result = box[0]
        if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
            raise RuntimeError("this blocking context was closed while the call ran")
        return result.unwrap()

    def close(self) -> None:
        """Stop the trio run (cancelling anything still running) and join the thread. Idempotent."""
        token, stop = self._token, self._stop
        if token is not None and stop is not None and self._thread.is_alive():
            try:
                token.run_sync_soon(stop.set)
            except trio.RunFinishedError:  # pragma: no cover
                pass
        if self._thread is not threading.current_thread():
            _join_uninterrupted(self._thread)


def _as_async(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    async def run(*args: Any) -> T:
        return fn(*args)
    return run


def _wait_uninterrupted(event: threading.Event) -> None:
    """Wait for ``event``; a second Ctrl-C while the trio side unwinds does not leave it behind."""
    interrupted: BaseException | None = None
    while True:
        try:
            event.wait()
            break
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


def _join_uninterrupted(thread: threading.Thread) -> None:
    interrupted: BaseException | None = None
    while True:
        try:
            thread.join()
            break
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted

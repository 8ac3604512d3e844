"""trio as a guest on the running asyncio loop (``trio.lowlevel.start_guest_run``), same thread.

One guest run per asyncio loop, shared by every ``aio`` call running on it (a thread can
hold one trio run at a time): started by the first, stopped when the last one ends, so no
trio run outlives the asyncio code that used it. ``call`` runs ``await fn(*args)`` as a task
of the guest, in its own cancel scope: cancelling the awaiting asyncio task cancels that
scope and waits for the trio side to unwind before the CancelledError goes on; the trio
side's exception is raised in asyncio as the same object.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import weakref
from typing import Any, Awaitable, Callable, TypeVar

import outcome
import trio

T = TypeVar("T")

_guests: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Guest] = weakref.WeakKeyDictionary()


class Guest:
    """The trio guest run of one asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0
        self.stopping = False
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self.ready: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()

    def start(self) -> None:
        """Start the guest run on ``loop`` (from a task of that loop)."""

        async def main() -> None:
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self.token = trio.lowlevel.current_trio_token()
                self.ready.set_result(None)
                await self._stop.wait()
                nursery.cancel_scope.cancel(reason="the last aio call on this loop ended")

        def finished(result: outcome.Outcome[None]) -> None:
            if not self.ready.done():  # pragma: no cover (trio failed before main ran)
                self.ready.set_exception(RuntimeError(f"the trio guest run failed to start: {result!r}"))
            if not self.done.done():
                self.done.set_result(None)
            if isinstance(result, outcome.Error):  # pragma: no cover (main never raises)
                self.loop.call_exception_handler({"message": "the trio guest run failed", "exception": result.error})

        trio.lowlevel.start_guest_run(
            main,
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self.loop.call_soon,
            done_callback=finished,
            host_uses_signal_set_wakeup_fd=True,
        )

    def stop(self) -> None:
        """Ask the guest run to end (its nursery is cancelled; ``done`` resolves)."""
        self.stopping = True
        if self.token is not None and self._stop is not None:
            try:
                self.token.run_sync_soon(self._stop.set)
            except trio.RunFinishedError:  # pragma: no cover
                pass

    def soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run the plain function ``fn(*args)`` inside trio soon (it may touch trio objects)."""
        assert self.token is not None
        self.token.run_sync_soon(fn, *args)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``fn(*args)`` as a task of the guest's nursery."""
        assert self.nursery is not None
        self.soon(self.nursery.start_soon, fn, *args)


def check_no_trio_task(api: str) -> None:
    """Raise RuntimeError when called from a trio task (await the trio API there).

    Raises:
        RuntimeError: the caller is a trio task.
    """
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return
    raise RuntimeError(f"{api} is for asyncio code; inside trio await the trio API (dsh_orchestra.open_runtime, ...)")


async def acquire(api: str) -> Guest:
    """The running loop's guest run (started if needed), with one more user.

    Raises:
        RuntimeError: not called from asyncio, or from a trio task.
    """
    check_no_trio_task(api)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(f"{api} must be awaited from asyncio code (a running asyncio loop)") from None
    guest = _guests.get(loop)
    while guest is not None and guest.stopping:  # the previous one is ending: let it, then start anew
        await _uncancelled(guest.done)
        guest = _guests.get(loop)
    if guest is None:
        guest = Guest(loop)
        _guests[loop] = guest
        guest.start()
    guest.users += 1
    try:
        await asyncio.shield(guest.ready)
    except BaseException:
        await release(guest)
        raise
    return guest


async def release(guest: Guest) -> None:
    """One user fewer; the last one stops the guest run and waits for it to end."""
    guest.users -= 1
    if guest.users == 0:
        guest.stop()
        await _uncancelled(guest.done)
        if _guests.get(guest.loop) is guest:
            del _guests[guest.loop]


async def _uncancelled(future: asyncio.Future[Any]) -> None:
    """Wait for ``future`` even when the awaiting task is cancelled meanwhile; a cancellation
    that arrived is raised afterwards."""
    cancelled: BaseException | None = None
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled


async def call(guest: Guest, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)`` as a task of the guest run; its value, or its exception (the same object).

    Cancelling the awaiting asyncio task cancels the trio task and waits for it to end.

    Raises:
        asyncio.CancelledError: the awaiting task was cancelled, or the trio side cancelled the
            job (the guest run is ending).
    """
    finished: asyncio.Future[None] = guest.loop.create_future()
    scope = trio.CancelScope()
    box: list[outcome.Outcome[T]] = []

    async def job() -> None:
        try:
            with scope:
                box.append(await outcome.acapture(fn, *args))
        finally:
            if not finished.done():
                finished.set_result(None)

    guest.spawn(job)
    try:
        await asyncio.shield(finished)
    except asyncio.CancelledError:
        guest.soon(scope.cancel)
        await _uncancelled(finished)
        raise
    if not box:
        raise asyncio.CancelledError("the trio guest run cancelled this call")
    result = box[0]
    if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
        raise asyncio.CancelledError("the trio side cancelled this call")
    return result.unwrap()


_TRIO_IN_ASYNCIO = ("bad yield", "must be called from async context")
"""What asyncio's task (a trio trap yielded) or trio (no trio task) says when trio code runs on asyncio."""


class TrioObjectError(TypeError):
    """A trio-only object was used where asyncio code runs (see docs/embedding.md)."""


def on_asyncio(fn: Callable[..., Any], guest: Guest, what: str) -> Callable[..., Awaitable[Any]]:
    """``fn`` (an asyncio coroutine function: a policy or an answerer) as a trio async function
    that runs it as a task of the asyncio loop and hands its result back to trio.

    Cancelled on the trio side (a policy's deadline), it cancels the asyncio task; a coroutine
    that awaits a trio-only object raises TrioObjectError naming ``what``.
    """
    context = contextvars.copy_context()  # the asyncio caller's (not trio's: sniffio says asyncio)

    @functools.wraps(fn)
    async def trio_side(*args: Any) -> Any:
        task = guest.loop.create_task(fn(*args), context=context.copy())
        settled = trio.Event()
        task.add_done_callback(lambda _task: guest.soon(settled.set))
        try:
            await settled.wait()
        except trio.Cancelled:
            task.cancel()
            raise
        if task.cancelled():
            raise RuntimeError(f"the asyncio {what} was cancelled")
        error = task.exception()
        if isinstance(error, RuntimeError) and any(sign in str(error) for sign in _TRIO_IN_ASYNCIO):
            raise TrioObjectError(
                f"the {what} {getattr(fn, '__qualname__', fn)!r} awaited a trio-only object; under dsh_orchestra.aio an "
                f"async {what} runs on the asyncio loop: await asyncio things in it (or pass a plain function)"
            ) from error
        return task.result()

    return trio_side


def asyncio_callable(value: Any) -> bool:
    """True for a coroutine function (or an object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(value):
        return True
    method = inspect.getattr_static(type(value), "__call__", None) if callable(value) and not inspect.isroutine(value) else None
    return inspect.iscoroutinefunction(method)

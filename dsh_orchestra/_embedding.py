"""What the blocking (``sync``) and asyncio (``aio``) APIs share: the wrapped trio objects.

Both wrap the same trio entry points; each side adds only its calling convention (a job on a
trio thread, or a task of the loop's trio guest run). Here, once: the handles' state (a
session's id, a runtime's name, ...), the task that keeps ``open_runtime``'s block open on the
trio side, and ``compare_runs`` (pure: nothing runs on trio).
"""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar, Generic, Mapping, Sequence, TypeVar

import trio

from . import session as _session
from .eval import CompareInputError, compare_runs as _compare_runs
from .results import read_results

H = TypeVar("H")  # how a side reaches trio: a TrioThread (sync) or a Guest (aio)
S = TypeVar("S")  # the side's Session class


class SessionHandle(Generic[H]):
    """A trio ``Session`` wrapped for one side: its id and state (the calls are the side's)."""

    api: ClassVar[str] = ""  # "sync" or "aio": the package, in reprs

    def __init__(self, host: H, session: _session.Session) -> None:
        self._host = host
        self.trio_session = session
        """The trio ``Session`` (trio code: reach it through ``Runtime.call``, not directly)."""

    def __repr__(self) -> str:
        return f"{self.api}.Session({self.id!r}, runtime={self.trio_session.runtime.name!r})"

    @property
    def id(self) -> str:
        """The session id."""
        return self.trio_session.id

    @property
    def abandoned(self) -> bool:
        """True once a run on this session was cancelled (or interrupted) mid-turn."""
        return self.trio_session.abandoned


class RuntimeHandle(Generic[H, S]):
    """A trio ``Runtime`` wrapped for one side: its name, state and session handles."""

    api: ClassVar[str] = ""
    session_type: ClassVar[type[Any]]  # the side's Session class (S)

    def __init__(self, host: H, runtime: _session.Runtime) -> None:
        self._host = host
        self.trio_runtime = runtime
        """The trio ``Runtime`` (trio code: use ``call`` for its coroutines)."""

    def __repr__(self) -> str:
        return f"{self.api}.Runtime({self.name!r}, alive={self.alive})"

    @property
    def name(self) -> str:
        """The runtime's display name."""
        return self.trio_runtime.name

    @property
    def alive(self) -> bool:
        """True while the connection is open."""
        return self.trio_runtime.alive

    def session(self, id: str | None = None) -> S:
        """A handle on session ``id`` (a fresh unique id when None)."""
        return self.session_type(self._host, self.trio_runtime.session(id))  # type: ignore[no-any-return]


class Host:
    """An async context manager (``opened()``) entered and left by one trio task of the side's
    loop, so that a ``with``/``async with`` block of the side holds it open. ``start`` and
    ``stop`` are trio coroutines: each side runs them with its calling convention."""

    def __init__(self, opened: Callable[[], Any], nursery: Callable[[], trio.Nursery]) -> None:
        self._opened = opened
        self._nursery = nursery
        self._leave = trio.Event()
        self._done = trio.Event()
        self._error: BaseException | None = None

    async def start(self) -> Any:
        """Enter the context manager in a task of its own; its value."""
        return await self._nursery().start(self._run)

    async def _run(self, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            async with self._opened() as value:
                task_status.started(value)
                started = True
                await self._leave.wait()
        except BaseException as exc:
            if not started:
                raise
            self._error = exc  # raised by stop()
        finally:
            self._done.set()

    async def stop(self, *, shield: bool = False) -> None:
        """Leave the context manager and wait until it has closed (``shield``: even when
        cancelled); what it raised on the way out is raised here."""
        self._leave.set()
        with trio.CancelScope(shield=shield):
            await self._done.wait()
        if self._error is not None and not isinstance(self._error, trio.Cancelled):
            raise self._error


def compare_runs(
    base: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    candidate: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    **kwargs: Any,
) -> dict[str, Any]:
    """``dsh_orchestra.eval.compare_runs`` on two results files (paths) or their lines; same
    keyword arguments (``scorers``, ``reducer``, ``seed``) and document. Pure: nothing runs on
    trio, nothing to await.

    Raises:
        CompareInputError: a results file does not exist (or the runs cannot be compared).
        ResultsFileError: a line is not a result line.
    """
    return _compare_runs(result_lines(base, "base"), result_lines(candidate, "candidate"), **kwargs)


def result_lines(value: str | os.PathLike[str] | Sequence[Mapping[str, Any]], what: str) -> Sequence[Mapping[str, Any]]:
    """A results file's lines (read by ``results.read_results``), or ``value`` itself when it is lines.

    Raises:
        CompareInputError: the file does not exist.
        ResultsFileError: a line is not a result line.
    """
    if not isinstance(value, (str, os.PathLike)):
        return value
    if not os.path.isfile(value):
        raise CompareInputError(f"{what} results file {os.fspath(value)!r} does not exist")
    return [line.to_json() for line in read_results(value)]

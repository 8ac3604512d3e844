"""Turn groups: many turns in flight on one runtime without a task each.

Owns: sending each turn's ``session/prompt`` and ``session/wait`` from the caller's task,
settling turns from the connection's reader (each turn is its request's pending entry,
``Connection.send_request``), and handing out each turn's outcome as it settles. Must not know about pools or graphs.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING, Any

import trio

from .._logging import enter_log_context, exit_log_context
from .._params import Param, ParamTypeError, ParamValueError, integer
from ..protocol import (
    SESSION_PROMPT,
    SESSION_WAIT,
    EmptyResult,
    PromptParams,
    PromptResult,
    SessionIdParams,
    TransportClosedError,
)
from ..transport import DEFAULT_CAPACITY, Connection
from ._session import PromptInput, Session, _Feed, _wire_blocks
from ._turn import TurnResult

if TYPE_CHECKING:
    from ._runtime import Runtime

Outcome = TurnResult | Exception
"""What a turn of a group comes to: its ``TurnResult``, or the exception ``session.run`` raises."""

_POSITIVE = integer(1, "None or an integer >= 1")


class _Turn(_Feed):
    """One turn of a group: the run's feed (router target, collector) plus where it stands.

    No task, no closure, no Event: the connection wakes the turn, which calls the group back.
    """

    # (10 slots with _Feed's: a 112-byte block; whether its prompt was answered is whether
    # the feed has its collector, ``_Feed.start``)
    __slots__ = ("group", "session", "started", "request", "bound")

    def __init__(self, group: TurnGroup, session: Session, capacity: int, started: float) -> None:
        super().__init__(session.id, capacity)
        self.group = group
        self.session = session
        self.started = started
        self.request = 0  # the request in flight (for ``Connection.forget``); 0: none
        self.bound: object = None  # its entry in ``runtime.contexts`` (approval records' log fields)

    @property
    def waiting(self) -> bool:
        """Its prompt was answered: its session/wait is sent or due."""
        return self._collector is not None

    def wake(self, reply: dict[str, Any] | None = None) -> None:
        """Its request's reply (None: the connection closed): the turn is its own pending
        entry (``Connection.send_request``), so a request in flight costs no object of its own."""
        self.group._reply(self, reply)


class TurnGroup:
    """Many turns in flight on one runtime, driven by one task: ``runtime.turns()``.

    ``await turns.start(session, input)`` sends the prompt; ``async for session, outcome in
    turns`` hands out each turn's outcome as it settles: the ``TurnResult`` ``session.run``
    would return for it, or the exception it would raise (``TransportClosedError``,
    ``JsonRpcResponseError``, ``SdkProtocolError``, ``SubscriberOverflowError``), which fails
    that turn only. Each turn's ``session/wait`` is sent from ``start`` or the iteration, so
    the turns only progress while the group's task is in one of them.

    Leaving the block (normally, by an exception or by cancellation) abandons every turn
    still in flight, as a cancelled ``session.run`` does; outcomes not taken are dropped.
    """

    def __init__(self, runtime: Runtime, *, limit: int | None = None, capacity: int = DEFAULT_CAPACITY) -> None:
        if limit is not None:
            _POSITIVE.check("limit", limit)
        integer(1).check("capacity", capacity)
        self.runtime = runtime
        self.limit = limit
        self._capacity = capacity
        self._connection: Connection | None = None
        self._open: set[_Turn] = set()  # started and not settled
        self._to_wait: deque[_Turn] = deque()  # prompt answered: session/wait to send
        self._done: deque[tuple[Session, Outcome]] = deque()  # settled, not handed out yet
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False

    def __repr__(self) -> str:
        return f"TurnGroup(runtime={self.runtime.name!r}, in_flight={len(self._open)}, limit={self.limit})"

    @property
    def in_flight(self) -> int:
        """Turns started and not settled yet."""
        return len(self._open)

    async def __aenter__(self) -> TurnGroup:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Abandon every turn in flight (as a cancelled ``session.run`` does) and drop the
        outcomes not taken; later ``start`` calls raise RuntimeError. Idempotent."""
        self._closed = True
        connection = self._connection
        for turn in self._open:
            if turn.request > 0 and connection is not None:
                connection.forget(turn.request)
            self._release(turn)
            self.runtime.abandon(turn.session.id)
        self._open.clear()
        self._to_wait.clear()
        self._done.clear()
        self._lot.unpark_all()

    async def start(self, session: Session, input: PromptInput) -> None:
        """Send ``input`` to ``session`` (session/prompt) as a new turn of this group.

        With ``limit``, first waits (sending other turns' session/wait meanwhile) until fewer
        than ``limit`` turns are in flight. A failure of the turn itself (the runtime went
        away, the prompt was rejected) is that turn's outcome, not raised here. Not a
        schedule point unless it waits (the bound, or a full pipe), so prompts started in a
        loop go out back to back; cancellation is checked.

        Cancellation: a ``start`` cancelled before its prompt went out starts no turn (the
        session is untouched); a turn whose session/wait it was sending stays in flight and
        its wait goes out later.

        Raises:
            ParamTypeError / ParamValueError: ``session`` is not a session of this runtime, or
                ``input`` is not a prompt (nothing is sent).
            RuntimeError: the session was abandoned, or the group is closed.
        """
        if not isinstance(session, Session):
            raise ParamTypeError(Param("session", session, spelled="session"),
                                 f" must be a Session of this runtime, not {type(session).__name__}")
        if session.runtime is not self.runtime:
            raise ParamValueError(Param("session", session, spelled="session"),
                                  f" {session.id!r} belongs to runtime {session.runtime.name!r}, not {self.runtime.name!r}")
        try:
            blocks = _wire_blocks(input)
        except TypeError as exc:
            raise ParamTypeError(Param("input", input, spelled="input"), f": {exc}") from None
        except ValueError as exc:
            raise ParamValueError(Param("input", input, spelled="input"), f": {exc}") from None
        if self._closed:
            raise RuntimeError("this turn group was closed; open another with runtime.turns()")
        session._check()
        await self._send_waits()
        while self.limit is not None and len(self._open) >= self.limit:
            await self._progress()
        if self._closed:
            raise RuntimeError("this turn group was closed; open another with runtime.turns()")
        session._check()
        turn = _Turn(self, session, self._capacity, trio.current_time())
        self._open.add(turn)
        runtime = self.runtime
        if runtime.approvals is not None:  # approval records find the caller's log fields
            token, fields = enter_log_context({"runtime": runtime.name, "session": session.id})
            exit_log_context(token)
            turn.bound = runtime.contexts.push(session.id, fields)
        runtime.router.add(session.id, turn)
        await self._send(turn, SESSION_PROMPT, PromptParams(session_id=session.id, content_blocks=blocks))

    def __aiter__(self) -> TurnGroup:
        return self

    async def __anext__(self) -> tuple[Session, Outcome]:
        """The next settled turn's (session, outcome), in the order they settle; the
        iteration ends when every turn started so far was handed out."""
        await trio.lowlevel.checkpoint()
        while True:
            if self._done:
                return self._done.popleft()
            if self._to_wait:
                await self._send_waits()
            elif not self._open:
                raise StopAsyncIteration
            else:
                await self._lot.park()

    async def _progress(self) -> None:
        """Send the waits due, else wait until a reply changed something."""
        if self._to_wait:
            await self._send_waits()
        else:
            await self._lot.park()

    async def _send_waits(self) -> None:
        to_wait = self._to_wait
        while to_wait:
            turn = to_wait.popleft()
            await self._send(turn, SESSION_WAIT, SessionIdParams(session_id=turn.session.id))

    async def _send(self, turn: _Turn, method: str, params: Any) -> None:
        try:
            connection = self._connection = self.runtime.connection
            turn.request = -1  # being sent: a reply that comes meanwhile resets it to 0
            request = await connection.send_request(method, params, turn)
            if turn.request == -1:  # no reply yet
                if turn in self._open:
                    turn.request = request
                else:  # the group was closed while it was written: nobody takes the reply
                    turn.request = 0
                    connection.forget(request)
        except TransportClosedError as exc:
            self._settle(turn, exc)
        except BaseException:
            # Cancelled before any of it was written (a write cancelled half-way fails the
            # connection, which settles the turn): a wait goes out later, a prompt's turn
            # never started. Either way no turn is left in flight that nothing will settle.
            if turn.request == -1 and turn in self._open:
                turn.request = 0
                if method == SESSION_WAIT:
                    self._to_wait.appendleft(turn)
                else:
                    self._release(turn)
                    self._open.discard(turn)
                    self._lot.unpark_all()
            raise

    def _reply(self, turn: _Turn, reply: dict[str, Any] | None) -> None:
        """``turn``'s reply, in the connection's reader (``_Turn.wake``): never raises."""
        turn.request = 0
        if self._closed or turn not in self._open:
            return
        connection = self._connection
        assert connection is not None
        outcome: Outcome
        try:
            if not turn.waiting:  # the prompt's reply (after it: the wait's)
                receipt: PromptResult = connection.result_of(SESSION_PROMPT, reply, PromptResult)
                turn.start(receipt.message_id)
                self._to_wait.append(turn)
                self._lot.unpark_all()
                return
            connection.result_of(SESSION_WAIT, reply, EmptyResult)
            self._release(turn)  # as session.run: detached before the collector is asked
            collector = turn.collector()
            duration = trio.current_time() - turn.started
            runtime = self.runtime
            outcome = collector.result(
                duration=duration,
                approvals=runtime.decisions_for(collector, turn.started),
                questions=runtime.questions_for(collector, turn.started),
            )
        except Exception as exc:  # noqa: BLE001 (the turn's outcome)
            outcome = exc
        self._settle(turn, outcome)

    def _settle(self, turn: _Turn, outcome: Outcome) -> None:
        if turn not in self._open:  # the group was closed meanwhile
            return
        self._release(turn)
        self._open.discard(turn)
        self._done.append((turn.session, outcome))
        self._lot.unpark_all()

    def _release(self, turn: _Turn) -> None:
        """Detach ``turn`` from the router and the runtime's turn contexts (idempotent)."""
        session_id = turn.session.id
        self.runtime.router.detach(session_id, turn)
        if turn.bound is not None:
            self.runtime.contexts.pop(session_id, turn.bound)
            turn.bound = None

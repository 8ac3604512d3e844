"""The session handle: prompt, query, wait, resume, run, events, working directory.

Owns: turning input into content blocks, the prompt -> wait -> collect sequence, abandoned
sessions. Must not know about pools or graphs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence, cast

import attrs
import orjson
import trio

from .._params import Param, ParamTypeError, ParamValueError
from .._tracing import observed_turn
from ..protocol import (
    SESSION_PROMPT,
    SESSION_QUERY,
    SESSION_QUERY_COMPLETED,
    SESSION_WAIT,
    WORKING_DIRECTORY_GET,
    WORKING_DIRECTORY_SET,
    ContentBlock,
    EmptyResult,
    PromptParams,
    PromptResult,
    QueryParams,
    QueryResult,
    SdkProtocolError,
    SessionIdParams,
    SessionQueryCompletedParams,
    SubscriberOverflowError,
    TransportClosedError,
    WorkingDirectoryResult,
    WorkingDirectorySetParams,
    params_of,
    session_of,
    structure,
    unstructure,
)
from ..transport import DEFAULT_CAPACITY, Notification, Subscription
from ._turn import TurnCollector, TurnResult

if TYPE_CHECKING:
    from ._runtime import Runtime

log = logging.getLogger("dsh_orchestra.session")

PromptInput = str | Sequence[ContentBlock | dict[str, Any]]


_PROMPT = Param("prompt", spelled="a prompt")  # the subject of a sentence
_PROMPT_AT = Param("prompt", spelled="prompt")  # where in it


def content_blocks(value: PromptInput) -> list[dict[str, Any]]:
    """Wire content blocks for ``value``: a string becomes one text block.

    Raises:
        ValueError / TypeError: the input is empty or a block is malformed.
    """
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, (bytes, dict)) or not isinstance(value, Sequence):
        raise ParamTypeError(_PROMPT, f" is a string or a list of content blocks, not {type(value).__name__}")
    if not value:
        raise ParamValueError(_PROMPT, " needs at least one content block, not an empty list")
    blocks: list[dict[str, Any]] = []
    for index, block in enumerate(value):
        raw = block if isinstance(block, dict) else unstructure(block) if attrs.has(type(block)) else None
        if not isinstance(raw, dict):
            raise ParamTypeError(_PROMPT_AT, f": content block {index} must be an object, not {type(block).__name__}")
        kind = raw.get("type")
        if not isinstance(kind, str) or not kind:
            raise ParamValueError(_PROMPT_AT, f": content block {index} needs a string 'type', not {kind!r}")
        if kind == "text" and not isinstance(raw.get("text"), str):
            raise ParamValueError(_PROMPT_AT, f": text block {index} needs a string 'text'")
        if kind == "image" and "attachment" not in raw:
            if not isinstance(raw.get("data"), str) or not isinstance(raw.get("mimeType"), str):
                raise ParamValueError(_PROMPT_AT, f": image block {index} needs base64 'data' and a 'mimeType' string")
        blocks.append(raw)
    return blocks


def _wire_blocks(value: PromptInput) -> list[ContentBlock]:
    """``content_blocks(value)`` as the params classes' field: blocks already in wire form,
    which the converter sends as they are (a user's extra keys included)."""
    return cast("list[ContentBlock]", content_blocks(value))


@attrs.frozen(kw_only=True)
class CommandResult:
    """A command query's outcome: ``session.query.completed`` plus the opaque execution."""

    session_id: str
    command_id: str | None
    final_response: str
    finish_reason: str | None
    execution: Any = None


class Session:
    """A handle on one root session of a runtime.

    Cancellation of ``run``: the turn keeps running in the runtime (the wire has no cancel);
    the session is marked abandoned and later calls raise RuntimeError.
    """

    def __init__(self, runtime: Runtime, session_id: str) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ParamValueError("a session ", Param("session_id", session_id, spelled="id"),
                                  f" must be a non-empty string, not {session_id!r}")
        self.runtime = runtime
        self.id = session_id

    def __repr__(self) -> str:
        return f"Session({self.id!r}, runtime={self.runtime.name!r})"

    @property
    def abandoned(self) -> bool:
        """True once a run on this session was cancelled mid-turn."""
        return self.id in self.runtime.abandoned

    def _check(self) -> None:
        if self.abandoned:
            raise RuntimeError(
                f"session {self.id!r} was abandoned by a cancelled run and may still be busy "
                "in the runtime; use a new session"
            )

    async def prompt(self, input: PromptInput) -> str:
        """Queue ``input`` (session/prompt) and return the queued message id."""
        self._check()
        params = PromptParams(session_id=self.id, content_blocks=_wire_blocks(input))
        result: PromptResult = await self.runtime.connection.request(SESSION_PROMPT, params, PromptResult)
        return result.message_id

    async def query(self, input: PromptInput) -> QueryResult:
        """session/query: a prompt receipt, or a command's execution.

        Raises:
            MethodNotSupportedError: the connected runtime lacks session/query (0.2.1-rc.2).
        """
        self._check()
        params = QueryParams(session_id=self.id, content_blocks=_wire_blocks(input))
        result: QueryResult = await self.runtime.connection.request(SESSION_QUERY, params, QueryResult)
        return result

    async def wait(self) -> None:
        """session/wait: until the root is idle and its managed descendants settled."""
        self._check()
        await self.runtime.connection.request(SESSION_WAIT, SessionIdParams(session_id=self.id), EmptyResult)

    async def get_working_directory(self) -> str:
        """The session's effective working directory (absolute)."""
        self._check()
        result: WorkingDirectoryResult = await self.runtime.connection.request(
            WORKING_DIRECTORY_GET, SessionIdParams(session_id=self.id), WorkingDirectoryResult
        )
        return result.cwd

    async def set_working_directory(self, path: str) -> str:
        """Change the effective directory (absolute, or relative to the current one)."""
        self._check()
        result: WorkingDirectoryResult = await self.runtime.connection.request(
            WORKING_DIRECTORY_SET,
            WorkingDirectorySetParams(session_id=self.id, path=str(path)),
            WorkingDirectoryResult,
        )
        return result.cwd

    def events(self, *, capacity: int = DEFAULT_CAPACITY) -> Subscription:
        """A trio receive channel of this session tree's notifications, in wire order.

        Descendants are included once their ``subagent.started`` was seen. The channel is
        bounded: a reader that falls ``capacity`` behind gets SubscriberOverflowError.
        Close it (``with session.events() as events:``) when done.
        """
        return self.runtime.router.subscribe(self.id, capacity=capacity)

    @observed_turn
    async def run(self, input: PromptInput, *, capacity: int = DEFAULT_CAPACITY) -> TurnResult:
        """Send one prompt and wait (session/wait) until the session tree has settled.

        The session tree's notifications go straight from the connection's reader into the
        turn collector (only those before the prompt's response, at most ``capacity``, wait
        in a buffer), so a run holds its events once, compactly, however long it takes.

        Raises:
            TransportClosedError: the runtime went away before the turn settled.
            JsonRpcResponseError: the prompt or the wait was rejected.
            SdkProtocolError: the runtime sent malformed events for this session.

        Cancellation: the turn keeps running in the runtime (the wire has no cancel);
        the session is marked abandoned and later calls raise RuntimeError.
        """
        self._check()
        start = trio.current_time()
        feed = _Feed(self.id, capacity)
        router = self.runtime.router
        router.add(self.id, feed)
        try:
            message_id = await self.prompt(input)
            feed.start(message_id)
            # session/wait, without wait()'s coroutine frame (held for the whole turn)
            await self.runtime.connection.request(SESSION_WAIT, SessionIdParams(session_id=self.id), EmptyResult)
        except trio.Cancelled:
            self.runtime.abandon(self.id)
            raise
        finally:
            router.detach(self.id, feed)
        collector = feed.collector()
        duration = trio.current_time() - start
        approvals = self.runtime.decisions_for(collector, start)
        questions = self.runtime.questions_for(collector, start)
        return collector.result(duration=duration, approvals=approvals, questions=questions)

    @observed_turn
    async def run_query(self, input: PromptInput) -> TurnResult | CommandResult:
        """session/query, then settle: a TurnResult for ordinary input, a CommandResult
        (from ``session.query.completed``) for a recognised command."""
        self._check()
        start = trio.current_time()
        with self.events() as events:
            result = await self.query(input)
            if result.kind == "prompt":
                if result.message_id is None:
                    raise SdkProtocolError("a prompt query result lacks messageId", method=SESSION_QUERY, path="result.messageId")
                collector = TurnCollector(self.id, result.message_id)
                try:
                    await self.wait()
                except trio.Cancelled:
                    self.runtime.abandon(self.id)
                    raise
                _drain(events, collector)
                return collector.result(duration=trio.current_time() - start)
            command_id = (result.execution or {}).get("commandId") if isinstance(result.execution, dict) else None
            while True:
                notification = await events.receive()
                if notification.method != SESSION_QUERY_COMPLETED or session_of(notification.params) != self.id:
                    continue
                completed = structure(notification.params, SessionQueryCompletedParams, method=SESSION_QUERY_COMPLETED)
                if command_id is None or completed.command_id == command_id:
                    return CommandResult(
                        session_id=self.id,
                        command_id=completed.command_id,
                        final_response=completed.final_response,
                        finish_reason=completed.finish_reason,
                        execution=result.execution,
                    )


def _decoded(line: bytes) -> Notification:
    """The notification whose wire line is ``line`` (as the connection's reader made it)."""
    frame = orjson.loads(line)
    return Notification(frame["method"], params_of(frame), line)


class _Feed:
    """A run's router target: buffers until the message id is known, then feeds the collector.

    It runs in the connection's reader, so it never raises: a protocol error is kept and
    raised by ``collector()`` once the wait returned.
    """

    __slots__ = ("_session_id", "_capacity", "_collector", "_pending", "_error")

    def __init__(self, session_id: str, capacity: int) -> None:
        self._session_id = session_id
        self._capacity = capacity
        self._collector: TurnCollector | None = None
        # made by the first early notification; each kept as its wire line when it has one
        # (decoded again by start): one bytes object instead of its tree of decoded dicts
        self._pending: list[Notification | bytes] | None = None
        self._error: Exception | None = None

    def push(self, notification: Notification) -> None:
        if self._error is not None:
            return
        if self._collector is None:
            pending = self._pending
            if pending is None:
                pending = self._pending = []
            if len(pending) >= self._capacity:
                self._error = SubscriberOverflowError(f"run of session {self._session_id!r}", self._capacity)
                self._pending = None
            else:
                raw = notification.raw
                pending.append(raw if raw else notification)
            return
        try:
            self._collector.feed(notification)
        except SdkProtocolError as exc:
            self._error = exc
        except Exception as exc:  # noqa: BLE001 (converted: a sink must never break the reader)
            error = SdkProtocolError(f"malformed {notification.method!r} for session {self._session_id!r}: {exc!r}",
                                     method=notification.method)
            error.__cause__ = exc
            self._error = error

    def fail(self, error: TransportClosedError) -> None:
        """Nothing to do: the run's own request raises the connection's error."""

    def start(self, message_id: str) -> None:
        """The prompt was answered: collect from its receipt on (buffered ones first)."""
        self._collector = TurnCollector(self._session_id, message_id)
        pending, self._pending = self._pending, None
        for early in pending or ():
            self.push(_decoded(early) if isinstance(early, bytes) else early)

    def collector(self) -> TurnCollector:
        """The fed collector.

        Raises:
            SdkProtocolError: the runtime sent a malformed event for this session.
            SubscriberOverflowError: more than ``capacity`` notifications preceded the receipt.
        """
        if self._error is not None:
            raise self._error
        assert self._collector is not None
        return self._collector


def _drain(events: Subscription, collector: TurnCollector) -> None:
    """Feed everything buffered so far (the wait's response came after all of it)."""
    while True:
        try:
            collector.feed(events.receive_nowait())
        except trio.WouldBlock:
            return

"""Turn collection: plain logic fed notifications, producing a TurnResult.

Owns: attributing a session tree's notifications to one prompt (by its messageId), the final
response, the finish reason and the subagent results. Pure: no trio, no I/O, so it is
unit-tested on recorded transcripts without processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import attrs
import orjson

from .. import _display
from ..protocol import (
    SESSION_EVENT,
    SESSION_ID,
    SUBAGENT_FINISHED,
    SUBAGENT_STARTED,
    AssistantMessageData,
    ContentBlock,
    LlmFailure,
    SdkProtocolError,
    SubagentFinishedParams,
    TurnEndData,
    child_of,
    parent_of,
    session_of,
    structure,
    text_of,
)
from ..transport import Notification

JsonObject = dict[str, Any]

_loads = orjson.loads


def _dumps(event: JsonObject) -> bytes:
    """Compact JSON of ``event`` in a bytes object of exactly its size.

    ``orjson.dumps`` returns its (kilobytes large) working buffer; slicing off the appended
    newline copies the result into a right-sized object: 10x less memory, and faster.
    """
    return orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE)[:-1]


class EventLog(Sequence[JsonObject]):
    """A turn's root events, kept as compact JSON and decoded on each access.

    A settled TurnResult thus holds about a fifth of the memory of decoded dicts (that matters
    with hundreds of sessions in flight) and is truly immutable: every access returns fresh
    objects. ``raw`` gives the JSON bytes, to write results out without decoding them. When
    indexing the same log many times, decode it once with ``list(result.events)``.
    """

    __slots__ = ("_lines",)

    def __init__(self, events: Iterable[JsonObject] = ()) -> None:
        self._lines: tuple[bytes, ...] = tuple(_dumps(event) for event in events)

    @classmethod
    def from_json(cls, lines: Iterable[bytes]) -> EventLog:
        """A log of already encoded events (one JSON object per item, no newline)."""
        log = cls.__new__(cls)
        log._lines = tuple(lines)
        return log

    @property
    def raw(self) -> tuple[bytes, ...]:
        """Each event as compact JSON bytes."""
        return self._lines

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, index: int) -> JsonObject: ...

    @overload
    def __getitem__(self, index: slice) -> EventLog: ...

    def __getitem__(self, index: int | slice) -> JsonObject | EventLog:
        if isinstance(index, slice):
            return EventLog.from_json(self._lines[index])
        event: JsonObject = _loads(self._lines[index])
        return event

    def __iter__(self) -> Iterator[JsonObject]:
        for line in self._lines:
            yield _loads(line)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLog):
            return self._lines == other._lines
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._lines)

    def __repr__(self) -> str:
        return f"EventLog({list(self)!r})"


OK_FINISH_REASONS = frozenset({"completed", "max-tokens"})
"""Finish reasons of a turn that produced its answer (a ``max-tokens`` answer is cut, not failed)."""


def _event_log(value: Iterable[JsonObject]) -> EventLog:
    return value if isinstance(value, EventLog) else EventLog(value)


@attrs.frozen(kw_only=True)
class SubagentResult:
    """What one subagent reported in ``subagent.finished``."""

    provider: str
    agent_id: str
    parent_session_id: str
    child_session_id: str
    status: str
    stop_reason: str
    last_assistant_message: tuple[ContentBlock, ...] = ()
    text: str = ""


@attrs.frozen(kw_only=True)
class TurnResult:
    """Everything one prompt produced, up to the session/wait that settled it.

    ``events`` are the root session's event objects (raw wire JSON, an :class:`EventLog`) of
    the turns this prompt owns, from its receipt on; ``notifications`` are the descendants'
    notifications of the interval.
    A model failure is ``finish_reason == "error"`` with ``error`` set, not an exception.
    """

    session_id: str
    message_id: str
    final_response: str
    finish_reason: str | None
    error: LlmFailure | None
    events: EventLog = attrs.field(converter=_event_log)
    notifications: tuple[Notification, ...]
    subagents: tuple[SubagentResult, ...]
    duration: float
    turns: tuple[int, ...] = ()
    approvals: tuple[Any, ...] = ()
    questions: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the last owned turn ended ``completed``."""
        return self.finish_reason == "completed"

    def __repr__(self) -> str:
        return _display.turn_text(self)

    def _repr_html_(self) -> str:
        return _display.turn_html(self)


def _bad(path: str, expected: str, value: Any) -> SdkProtocolError:
    return SdkProtocolError(
        f"invalid params for {SESSION_EVENT!r}: expected {expected}, not {type(value).__name__} @ {path}",
        method=SESSION_EVENT,
        path=path,
    )


def check_event(params: JsonObject) -> JsonObject:
    """Validate a ``session.event`` envelope and return its event object."""
    event = params.get("event")
    if type(event) is dict and type(event.get("type")) is str and type(event.get("seq")) is int:
        data = event.get("data")
        if type(data) is dict or (data is None and "data" not in event):  # the usual event, fast
            return event
    if not isinstance(event, dict):
        raise _bad("params.event", "an object", event)
    if not isinstance(event.get("type"), str):
        raise _bad("params.event.type", "a string", event.get("type"))
    seq = event.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise _bad("params.event.seq", "an integer", seq)
    if not isinstance(event.get("data", {}), dict):
        raise _bad("params.event.data", "an object", event.get("data"))
    return event


def _data(event: JsonObject, cls: type, what: str) -> Any:
    return structure(event.get("data"), cls, method=SESSION_EVENT, what=f"params.event.data ({what})")


def is_receipt(event: JsonObject, message_id: str) -> bool:
    """True for the ``agent/inbox/spliced`` that inserted ``message_id``."""
    if event.get("type") != "agent/inbox/spliced":
        return False
    inserted = event.get("data", {}).get("inserted")
    if not isinstance(inserted, list):
        raise _bad("params.event.data.inserted", "a list", inserted)
    return any(isinstance(m, dict) and m.get("id") == message_id for m in inserted)


def _prompt_id(event: JsonObject) -> str | None:
    """The id of a user/message that is a user prompt, else None."""
    data = event.get("data", {})
    source = data.get("source")
    prompt = data.get("id")
    if isinstance(source, dict) and source.get("kind") == "user" and isinstance(prompt, str):
        return prompt
    return None


class _Tree:
    """A turn's descendants: only turns that spawn subagents need it."""

    __slots__ = ("ours", "pending", "notifications", "subagents")

    def __init__(self) -> None:
        self.ours: set[str] = set()  # children spawned by our turns (and their descendants)
        self.pending: list[str] = []  # started while a turn's ownership is unknown
        self.notifications: list[Notification] = []
        self.subagents: list[SubagentResult] = []


def _subagent(params: JsonObject) -> SubagentResult:
    finished = structure(params, SubagentFinishedParams, method=SUBAGENT_FINISHED)
    blocks = tuple(finished.last_assistant_message or ())
    return SubagentResult(
        provider=finished.provider,
        agent_id=finished.agent_id,
        parent_session_id=finished.parent_session_id,
        child_session_id=finished.child_session_id,
        status=finished.status,
        stop_reason=finished.stop_reason,
        last_assistant_message=blocks,
        text=text_of(blocks),
    )


class TurnCollector:
    """Feed it a session tree's notifications in wire order; ``result()`` builds the TurnResult.

    A turn belongs to this prompt when it consumed the prompt's user message, or when it is a
    continuation (no user prompt of its own, e.g. started by a subagent's completion) of a turn
    that belongs to it. Notifications before the prompt's receipt are skipped.
    """

    __slots__ = (
        "session_id", "message_id", "_receipt_seen", "_prelude", "_events", "_turn_start",
        "_turn_assistant", "_turn_owned", "_last_owned", "_owned_turns", "_final", "_finish",
        "_error", "_tree",
    )

    def __init__(self, session_id: str, message_id: str) -> None:
        self.session_id = session_id
        self.message_id = message_id
        self._receipt_seen = False
        # Root events are kept encoded (EventLog): decoded dicts of hundreds of sessions in
        # flight would dominate the client's memory.
        self._prelude: list[bytes] | None = None  # see _prelude_event
        self._events: list[bytes] = []
        # where the open turn's events start in _events (-1: no turn open); they are cut off
        # again if the turn is not this prompt's (one list per turn in flight, not two)
        self._turn_start = -1
        self._turn_assistant: JsonObject | None = None  # its last assistant/message
        self._turn_owned: bool | None = None
        self._last_owned = False
        self._owned_turns: tuple[int, ...] = ()  # a prompt owns one turn or a few: no list
        self._final: str = ""
        self._finish: str | None = None
        self._error: LlmFailure | None = None
        self._tree: _Tree | None = None  # made at the first subagent edge: most turns have none

    @property
    def receipt_seen(self) -> bool:
        """True once the prompt's receipt arrived."""
        return self._receipt_seen

    @property
    def children(self) -> frozenset[str]:
        """The descendant sessions attributed to this prompt."""
        return frozenset(self._tree.ours) if self._tree is not None else frozenset()

    def feed_all(self, notifications: Iterable[Notification]) -> None:
        """Feed many notifications."""
        for notification in notifications:
            self.feed(notification)

    def feed(self, notification: Notification) -> None:
        """Feed one notification of the session tree."""
        params = notification.params
        method = notification.method
        if method == SESSION_EVENT and params.get(SESSION_ID) == self.session_id:  # session_of, inlined
            event = check_event(params)
            if not self._receipt_seen:
                if not is_receipt(event, self.message_id):
                    return
                self._receipt_seen = True
                self._events.append(_dumps(event))
                self._prelude = []
                return
            if self._prelude is not None:
                self._prelude_event(event)
                return
            self._root_event(event)
            return
        if not self._receipt_seen:
            return
        if method == SUBAGENT_STARTED:
            parent, child = parent_of(params), child_of(params)
            tree = self._tree
            if child is not None:
                if tree is not None and parent in tree.ours:
                    tree.ours.add(child)
                elif parent == self.session_id:
                    owned = self._turn_owned if self._turn_start >= 0 else self._last_owned
                    if owned is None:
                        self._grown().pending.append(child)
                    elif owned:
                        self._grown().ours.add(child)
            tree = self._tree
            if tree is not None and (child in tree.ours or child in tree.pending):
                tree.notifications.append(notification)
            return
        tree = self._tree
        if tree is None:
            return
        sid = child_of(params) if method == SUBAGENT_FINISHED else session_of(params)
        if sid in tree.ours:
            tree.notifications.append(notification)
            if method == SUBAGENT_FINISHED:
                tree.subagents.append(_subagent(params))

    def _grown(self) -> _Tree:
        if self._tree is None:
            self._tree = _Tree()
        return self._tree

    def _prelude_event(self, event: JsonObject) -> None:
        """Root events after the receipt, before it is known whether a turn was running then.

        A prompt sent while a turn runs is spliced into that turn (transcript 07, the second
        queued prompt) but only a later turn can claim it. A ``turn/end`` before any
        ``turn/start`` shows the buffered events were that earlier turn's: they are dropped.
        """
        assert self._prelude is not None
        kind = event["type"]
        if kind == "turn/end":
            self._prelude = None
        elif kind == "turn/start":
            self._events.extend(self._prelude)
            self._prelude = None
            self._root_event(event)
        else:
            self._prelude.append(_dumps(event))

    def _root_event(self, event: JsonObject) -> None:
        kind = event["type"]
        if kind == "turn/start":
            if self._turn_start >= 0:  # the open turn never ended: its events are dropped
                del self._events[self._turn_start:]
            self._turn_start = len(self._events)
            self._turn_owned = None
            self._turn_assistant = None
        if self._turn_start < 0:  # between turns: splices, status, plugin bookkeeping
            if self._last_owned or not self._owned_turns:
                self._events.append(_dumps(event))
            return
        self._events.append(_dumps(event))
        if kind == "assistant/message":
            self._turn_assistant = event
        elif kind == "user/message" and self._turn_owned is not True:
            prompt = _prompt_id(event)
            if prompt == self.message_id:
                self._settle_ownership(True)
            elif prompt is not None:
                self._settle_ownership(False)
        elif kind == "turn/end":
            if self._turn_owned is None:  # no prompt of its own: a continuation
                self._settle_ownership(self._last_owned)
            data: TurnEndData = _data(event, TurnEndData, "turn/end")
            if self._turn_owned:
                self._owned_turns += (data.turn,)
                self._finish = data.reason.kind
                self._error = data.reason.error
                if self._turn_assistant is not None:
                    message: AssistantMessageData = _data(self._turn_assistant, AssistantMessageData, "assistant/message")
                    self._final = text_of(message.message.content)
            else:  # another prompt's turn: its events go
                del self._events[self._turn_start:]
            self._last_owned = bool(self._turn_owned)
            self._turn_start = -1
            self._turn_owned = None
            self._turn_assistant = None

    def _settle_ownership(self, owned: bool) -> None:
        self._turn_owned = owned
        tree = self._tree
        if tree is not None:
            if owned:
                tree.ours.update(tree.pending)
            tree.pending.clear()

    def result(self, *, duration: float, approvals: tuple[Any, ...] = (), questions: tuple[Any, ...] = ()) -> TurnResult:
        """The TurnResult of everything fed so far.

        Raises:
            SdkProtocolError: the prompt's receipt never arrived.
        """
        if not self._receipt_seen:
            raise SdkProtocolError(
                f"session {self.session_id!r} settled without the receipt of message {self.message_id!r}",
                method=SESSION_EVENT,
            )
        start = self._turn_start  # a turn still open when the wait returned (teardown)
        if start >= 0 and not (self._turn_owned or (self._turn_owned is None and self._last_owned)):
            events = self._events[:start]  # not this prompt's
        else:
            events = list(self._events)
        tree = self._tree
        if self._prelude:  # settled before any turn boundary: nothing shows they were foreign
            events.extend(self._prelude)  # (no turn is open then: see _prelude_event)
        return TurnResult(
            session_id=self.session_id,
            message_id=self.message_id,
            final_response=self._final,
            finish_reason=self._finish,
            error=self._error,
            events=EventLog.from_json(events),
            notifications=tuple(tree.notifications) if tree is not None else (),
            subagents=tuple(tree.subagents) if tree is not None else (),
            duration=duration,
            turns=self._owned_turns,
            approvals=approvals,
            questions=questions,
        )

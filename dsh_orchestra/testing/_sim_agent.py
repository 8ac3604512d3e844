"""One simulated agent: a session's inbox, its turns and steps, and the events they commit.

Owns the order of events inside a session (PROTOCOL.md sections 5.1, 7 and 10), the
running/idle status of one agent, subagent children and the delivery of their results, and
the per-turn choice of scripted behaviour. Events are the protocol's typed wire classes,
unstructured by the shared converter and queued on the outbox without awaiting. What an agent
needs from the simulator (outbox, store, script, route, server->client requests) comes
through :class:`Host`; the tools a turn calls live in ``_sim_tools``.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Protocol

import attrs
import trio

from ..protocol import (
    CONVERTER,
    SESSION_EVENT,
    SESSION_QUERY_COMPLETED,
    SESSION_STATUS,
    SUBAGENT_FINISHED,
    SUBAGENT_STARTED,
    AssistantAttempt,
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    ContentBlock,
    DeliveryAccepted,
    DeliveryAcceptedData,
    InboxSpliced,
    InboxSplicedData,
    LlmFailure,
    LlmRetry,
    LlmRetryData,
    LlmRetryStarted,
    LlmRetryStartedData,
    ModelMessage,
    ReasoningBlock,
    RequestContext,
    RequestContextData,
    RequestHeader,
    RequestHeaderData,
    SessionTitle,
    SessionTitleData,
    StepData,
    StepEnd,
    StepStart,
    SubagentCatalog,
    SubagentCatalogData,
    SystemMessageData,
    SystemMessageEvent,
    TextBlock,
    ToolCall,
    ToolCallBlock,
    ToolCallData,
    TurnData,
    TurnEnd,
    TurnEndData,
    TurnEndReason,
    TurnStart,
    UnknownEvent,
    Usage,
    UserMessage,
    UserMessageEvent,
    WorkingDirectoryChange,
    WorkingDirectoryChangeData,
    text_of,
)
from ._script import Behaviour, Script, render
from ._sim_content import (
    CHILD_FAILED,
    CHILD_FINISHED,
    CHILD_TRUNCATED,
    CLOSING,
    NO_CLOSING,
    PARENT_NOTE,
    SYSTEM_PROMPT,
    prompt_text,
    runtime_context,
    title_of,
    tool_list,
    unsupported,
)
from ._sim_store import SessionRecord, SessionStore
from ._sim_tools import QuestionReply, execute, plan_calls

if TYPE_CHECKING:
    from ._sim_outbox import Outbox

CONTEXT_WINDOW = 1_000_000
_JITTER = random.Random(0x5EED)
_BAD_LINES = (b'{"jsonrpc": "2.0", "method": \n', b"this line is not JSON\n", b"\xff\xfe not utf-8\n")
_POLICY_KEY = '["normal",{retries},["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],{base},10000,0.1]'


@attrs.frozen(kw_only=True)
class SimOptions:
    """Knobs of the simulated runtime (``open_simulator_stream(**options)``).

    Attributes:
        max_retries: provider retries of a retryable failure (``http-500``, ``overloaded``).
        retry_delay: the first retry's delay in seconds; it doubles, capped at 10 s.
        model_latency: seconds every model call takes (on top of a behaviour's ``delay``).
        turn_latency: seconds between a turn's start and its first step (the real runtime
            takes 20 ms to 0.5 s there; a child's first step then starts after its parent's).
        receipt_latency: seconds between a prompt's receipt and its response (the real runtime
            writes its log first, a few ms: two prompts sent together both get their receipts
            before either response).
        crash_status: the exit status of a scripted crash.
        hard_exit: on a crash, end the whole process with ``os._exit`` (process mode).
        ask_timeout: default seconds before an unanswered approval or question is cancelled
            (None: wait for ever, as the spec does).
        high_water: queued notification bytes above which turns pause (backpressure).
        providers: the providers ``initialize`` accepts (the real sdk profile has only
            ``deepseek-official``); empty: any non-empty provider name.
        plugin_events: emit the session-log plugin's ``delivery-accepted`` event before each
            model answer, as the real runtime does (it takes a seq number too).
    """

    max_retries: int = 5
    retry_delay: float = 0.5
    model_latency: float = 0.0
    turn_latency: float = 0.0
    receipt_latency: float = 0.0
    crash_status: int = 3
    hard_exit: bool = False
    ask_timeout: float | None = None
    high_water: int = 4 * 1024 * 1024
    providers: tuple[str, ...] = ("deepseek-official",)
    plugin_events: bool = True


@attrs.frozen(kw_only=True)
class Route:
    """The handshake's provider route; ``defaults`` names the fields the adapter defaulted."""

    provider: str
    model: str
    reasoning_effort: str
    max_tokens: int
    defaults: tuple[str, ...] = ()

    def header(self, *, questions: bool, child: bool) -> dict[str, Any]:
        """The ``request/header`` header (a child gets the effort from its parent explicitly)."""
        defaults = [name for name in self.defaults if not (child and name == "reasoningEffort")]
        header: dict[str, Any] = {"config": {
            "provider": self.provider, "model": self.model, "maxTokens": self.max_tokens,
            "reasoningEffort": self.reasoning_effort}}
        if defaults:
            header["adapterDefaults"] = {name: True for name in defaults}
        header["tools"] = tool_list(questions=questions)
        return header


@attrs.frozen(kw_only=True)
class Intent:
    """What a queued message asks the model for: its behaviour and the prompt it answers."""

    kind: Literal["prompt", "subagents"]
    behaviour: Behaviour
    prompt: str
    rule: str | None = None
    command_id: str | None = None  # a session/query command waiting for this turn


class Host(Protocol):
    """What an agent needs from the simulated runtime that owns it."""

    script: Script
    options: SimOptions
    outbox: Outbox
    store: SessionStore
    route: Route
    questions_enabled: bool
    approvals_enabled: bool

    def now_ms(self) -> int: ...
    def start_driver(self, driver: Callable[[], Awaitable[None]]) -> None: ...
    def mark_dirty(self, agent: Agent) -> None: ...
    def adopt_child(self, child: Agent) -> None: ...
    def tree_changed(self, root: Agent) -> None: ...
    def next_call_id(self) -> str: ...
    async def crash(self, reason: str) -> None: ...
    # The scenario's timeouts: running out is an outcome the agent reacts to (a cancelled
    # approval, a timed-out question), not a cancellation of the caller.
    async def ask_approval(self, agent: Agent, tool_name: str, call_id: str, reason: str,
                           timeout: float | None) -> str: ...  # noqa: ASYNC109
    async def ask_question(self, agent: Agent, questions: list[dict[str, Any]],
                           timeout: float | None) -> QuestionReply: ...  # noqa: ASYNC109


def _new_id() -> str:
    return str(uuid.uuid4())


def _stream(blocks: list[ContentBlock], finish: str, usage: Usage, replay: dict[str, Any], now: int) -> list[Any]:
    """An ``assistant/message.stream``: block starts, chunks, ends, usage and the finish."""
    records: list[Any] = []
    for index, block in enumerate(blocks):
        if isinstance(block, ToolCallBlock):
            records.append({"type": "chunk", "time": now, "chunk": {"type": "block-start", "index": index, "blockType": "tool-call"}})
            records.append({"type": "tool-call-chunks", "time0": now, "index": index, "dt": [], "id": block.id,
                            "name": block.name, "args": [block.arguments]})
            wire = {"type": "tool-call", "id": block.id, "name": block.name, "arguments": block.arguments}
        else:
            kind = "reasoning" if isinstance(block, ReasoningBlock) else "text"
            text = block.text if isinstance(block, (TextBlock, ReasoningBlock)) else ""
            half = len(text) // 2
            records.append({"type": "chunk", "time": now, "chunk": {"type": "block-start", "index": index, "blockType": kind}})
            records.append({"type": f"{kind}-chunks", "time0": now, "index": index, "dt": [0],
                            "texts": [text[:half], text[half:]] if half else [text]})
            wire = {"type": kind, "text": text}
        records.append({"type": "chunk", "time": now, "chunk": {"type": "block-end", "index": index, "block": wire}})
    records.append({"type": "chunk", "time": now, "chunk": {"type": "usage", "usage": CONVERTER.unstructure(usage)}})
    records.append({"type": "chunk", "time": now, "chunk": {"type": "finish", "reason": {"kind": finish}, "replayState": replay}})
    return records


def _failure(mode: str, rule: str | None, request_id: str) -> tuple[LlmFailure, bool]:
    """The LlmFailure the real runtime reports for a model-side fail mode, and if it retries."""
    if mode == "http-500":
        return LlmFailure(message=f"scripted HTTP 500 from rule {rule!r}", code="SERVER", status=500,
                          request_id=request_id), True
    if mode == "http-400":
        return LlmFailure(message=f"scripted HTTP 400 from rule {rule!r}", code="INVALID_REQUEST", status=400,
                          request_id=request_id), False
    if mode == "overloaded":
        return LlmFailure(message="Overloaded", code="SERVER"), True
    if mode == "malformed":
        return LlmFailure(message="DeepSeek Messages SSE contains invalid JSON", code="MALFORMED_RESPONSE"), False
    return LlmFailure(message="DeepSeek Messages stream ended before message_stop", code="STREAM_CLOSED"), False


class Agent:
    """A session and the agent that owns it. Mutated only from the simulator's trio thread."""

    def __init__(self, host: Host, record: SessionRecord, *, sdk_owned: bool, parent: Agent | None = None,
                 next_turn: list[UserMessage] | None = None, next_step: list[UserMessage] | None = None) -> None:
        self.host = host
        self.record = record
        self.id = record.id
        self.sdk_owned = sdk_owned
        self.parent = parent
        self.root: Agent = parent.root if parent is not None else self
        # the handshake's route when the session was opened (a later initialize re-routes
        # only sessions created or resumed after it); a child runs on its parent's route
        self.route: Route = parent.route if parent is not None else host.route
        self.children: list[Agent] = []
        self.running = False
        self.next_turn: list[UserMessage] = next_turn or []
        self.next_step: list[UserMessage] = next_step or []
        self.intents: dict[str, Intent] = {}
        self.spawned_by: Intent | None = None  # for a child: the parent turn that spawned it
        self.header_route: Route | None = None  # the route last announced by request/header
        self.last_assistant: list[ContentBlock] | None = None
        self.assistant_text = ""
        self.last_reason: TurnEndReason | None = None
        self.tree_event = trio.Event()  # on a root: set and replaced whenever the tree changes

    # ---- committing events -----------------------------------------------------------

    def emit(self, cls: Callable[..., Any], kind: str, data: Any, *, surface: bool = False,
             sources: list[int] | None = None, ignorable: bool | None = None) -> int:
        """Commit one event (next seq, now) and notify it; returns its seq."""
        seq = self.record.next_seq
        self.record.next_seq = seq + 1
        event = cls(type=kind, seq=seq, time=self.host.now_ms(), data=data, ignorable=ignorable,
                    surface_op="append" if surface else None, source_event_seqs=sources)
        self.host.outbox.notify(SESSION_EVENT, {"sessionId": self.id, "event": CONVERTER.unstructure(event)})
        self.host.mark_dirty(self)
        return seq

    def set_running(self, running: bool) -> None:
        """Notify a running/idle transition of this agent."""
        if self.running == running:
            return
        self.running = running
        self.host.outbox.notify(SESSION_STATUS, {"sessionId": self.id, "status": "running" if running else "idle"})
        self.host.tree_changed(self.root)

    def snapshot(self) -> SessionRecord:
        """The record with the in-memory queues folded in (for the store)."""
        self.record.next_turn = [CONVERTER.unstructure(message) for message in self.next_turn]
        self.record.next_step = [CONVERTER.unstructure(message) for message in self.next_step]
        return self.record

    # ---- inbox -----------------------------------------------------------------------

    def enqueue(self, message: UserMessage, intent: Intent | None = None, *,
                target: Literal["next-turn", "next-step"] = "next-turn") -> None:
        """Insert ``message`` into an inbox (the splice is the prompt's receipt)."""
        queue = self.next_turn if target == "next-turn" else self.next_step
        self.emit(InboxSpliced, "agent/inbox/spliced", InboxSplicedData(target=target, start=len(queue), inserted=[message]))
        queue.append(message)
        if intent is not None:
            self.intents[message.id] = intent

    def kick(self, gate: trio.Event | None = None) -> None:
        """Start a turn if the agent is idle and has input; its steps wait for ``gate``."""
        if self.running or not self.next_turn:
            return
        self.set_running(True)
        first = self._begin_turn()
        self.host.start_driver(lambda: self._drive(first, gate))

    def _claim_next_step(self) -> list[UserMessage]:
        claimed, self.next_step = self.next_step, []
        if claimed:
            self.emit(InboxSpliced, "agent/inbox/spliced", InboxSplicedData(
                target="next-step", start=0, removed_count=len(claimed), inserted=[]))
        return claimed

    def _begin_turn(self) -> tuple[int, list[UserMessage], UserMessage]:
        self.record.turns += 1
        self.record.open_turn = True
        turn = self.record.turns
        self.emit(TurnStart, "turn/start", TurnData(turn=turn))
        notices = self._claim_next_step()
        message = self.next_turn.pop(0)
        self.emit(InboxSpliced, "agent/inbox/spliced", InboxSplicedData(
            target="next-turn", start=0, removed_count=1, inserted=[]))
        return turn, notices, message

    def change_cwd(self, cwd: str, notice: str) -> None:
        """Set the effective directory: ``working-directory/change`` plus a next-step notice."""
        self.record.cwd = cwd
        self.emit(WorkingDirectoryChange, "working-directory/change", WorkingDirectoryChangeData(cwd=cwd))
        self.enqueue(UserMessage(id=_new_id(), role="user", content=[TextBlock(text=notice)],
                                 source={"kind": "working-directory"}), target="next-step")

    # ---- turns -----------------------------------------------------------------------

    async def _drive(self, first: tuple[int, list[UserMessage], UserMessage], gate: trio.Event | None) -> None:
        if gate is not None:
            await gate.wait()  # the request that started the turn has answered first
        current = first
        while True:
            await trio.sleep(self.host.options.turn_latency)
            turn, notices, message = current
            intent = self.intents.pop(message.id, None) or self._intent_for(message)
            self.assistant_text = ""
            reason = await self._run_turn(turn, notices, message, intent)
            self.emit(TurnEnd, "turn/end", TurnEndData(turn=turn, reason=reason))
            self.record.open_turn = False
            self.last_reason = reason
            if intent.command_id is not None:
                self.host.outbox.notify(SESSION_QUERY_COMPLETED, {
                    "sessionId": self.id, "commandId": intent.command_id,
                    "finalResponse": self.assistant_text, "finishReason": reason.kind})
            if not self.next_turn:
                break
            current = self._begin_turn()  # queued prompts: consecutive turns, no idle between
        self.set_running(False)
        if self.parent is not None:
            self.parent.child_settled(self, reason)

    def _intent_for(self, message: UserMessage) -> Intent:
        text = prompt_text(message.content)
        rule = self.host.script.rule_for(text)
        behaviour = rule.behaviour if rule is not None else self.host.script.behaviour_for(text)
        return Intent(kind="prompt", behaviour=behaviour, prompt=text, rule=rule.name if rule else None)

    async def _run_turn(self, turn: int, notices: list[UserMessage], message: UserMessage, intent: Intent) -> TurnEndReason:
        behaviour, options = intent.behaviour, self.host.options
        await self.host.outbox.wait_writable()
        self._prelude(turn, 1, notices, message)
        self.record.history.append({"role": "user", "text": prompt_text(message.content)})
        bad = unsupported(message.content)
        if bad is not None:
            return self._failed_step(turn, 1, LlmFailure(
                message=f'unsupported content block type "{bad.type}"', code="UNSUPPORTED_CONTENT"))
        if intent.kind == "subagents":
            await trio.sleep(options.model_latency)
            text = render(behaviour.after_subagents, prompt=intent.prompt)
            return self._answer(turn, 1, [TextBlock(text=text)], "stop")
        if behaviour.events is not None:
            padding = "x" * max(0, behaviour.events.size - 120)
            for index in range(behaviour.events.count):
                self.emit(UnknownEvent, "sim/padding", {"index": index, "text": padding}, ignorable=True)
        for index in range(behaviour.malformed_frames):
            self.host.outbox.raw(_BAD_LINES[index % len(_BAD_LINES)])
        await trio.sleep(options.model_latency + behaviour.delay)
        if behaviour.crash:
            await self.host.crash(f"scripted crash in session {self.id!r} turn {turn}")
        if behaviour.hang:
            await trio.sleep_forever()
        if behaviour.fail is not None:
            return await self._fail(turn, 1, behaviour.fail, intent.rule, behaviour.delay)
        calls = plan_calls(self, behaviour)
        values: dict[str, str] = {}
        step = 1
        if calls:
            blocks: list[ContentBlock] = [ToolCallBlock(id=c.call_id, name=c.name, arguments=json.dumps(c.arguments))
                                          for c in calls]
            self._assistant(turn, step, blocks, "tool-calls")
            call_seqs = [self.emit_tool_call(turn, step, c.call_id, c.name, json.dumps(c.arguments)) for c in calls]
            for call, seq in zip(calls, call_seqs, strict=True):
                await execute(self, turn, step, call, seq, intent, values)
            self.emit(StepEnd, "step/end", StepData(turn=turn, step=step))
            step += 1
            await self.host.outbox.wait_writable()
            self._prelude(turn, step, [], None)
            await trio.sleep(options.model_latency)
        reply = render(behaviour.reply, prompt=intent.prompt, outcome=values.get("outcome"), answer=values.get("answer"))
        content: list[ContentBlock] = [TextBlock(text=reply)]
        if behaviour.thinking is not None:
            content.insert(0, ReasoningBlock(text=behaviour.thinking))
        return self._answer(turn, step, content, "max-tokens" if behaviour.max_tokens else "stop")

    def emit_tool_call(self, turn: int, step: int, call_id: str, name: str, arguments: str) -> int:
        """Commit a ``tool/call`` event; returns its seq (a ``tool/result`` cites it)."""
        return self.emit(ToolCall, "tool/call", ToolCallData(turn=turn, step=step, call_id=call_id, name=name,
                                                             arguments=arguments))

    def _prelude(self, turn: int, step: int, notices: list[UserMessage], message: UserMessage | None) -> None:
        """step/start and what the model request carries before the model answers."""
        record, route = self.record, self.route
        self.emit(StepStart, "step/start", StepData(turn=turn, step=step))
        if not record.system_sent:
            record.system_sent = True
            self.emit(SystemMessageEvent, "system/message", SystemMessageData(turn=turn, step=step, message=ModelMessage(
                id=_new_id(), role="system", content=[TextBlock(text=SYSTEM_PROMPT.format(model=route.model))],
                source={"kind": "system-prompt"})), surface=True)
        if step > 1:
            notices = self._claim_next_step()
        for notice in notices:
            self.emit(UserMessageEvent, "user/message", notice, surface=True)
        prompt_seq = None if message is None else self.emit(UserMessageEvent, "user/message", message, surface=True)
        text, sections = runtime_context(record.cwd, record.origin_cwd)
        if text != record.last_context:
            record.last_context = text
            self.emit(UserMessageEvent, "user/message", UserMessage(
                id=_new_id(), role="user", content=[TextBlock(text=text)],
                source={"kind": "runtime-context", "form": "snapshot", "sections": sections}), surface=True)
        if self.header_route != route:
            reason = "initial" if not record.header_sent else "resume"
            self.header_route, record.header_sent = route, True
            self.emit(RequestHeader, "request/header", RequestHeaderData(
                header=route.header(questions=self.host.questions_enabled, child=self.parent is not None), reason=reason))
        key = f"{route.provider}/{route.model}"
        if record.context_key != key:
            record.context_key = key
            self.emit(RequestContext, "request/context", RequestContextData(
                provider=route.provider, model=route.model, context_window=CONTEXT_WINDOW))
        if message is not None and prompt_seq is not None and record.title is None and (
                isinstance(message.source, dict) and message.source.get("kind") == "user"):
            record.title = title_of(message.content)
            self.emit(SessionTitle, "session/title", SessionTitleData(
                title=record.title, message_seqs=[prompt_seq], source={"kind": "fallback"}))

    def _replay(self, blocks: list[ContentBlock]) -> dict[str, Any]:
        kinds: list[dict[str, str]] = []
        for block in blocks:
            if isinstance(block, ReasoningBlock):
                kinds.append({"type": "reasoning", "signature": "sig_sim"})
            else:
                kinds.append({"type": "tool-call" if isinstance(block, ToolCallBlock) else "text"})
        return {"response": {"kind": "deepseek-messages", "version": 1, "model": self.route.model}, "blocks": kinds}

    def _delivered(self) -> None:
        """The session-log plugin's acknowledgement, which the real runtime commits before a model answer."""
        if self.host.options.plugin_events:
            self.emit(DeliveryAccepted, "session-log-deepseek/delivery-accepted", DeliveryAcceptedData(
                session_id=self.id, session_format_version=4, through_seq=self.record.next_seq - 1))

    def _assistant(self, turn: int, step: int, blocks: list[ContentBlock], finish: str) -> None:
        self._delivered()
        route = self.route
        replay = self._replay(blocks)
        text = text_of(blocks)
        output = max(1, len(text) // 4)
        usage = Usage(input_tokens=12, output_tokens=output, total_tokens=12 + output)
        message = ModelMessage(id=_new_id(), role="assistant", content=blocks, source={
            "kind": "model", "provider": route.provider, "model": route.model, "replayState": replay})
        self.emit(AssistantMessage, "assistant/message", AssistantMessageData(
            turn=turn, step=step, message=message, usage=usage,
            stream=_stream(blocks, finish, usage, replay, self.host.now_ms())), surface=True)
        if blocks:
            self.last_assistant = blocks
        self.assistant_text = text
        self.record.history.append({"role": "assistant", "text": text})

    def _answer(self, turn: int, step: int, blocks: list[ContentBlock], finish: str) -> TurnEndReason:
        self._assistant(turn, step, blocks, finish)
        self.emit(StepEnd, "step/end", StepData(turn=turn, step=step))
        return TurnEndReason(kind="max-tokens" if finish == "max-tokens" else "completed")

    def _attempt(self, turn: int, step: int, failure: LlmFailure) -> None:
        self.emit(AssistantAttempt, "assistant/attempt", AssistantAttemptData(turn=turn, step=step, stream=[{
            "type": "chunk", "time": self.host.now_ms(),
            "chunk": {"type": "finish", "reason": {"kind": "error", "failure": CONVERTER.unstructure(failure)}}}]))

    def _failed_step(self, turn: int, step: int, failure: LlmFailure, *, retried: bool = False) -> TurnEndReason:
        if not retried:
            self._delivered()
        self._attempt(turn, step, failure)
        self.emit(StepEnd, "step/end", StepData(turn=turn, step=step))
        return TurnEndReason(kind="error", error=failure)

    async def _fail(self, turn: int, step: int, mode: str, rule: str | None, delay: float) -> TurnEndReason:
        options = self.host.options
        failure, retryable = _failure(mode, rule, f"req_sim_{uuid.uuid4().hex[:12]}")
        if retryable and options.max_retries > 0:
            retry_id = _new_id()
            base_ms = int(options.retry_delay * 1000)
            for retry in range(1, options.max_retries + 1):
                self._attempt(turn, step, failure)
                failure = _failure(mode, rule, f"req_sim_{uuid.uuid4().hex[:12]}")[0]  # each attempt is a new request
                delay_ms = min(base_ms * 2 ** (retry - 1), 10_000) * (1 + 0.1 * _JITTER.random())
                self.emit(LlmRetry, "llm/retry", LlmRetryData(
                    retry_id=retry_id, turn=turn, step=step, provider=self.route.provider, mode="normal",
                    policy_key=_POLICY_KEY.format(retries=options.max_retries, base=base_ms), retry=retry,
                    max_retries=options.max_retries, delay_ms=delay_ms, failure=failure))
                await trio.sleep(delay_ms / 1000)  # 10 % jitter, as the runtime's policy key says
                self.emit(LlmRetryStarted, "llm/retry-started", LlmRetryStartedData(
                    retry_id=retry_id, turn=turn, step=step, retry=retry))
                await trio.sleep(options.model_latency + delay)
            return self._failed_step(turn, step, failure, retried=True)
        return self._failed_step(turn, step, failure)

    # ---- subagents -------------------------------------------------------------------

    def spawn_child(self, description: str, prompt: str, behaviour: Behaviour | None, spawned_by: Intent) -> Agent:
        """Create, announce and start a child agent (``subagent.started`` comes first)."""
        created = self.host.now_ms()
        record = SessionRecord(id=_new_id(), origin_cwd=self.record.cwd, cwd=self.record.cwd, created_at=created,
                               parent_id=self.id, next_seq=3)  # seq 0-2 are written before any notification
        child = Agent(self.host, record, sdk_owned=False, parent=self)
        child.spawned_by = spawned_by
        self.children.append(child)
        self.host.adopt_child(child)
        self.host.outbox.notify(SUBAGENT_STARTED, {"parentSessionId": self.id, "childSessionId": child.id})
        message = UserMessage(id=_new_id(), role="user", source={"kind": "user"}, content=[
            TextBlock(text=prompt), TextBlock(text=PARENT_NOTE.format(parent=self.id))])
        rule = None
        if behaviour is None:
            found = self.host.script.rule_for(prompt)
            behaviour = found.behaviour if found is not None else self.host.script.behaviour_for(prompt)
            rule = found.name if found is not None else None
        child.enqueue(message, Intent(kind="prompt", behaviour=behaviour, prompt=prompt, rule=rule))
        child.kick()
        self.emit(SubagentCatalog, "subagent/catalog", SubagentCatalogData(
            version=0, child_id=child.id, child_created_at=created, mode="continuable", label=description))
        return child

    def child_settled(self, child: Agent, reason: TurnEndReason) -> None:
        """A child went idle: its result lands in this agent's inbox, then ``subagent.finished``."""
        ok = reason.kind == "completed"
        form = CHILD_FINISHED if ok else CHILD_TRUNCATED if reason.kind == "max-tokens" else CHILD_FAILED
        summary = form.format(child=child.id)
        closing = (text_of(child.last_assistant) or child.assistant_text) if ok else ""
        content = [TextBlock(text=summary)]
        content += [TextBlock(text=CLOSING), TextBlock(text=closing)] if closing else [TextBlock(text=NO_CLOSING)]
        spawned_by = child.spawned_by or Intent(kind="prompt", behaviour=Behaviour(), prompt="")
        self.enqueue(UserMessage(id=_new_id(), role="user", content=list(content), source={
            "kind": "subagent-settled", "form": "notice", "summary": summary, "senderSessionId": child.id}),
            attrs.evolve(spawned_by, kind="subagents", command_id=None))
        self.kick()
        finished: dict[str, Any] = {
            "provider": "spawn", "agentId": child.id, "parentSessionId": self.id, "childSessionId": child.id,
            "status": "ok" if ok else "error",
            "stopReason": {"completed": "completed", "max-tokens": "max-tokens", "aborted": "aborted"}.get(reason.kind, "error")}
        if child.last_assistant:
            finished["lastAssistantMessage"] = CONVERTER.unstructure(child.last_assistant)
        elif child.assistant_text:
            finished["lastAssistantMessage"] = [{"type": "text", "text": child.assistant_text}]
        self.host.outbox.notify(SUBAGENT_FINISHED, finished)

    def settled(self) -> bool:
        """True when this agent and every descendant are idle with nothing queued."""
        if self.running or self.next_turn:
            return False
        return all(child.settled() for child in self.children)

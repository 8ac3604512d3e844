"""The simulated runtime: the server end of the SDK protocol, built on the client's own core.

Owns the RPC surface of the newest spec (PROTOCOL.md sections 4-7): the handshake and its
validation, session selection (lazy creation, "already exists", resume from the store),
``session/query`` and its commands, ``session/wait``, the working-directory methods, shutdown,
the server->client requests (approvals and user questions, with their cancellation), the
exact error messages of the real runtime 0.2.1-rc.2 (section 3), scripted crashes, and the
way to run it in-process (:func:`open_simulator_stream`). Agents and their turns live in
``_sim_agent``; the process entry point is ``_sim_main``.

Errors are ``-32603`` with the runtime's messages; unknown methods answer ``-32601 "method not
found: <m>"`` (the newest spec; 0.2.1-rc.2 answers -32603 there). See docs/simulator.md.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Awaitable, Callable, NoReturn

import trio
import trio.testing

from ..protocol import (
    APPROVAL_REQUEST,
    NotInitializedError,
    SessionAlreadyOpenError,
    SessionExistsError,
    SessionNotFoundError,
    ShuttingDownError,
    UnknownSessionError,
    known_message,
    CONVERTER,
    INITIALIZE,
    INTERNAL_ERROR,
    SESSION_PROMPT,
    SESSION_QUERY,
    SESSION_QUERY_COMPLETED,
    SESSION_RESUME,
    SESSION_WAIT,
    SHUTDOWN,
    USER_QUESTION_ASK,
    USER_QUESTION_CANCELLED,
    WORKING_DIRECTORY_GET,
    WORKING_DIRECTORY_SET,
    ApprovalPolicy,
    ApprovalPolicyData,
    AttachedImageBlock,
    CommandDone,
    CommandDoneData,
    CommandRun,
    CommandRunData,
    ContentBlock,
    ImageBlock,
    JsonRpcResponseError,
    PermissionPreset,
    PermissionPresetData,
    SandboxMode,
    SandboxModeData,
    TextBlock,
    TransportClosedError,
    UnknownBlock,
    UserMessage,
)
from ..transport import Connection, RpcError
from ._script import DEFAULT_SCRIPT, Script
from ._sim_agent import Agent, Intent, Route, SimOptions
from ._sim_content import ImageError, admit_image, cwd_changed, cwd_unavailable, prompt_text, quote
from ._sim_handshake import DEFAULT_EFFORT, DEFAULT_MAX_TOKENS, SERVER_INFO, HandshakeError, check_initialize
from ._sim_outbox import OneLineAtATime, Outbox
from ._sim_store import SessionRecord, SessionStore, StoreError
from ._sim_tools import QuestionReply, check_answers

log = logging.getLogger("dsh_orchestra.testing.simulator")

COMMANDS = ("status", "help", "turn")


def _fail(message: str) -> NoReturn:
    raise RpcError(INTERNAL_ERROR, message)


def _known(error: type[JsonRpcResponseError], **fields: str) -> NoReturn:
    """Fail with the runtime's own message for ``error`` (protocol.KNOWN_ERRORS)."""
    _fail(known_message(error, **fields))


class SimulatedRuntime:
    """A simulated ``dsh --profile sdk`` serving one client stream.

    ``await nursery.start(runtime.run, stream)`` returns it serving. It ends when the client
    closes its end, after ``shutdown`` has been answered, or at a scripted crash;
    ``exit_status`` is then the status a process would exit with (0, or the crash status).
    """

    outbox: Outbox
    connection: Connection

    def __init__(self, script: Script = DEFAULT_SCRIPT, *, store: str | os.PathLike[str] | None = None,
                 options: SimOptions | None = None) -> None:
        self.script = script
        self.options = SimOptions() if options is None else options
        self.store = SessionStore(store)
        self.route = Route(provider="deepseek-official", model="deepseek-v4-flash",
                           reasoning_effort=DEFAULT_EFFORT, max_tokens=DEFAULT_MAX_TOKENS)
        self.default_cwd = os.getcwd()
        self.sessions: dict[str, Agent] = {}
        self.initialized = False
        self.stopping = False
        self.approvals_enabled = False
        self.questions_enabled = False
        self.exit_status: int | None = None
        self.prompts_received = 0
        self._calls = itertools.count(1)
        self._dirty: dict[Agent, None] = {}
        self._done = trio.Event()
        self._ran = False
        self._stream: trio.abc.HalfCloseableStream | trio.abc.Stream | None = None
        self._drivers: trio.Nursery | None = None
        self._nursery: trio.Nursery | None = None
        self._t0 = 0.0
        self._epoch_ms = 0.0

    # ---- service ---------------------------------------------------------------------

    async def run(self, stream: trio.abc.Stream, *, task_status: trio.TaskStatus[SimulatedRuntime] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve ``stream`` until the client closes it, ``shutdown`` completes, or a crash."""
        if self._ran:
            raise RuntimeError("a SimulatedRuntime serves one stream; make a new one")
        self._ran = True
        self._stream = stream
        if isinstance(stream, trio.StapledStream):
            ordered = trio.StapledStream(stream.send_stream, OneLineAtATime(stream.receive_stream))
        else:
            ordered = trio.StapledStream(stream, OneLineAtATime(stream))
        self.connection = Connection(ordered, name="simulator client")
        self.outbox = Outbox(self.connection, high_water=self.options.high_water, before_write=self._persist_dirty)
        for method, handler in ((INITIALIZE, self._initialize), (SESSION_PROMPT, self._prompt),
                                (SESSION_QUERY, self._query), (SESSION_WAIT, self._wait),
                                (SESSION_RESUME, self._resume), (WORKING_DIRECTORY_GET, self._cwd_get),
                                (WORKING_DIRECTORY_SET, self._cwd_set), (SHUTDOWN, self._shutdown)):
            self.connection.register(method, self._flushing(handler))
        self._t0, self._epoch_ms = trio.current_time(), time.time() * 1000
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self._run_outbox)
                self._drivers = await nursery.start(self._driver_service)
                await nursery.start(self._serve_connection)  # last: requests may arrive at once
                task_status.started(self)
                await self._done.wait()
                nursery.cancel_scope.cancel(reason="simulated runtime finished")
        finally:
            self._persist_all()
            self.store.release_all()
            if self.exit_status is None:
                self.exit_status = 0
            await trio.aclose_forcefully(stream)  # the client sees end of file, as from an exited process

    def _flushing(self, handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        """``handler``, whose error answers also come after the events it committed."""

        async def handle(params: dict[str, Any]) -> dict[str, Any]:
            try:
                return await handler(params)
            except Exception:  # RpcError, or a bug answered -32603: after the committed events either way
                await self.outbox.flush()  # e.g. a prompt without contentBlocks created the session first
                raise

        return handle

    async def _serve_connection(self, *, task_status: trio.TaskStatus[Connection] = trio.TASK_STATUS_IGNORED) -> None:
        await self.connection.run(task_status=task_status)
        if not self._done.is_set():  # end of input: flush what was committed, then exit 0
            with trio.move_on_after(0.5):
                await self.outbox.flush()
            self._finish(0)

    async def _run_outbox(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.outbox.run(task_status=task_status)
        self._finish(0)  # the client stopped reading (broken pipe): nobody to talk to

    async def _driver_service(self, *, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started(nursery)
            await trio.sleep_forever()

    def terminate(self, status: int = 0) -> None:
        """End the service now, as on SIGTERM (0) or SIGINT (130): no more frames are written."""
        self.outbox.close()
        self._finish(status)

    def _finish(self, status: int) -> None:
        if self.exit_status is None:
            self.exit_status = status
        self._done.set()

    # ---- Host (what agents call) -----------------------------------------------------

    def now_ms(self) -> int:
        """Epoch milliseconds, advancing with trio's clock (so MockClock moves event times)."""
        return int(self._epoch_ms + (trio.current_time() - self._t0) * 1000)

    def start_driver(self, driver: Any) -> None:
        """Run ``driver`` (a session's turn driver) in the simulator's driver nursery."""
        assert self._drivers is not None
        self._drivers.start_soon(driver)

    def mark_dirty(self, agent: Agent) -> None:
        """Note that ``agent``'s snapshot must be written (with a persistent store)."""
        if self.store.persistent:
            self._dirty[agent] = None

    def adopt_child(self, child: Agent) -> None:
        """Register a spawned subagent session (and persist it with a persistent store)."""
        self.sessions[child.id] = child
        if self.store.persistent:
            try:
                self.store.acquire(child.id)
            except StoreError as exc:  # an uuid: cannot really collide
                log.warning("child session %s: %s", child.id, exc)

    def tree_changed(self, root: Agent) -> None:
        """Wake whoever waits for a change in ``root``'s session tree."""
        event, root.tree_event = root.tree_event, trio.Event()
        event.set()

    def next_call_id(self) -> str:
        """A fresh tool call id (``toolu_sim_000001``, ...)."""
        return f"toolu_sim_{next(self._calls):06d}"

    async def crash(self, reason: str) -> None:
        """A scripted crash: what was committed is written, then the process is gone."""
        if self.options.hard_exit:  # a process: say why on stderr (clients keep its tail)
            print(f"dsh-orchestra sim: simulated crash: {reason}", file=sys.stderr, flush=True)
        else:
            log.warning("simulated crash: %s", reason)
        with trio.move_on_after(1.0):
            await self.outbox.flush()
        self._persist_all()
        self.store.release_all()
        if self.options.hard_exit:
            os._exit(self.options.crash_status)
        self.outbox.close()
        self._finish(self.options.crash_status)
        await trio.sleep_forever()  # the teardown closes the stream: the client sees end of file

    async def ask_approval(self, agent: Agent, tool_name: str, call_id: str, reason: str,
                           timeout: float | None) -> str:  # noqa: ASYNC109 - an outcome, not a cancellation (Host)
        """Ask the client to approve a tool call; the outcome, or ``cancelled`` past ``timeout``."""
        await self.outbox.flush()  # approval/asked (and the tool call) reach the client first
        params = {"sessionId": agent.id, "toolName": tool_name, "callId": call_id, "reason": reason}
        with trio.move_on_after(math.inf if timeout is None else timeout):
            try:
                result = await self.connection.request(APPROVAL_REQUEST, params)
            except JsonRpcResponseError:
                return "rejected"  # an error answer denies (fail closed)
            except TransportClosedError:
                return "cancelled"
            outcome = result.get("outcome") if isinstance(result, dict) else None
            return outcome if outcome in ("allowed-once", "rejected", "cancelled") else "rejected"
        return "cancelled"  # the simulator stopped waiting; a late answer is ignored

    async def ask_question(self, agent: Agent, questions: list[dict[str, Any]], timeout: float | None) -> QuestionReply:  # noqa: ASYNC109 - an outcome (Host)
        """Ask the client the questions; its reply, or a timed-out reply past ``timeout``."""
        await self.outbox.flush()
        request_id = f"req_{uuid.uuid4().hex}"
        params = {"requestId": request_id, "sessionId": agent.id, "questions": questions}
        with trio.move_on_after(math.inf if timeout is None else timeout):
            try:
                result = await self.connection.request(USER_QUESTION_ASK, params)
            except JsonRpcResponseError as exc:
                return QuestionReply(kind="error", detail=exc.message)
            except TransportClosedError as exc:
                return QuestionReply(kind="error", detail=str(exc))
            return check_answers(result, questions)
        self.outbox.notify(USER_QUESTION_CANCELLED, {"requestId": request_id, "sessionId": agent.id})
        return QuestionReply(kind="timeout", detail=f"{timeout:g} s")

    # ---- persistence -----------------------------------------------------------------

    def _persist_dirty(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for agent in dirty:
            self._save(agent)

    def _persist_all(self) -> None:
        self._dirty = {}
        if self.store.persistent:
            for agent in self.sessions.values():
                self._save(agent)

    def _save(self, agent: Agent) -> None:
        try:
            self.store.save(agent.snapshot())
        except (OSError, StoreError) as exc:
            log.error("cannot persist session %s: %s", agent.id, exc)

    # ---- session selection -----------------------------------------------------------

    def _ready(self) -> None:
        if self.stopping:
            _known(ShuttingDownError)
        if not self.initialized:
            _known(NotInitializedError)

    def _open_or_create(self, session_id: str) -> Agent:
        """The open SDK session ``session_id``, or a new one (its first three events)."""
        agent = self.sessions.get(session_id)
        if agent is not None:
            if not agent.sdk_owned:  # a live subagent child
                _known(SessionExistsError, session_id=session_id)
            return agent
        try:
            if self.store.exists(session_id):
                _known(SessionExistsError, session_id=session_id)
            self.store.acquire(session_id)
        except StoreError as exc:
            _fail(str(exc))
        record = SessionRecord(id=session_id, origin_cwd=self.default_cwd, cwd=self.default_cwd,
                               created_at=self.now_ms())
        agent = self.sessions[session_id] = Agent(self, record, sdk_owned=True)
        agent.emit(PermissionPreset, "permission/preset", PermissionPresetData(preset="workspace-write"))
        agent.emit(SandboxMode, "sandbox/mode", SandboxModeData(mode="workspace-write"))
        agent.emit(ApprovalPolicy, "approval/policy", ApprovalPolicyData(policy="ask"))
        return agent

    def _content(self, raw: Any) -> list[ContentBlock]:
        """Structure prompt blocks; encoded images are admitted as attachments."""
        if raw is None:
            _fail("Cannot read properties of undefined (reading 'filter')")
        if not isinstance(raw, list):
            _fail("params.contentBlocks.filter is not a function")
        blocks: list[ContentBlock] = []
        attachments = None if self.store.root is None else self.store.root / "attachments"
        for item in raw:
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                _fail("every content block must be an object with a string type")
            try:
                block: ContentBlock = CONVERTER.structure(item, ContentBlock)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 (a block the model will refuse: UNSUPPORTED_CONTENT)
                block = UnknownBlock(type=item["type"], raw=dict(item))
            if isinstance(block, ImageBlock):
                try:
                    block = admit_image(block, attachments)
                except ImageError as exc:
                    _fail(str(exc))
            blocks.append(block)
        return blocks

    def _count_prompt(self) -> bool:
        """Count one prompt; True when ``crash_after_prompts`` says the process dies now."""
        self.prompts_received += 1
        limit = self.script.crash_after_prompts
        return limit is not None and self.prompts_received >= limit

    async def _enqueue(self, agent: Agent, message: UserMessage, intent: Intent | None = None) -> str:
        """Queue a prompt: its receipt (and a new turn's start) are written before the response."""
        gate = trio.Event()
        agent.enqueue(message, intent)
        agent.kick(gate)
        await self.outbox.flush()
        if self.options.receipt_latency:
            await trio.sleep(self.options.receipt_latency)
            await self.outbox.flush()
        gate.set()  # no checkpoint until the response is queued on the write lock: it goes first
        return message.id

    # ---- handlers --------------------------------------------------------------------

    async def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.stopping:
            _known(ShuttingDownError)
        try:
            handshake = check_initialize(params, self.options.providers)
        except HandshakeError as exc:
            _fail(str(exc))
        self.route = handshake.route
        self.default_cwd = handshake.cwd
        self.approvals_enabled = handshake.approvals
        self.questions_enabled = handshake.questions
        self.initialized = True
        return {"serverInfo": dict(SERVER_INFO)}

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        self._ready()
        session_id = params.get("sessionId")
        if not isinstance(session_id, str):
            _fail("session/prompt requires a sessionId string")
        if self._count_prompt():
            await self.crash(f"crash_after_prompts = {self.script.crash_after_prompts} reached")
        agent = self._open_or_create(session_id)
        blocks = self._content(params.get("contentBlocks"))
        message = UserMessage(id=str(uuid.uuid4()), role="user", content=blocks, source={"kind": "user"})
        return {"messageId": await self._enqueue(agent, message)}

    async def _query(self, params: dict[str, Any]) -> dict[str, Any]:
        self._ready()
        session_id = params.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            _fail("session/query requires a non-empty sessionId string")
        raw = params.get("contentBlocks")
        if not isinstance(raw, list):
            _fail("session/query requires a contentBlocks array")
        blocks = self._content(raw)
        texts = [block for block in blocks if isinstance(block, TextBlock)]
        images = [block for block in blocks if isinstance(block, AttachedImageBlock)]
        if not images and all(not block.text.strip() for block in texts) and len(texts) == len(blocks):
            _fail("session/query input must not be empty")
        commands = [block for block in texts if block.text.startswith("/")
                    and block.text[1:].split(maxsplit=1)[:1] and block.text[1:].split(maxsplit=1)[0] in COMMANDS]
        if commands and (len(texts) != 1 or len(texts) + len(images) != len(blocks)):
            _fail("a command must be exactly one text block; any other blocks may only be images")
        if not commands:
            if self._count_prompt():
                await self.crash(f"crash_after_prompts = {self.script.crash_after_prompts} reached")
        agent = self._open_or_create(session_id)
        if not commands:
            message = UserMessage(id=str(uuid.uuid4()), role="user", content=blocks, source={"kind": "user"})
            return {"kind": "prompt", "messageId": await self._enqueue(agent, message)}
        name, _, args = commands[0].text[1:].partition(" ")
        return {"kind": "command", "execution": await self._command(agent, name, args.strip())}

    async def _command(self, agent: Agent, name: str, args: str) -> dict[str, Any]:
        command_id = f"cmd_{uuid.uuid4().hex[:16]}"
        run_seq = agent.emit(CommandRun, "command/run", CommandRunData(
            command_id=command_id, name=name, source={"kind": "user"}, args=args or None))
        execution: dict[str, Any] = {"commandId": command_id, "name": name, "kind": "success"}
        if name == "turn" and args:
            message = UserMessage(id=str(uuid.uuid4()), role="user", content=[TextBlock(text=args)],
                                  source={"kind": "user"})
            intent = _command_intent(agent, message, command_id)
            text = "queued a turn"
            agent.emit(CommandDone, "command/done", CommandDoneData(
                command_id=command_id, kind="success", text=text, source_event_seq=run_seq))
            execution.update(text=text, messageId=await self._enqueue(agent, message, intent))
            return execution  # session.query.completed comes when that turn ends
        if name == "status":
            state = "running" if agent.running else "idle"
            text = (f"session {agent.id}: {agent.record.turns} turns, {state}, cwd {agent.record.cwd}, "
                    f"model {agent.route.provider}/{agent.route.model}")
        elif name == "help":
            text = "commands: /status, /help, /turn <prompt> (simulator only)"
        else:
            execution["kind"] = "error"
            text = "usage: /turn <prompt>"
        agent.emit(CommandDone, "command/done", CommandDoneData(
            command_id=command_id, kind=execution["kind"], text=text, source_event_seq=run_seq))
        execution["text"] = text
        self.outbox.notify(SESSION_QUERY_COMPLETED, {"sessionId": agent.id, "commandId": command_id,
                                                     "finalResponse": text, "finishReason": None})
        await self.outbox.flush()
        return execution

    async def _wait(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self.initialized and not self.stopping:
            _known(NotInitializedError)
        session_id = params.get("sessionId")
        if not isinstance(session_id, str):
            _fail("session/wait requires a sessionId string")
        agent = self.sessions.get(session_id)
        if self.stopping or agent is None or not agent.sdk_owned:
            _known(UnknownSessionError, session_id=session_id)
        while not self.stopping and not agent.settled():
            await agent.tree_event.wait()
        await self.outbox.flush()
        return {}

    async def _resume(self, params: dict[str, Any]) -> dict[str, Any]:
        self._ready()
        session_id = params.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            _fail("session/resume requires a non-empty sessionId string")
        if session_id in self.sessions:
            _known(SessionAlreadyOpenError, session_id=session_id)
        try:
            record = self.store.load(session_id)
            if record is None:
                _known(SessionNotFoundError, session_id=session_id)
            self.store.acquire(session_id)
        except StoreError as exc:
            _fail(str(exc))
        record.next_seq += 2 if record.open_turn else 1  # restore markers (and a repaired turn/end), never notified
        if record.open_turn:
            record.open_turn = False
            record.history.append({"role": "runtime", "text": "turn interrupted"})
        queues = [[CONVERTER.structure(raw, UserMessage) for raw in queue] for queue in (record.next_turn, record.next_step)]
        agent = self.sessions[session_id] = Agent(self, record, sdk_owned=True, next_turn=queues[0], next_step=queues[1])
        self._save(agent)
        await trio.lowlevel.checkpoint()
        return {}

    def _cwd_agent(self, params: dict[str, Any]) -> Agent:
        self._ready()
        session_id = params.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            _fail("working-directory requests require a non-empty sessionId")
        return self._open_or_create(session_id)

    async def _cwd_get(self, params: dict[str, Any]) -> dict[str, Any]:
        agent = self._cwd_agent(params)
        record = agent.record
        # No worker thread for a stat here (nor below): the simulator runs under trio's
        # MockClock in tests, whose autojump moves virtual time on while a thread works.
        if not os.path.isdir(record.cwd) and record.cwd != record.origin_cwd:  # noqa: ASYNC240 - see above
            old = record.cwd
            agent.change_cwd(record.origin_cwd, cwd_unavailable(old, record.origin_cwd))
        await self.outbox.flush()
        return {"cwd": record.cwd}

    async def _cwd_set(self, params: dict[str, Any]) -> dict[str, Any]:
        agent = self._cwd_agent(params)
        path = params.get("path")
        if not isinstance(path, str):
            _fail("working-directory set requires a path string")
        if not path:
            _fail("working-directory: cd must not be empty")
        target = os.path.normpath(os.path.join(agent.record.cwd, path))  # noqa: ASYNC240 - string operations only
        if not os.path.isdir(target):  # noqa: ASYNC240 - no thread under MockClock (see _cwd_get)
            _fail(f"working-directory: directory does not exist: {quote(path)}")
        if target != agent.record.cwd:
            agent.change_cwd(target, cwd_changed(agent.record.cwd, target))
        await self.outbox.flush()
        return {"cwd": target}

    async def _shutdown(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self.stopping:
            self.stopping = True
            self.outbox.close()  # listeners detached: a running turn ends with no turn/end
            if self._drivers is not None:
                self._drivers.cancel_scope.cancel(reason="shutdown")  # also cancels pending asks
            for agent in self.sessions.values():
                if agent.parent is None:
                    self.tree_changed(agent)  # pending waits answer {}
            self._persist_all()
            self.store.release_all()
            gate = trio.Event()
            assert self._nursery is not None
            self._nursery.start_soon(self._exit_after_response, gate)
            await self.outbox.flush()
            gate.set()
            return {}
        await self.outbox.flush()
        return {}

    async def _exit_after_response(self, gate: trio.Event) -> None:
        await gate.wait()
        try:
            await self.connection.send_raw(b"")  # FIFO behind the shutdown response
        except (trio.BrokenResourceError, trio.ClosedResourceError, TransportClosedError):
            pass
        with trio.move_on_after(1.0):  # let concurrent requests (a repeated shutdown, waits) answer
            while self.connection.statistics().handlers_running > 0:  # noqa: ASYNC110 - the count has no event
                await trio.sleep(0.001)
        self._finish(0)


def _command_intent(agent: Agent, message: UserMessage, command_id: str) -> Intent:
    """The intent of a ``/turn`` command's prompt: the script's behaviour, plus the command id."""
    text = prompt_text(message.content)
    rule = agent.host.script.rule_for(text)
    behaviour = rule.behaviour if rule is not None else agent.host.script.behaviour_for(text)
    return Intent(kind="prompt", behaviour=behaviour, prompt=text, rule=rule.name if rule else None,
                  command_id=command_id)


@asynccontextmanager
async def open_simulator(script: Script = DEFAULT_SCRIPT, *, store: str | os.PathLike[str] | None = None,
                         **options: Any) -> AsyncIterator[tuple[SimulatedRuntime, trio.abc.Stream]]:
    """Run a simulator over in-memory streams; yields ``(runtime, client_stream)``.

    ``options`` are :class:`SimOptions` fields. The simulator runs in a nursery owned by this
    context manager and is cancelled on exit (so errors may arrive in an ExceptionGroup).
    """
    runtime = SimulatedRuntime(script, store=store, options=SimOptions(**options))
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run, server)
        try:
            yield runtime, client
        finally:
            nursery.cancel_scope.cancel(reason="open_simulator block exited")


@asynccontextmanager
async def open_simulator_stream(script: Script = DEFAULT_SCRIPT, *, store: str | Path | None = None,
                                **options: Any) -> AsyncIterator[trio.abc.Stream]:
    """Yield the client end of an in-process simulated runtime (a trio Stream).

    The simulator serves the other end in a nursery this context manager owns; leaving the
    block cancels it. ``store`` is the session store directory (None: nothing persists);
    ``options`` are :class:`SimOptions` fields (``max_retries``, ``model_latency``, ...).
    """
    async with open_simulator(script, store=store, **options) as (_, stream):
        yield stream

"""Runtime: the runtime actor composed with session routing; ``open_runtime`` owns one.

Owns: the session router sink, session handles, abandoned sessions, the approval and
question handlers' registration, the start-up warnings about configuration that cannot take
effect, and the lifetime of the relay (``runtime.ApprovalRelay``) when ``spec.approval_relay`` (``auto`` by
default) calls for it. Must not know about pools or graphs.
"""

from __future__ import annotations

import contextvars
import logging
import os
import tempfile
import uuid
from contextlib import ExitStack, asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Callable, Iterator

import trio

from .._logging import SessionContexts, log_context, register_secrets
from .._params import Param, ParamTypeError, ParamValueError
from .._scratch import scratch_dir
from .._tracing import observed_approvals
from ..approvals import ApprovalService, AuditLog
from ..gateway import DEFAULT_GATEWAY, Gateway, GatewayOptions, gateway_for
from ..protocol import (
    APPROVAL_REQUEST,
    SESSION_RESUME,
    USER_QUESTION_ASK,
    USER_QUESTION_CANCELLED,
    ApprovalRequestParams,
    EmptyResult,
    SessionIdParams,
    TransportClosedError,
    UserQuestionAskParams,
)
from ..questions import QuestionService
from ..runtime import RuntimeActor, RuntimeSpec
from ..transport import DEFAULT_CAPACITY, Connection, NoReply, Notification
from ..runtime import ApprovalRelay, relay_warnings
from ._router import SessionRouter
from ._session import Session
from ._turn import TurnCollector
from ._turns import TurnGroup

log = logging.getLogger("dsh_orchestra.session")

_warned: contextvars.ContextVar[bool] = contextvars.ContextVar("dsh_orchestra_warned", default=False)


@contextmanager
def warnings_reported() -> Iterator[None]:
    """Inside this block ``open_runtime`` logs no start-up warnings: the caller reported them
    once already (``run_batch``, ``run_workflow`` and the pool open many runtimes)."""
    token = _warned.set(True)
    try:
        yield
    finally:
        _warned.reset(token)


def configuration_warnings(spec: RuntimeSpec | None, *, approvals: bool, answerer: bool) -> list[str]:
    """What is configured for ``spec`` but cannot take effect on its runtime (see ``relay_warnings``)."""
    return [] if spec is None else relay_warnings(spec, approvals=approvals, answerer=answerer)


def report_warnings(messages: list[str], *, console: bool = True) -> None:
    """One warning record per message (logger ``dsh_orchestra.session``), unless they were
    reported already (inside ``warnings_reported()``). ``console=False``: the CLI printed them
    as ``dsh-orchestra: warning: ...`` lines, so its stderr handler skips the records."""
    if _warned.get():
        return
    for message in messages:
        log.warning("%s", message, extra={"dsh_console": console})


class Runtime:
    """A ready runtime: make sessions with ``session()`` and ``resume()``."""

    def __init__(self, actor: RuntimeActor, router: SessionRouter) -> None:
        self.actor = actor
        self.router = router
        self.abandoned: set[str] = set()
        self.approvals: ApprovalService | None = None
        self.questions: QuestionService | None = None
        self.relay: ApprovalRelay | None = None
        self.gateway: Gateway | None = None  # the model gateway open_runtime ran for it, if any
        self.contexts = SessionContexts()  # log fields and spans of the turns running here

    @property
    def name(self) -> str:
        """The runtime's display name."""
        return self.actor.name

    @property
    def connection(self) -> Connection:
        """The live connection.

        Raises:
            TransportClosedError: the runtime is not (or no longer) connected.
        """
        connection = self.actor.connection
        if connection is None:
            raise TransportClosedError(f"runtime {self.name!r} is not connected")
        return connection

    @property
    def alive(self) -> bool:
        """True while the connection is open."""
        connection = self.actor.connection
        return connection is not None and not connection.closed

    def session(self, id: str | None = None) -> Session:
        """A handle on session ``id`` (a fresh unique id when None); created lazily on first use."""
        return Session(self, id if id is not None else f"session-{uuid.uuid4().hex}")

    def turns(self, *, limit: int | None = None, capacity: int = DEFAULT_CAPACITY) -> TurnGroup:
        """A group of turns kept in flight without a task each (see ``TurnGroup``)::

            async with runtime.turns(limit=1000) as turns:
                for prompt in prompts:
                    await turns.start(runtime.session(), prompt)
                async for session, outcome in turns:
                    ...  # a TurnResult, or the exception session.run would raise

        ``limit``: at most that many turns in flight (``start`` waits); ``capacity``: as
        ``session.run``'s (notifications buffered before a prompt's receipt).

        Raises:
            ParamValueError: ``limit`` or ``capacity`` is not an integer >= 1.
        """
        return TurnGroup(self, limit=limit, capacity=capacity)

    async def resume(self, id: str) -> Session:
        """Restore persisted session ``id`` (session/resume) and return its handle.

        Raises:
            JsonRpcResponseError: missing, unreadable or occupied; nothing replaces it.
        """
        if not isinstance(id, str) or not id:
            raise ParamValueError("a session ", Param("id", id, spelled="id"), f" must be a non-empty string, not {id!r}")
        await self.connection.request(SESSION_RESUME, SessionIdParams(session_id=id), EmptyResult)
        return Session(self, id)

    def abandon(self, session_id: str) -> None:
        """Mark a session whose run was cancelled mid-turn."""
        self.abandoned.add(session_id)
        log.warning("session %r abandoned by a cancelled run on runtime %r", session_id, self.name)

    def decisions_for(self, collector: TurnCollector, since: float) -> tuple[Any, ...]:
        """Take the approval decisions made for ``collector``'s session tree."""
        if self.approvals is None:
            return ()
        return self.approvals.take((collector.session_id, *collector.children), since)

    def questions_for(self, collector: TurnCollector, since: float) -> tuple[Any, ...]:
        """Take the question records of ``collector``'s session tree."""
        if self.questions is None:
            return ()
        return self.questions.take((collector.session_id, *collector.children), since)

    def forget(self, session_id: str) -> None:
        """Drop what this runtime keeps about a settled session tree that will not be used again.

        Prunes the router's parent edges of its descendants and any approval records not
        taken yet (a run that failed after a decision), so per-session state does not
        accumulate over thousands of sessions (a batch).
        """
        dropped = self.router.forget(session_id)
        if self.approvals is not None:
            self.approvals.take((session_id, *dropped))
        if self.questions is not None:
            self.questions.take((session_id, *dropped))

    async def aclose(self) -> None:
        """Close the runtime (the close ladder); idempotent.

        Pending approval decisions are rejected first (fail closed, recorded); the relay (if
        any) stops listening once the process is gone.
        """
        if self.approvals is not None:
            self.approvals.close()
        try:
            await self.actor.aclose()
        finally:
            if self.relay is not None:
                self.relay.close()


Registrar = Callable[[Runtime], None]
"""Registers request handlers (approvals, questions) on a Runtime before it starts."""


@asynccontextmanager
async def open_runtime(
    spec: RuntimeSpec | None = None,
    *,
    approvals: Any = None,
    answerer: Any = None,
    audit: AuditLog | str | os.PathLike[str] | None = None,
    approval_relay: str | None = None,
    gateway: GatewayOptions | None = DEFAULT_GATEWAY,
) -> AsyncIterator[Runtime]:
    """Start a runtime, yield it ready, and close it (the whole ladder) on exit.

    With no spec, the simulated runtime runs as a process in a temporary DSH_HOME.
    ``approvals`` (a policy) makes the handshake send ``approvalRequests: true``;
    ``answerer`` sets ``capabilities.userQuestions``. ``audit`` (an AuditLog or a path)
    receives one JSON line per approval decision. ``approval_relay`` (``auto``, ``on``,
    ``off``; None: the spec's, ``auto`` by default) decides whether the real runtime's
    internal approval and question chains are answered by the same policy and answerer
    (see ``runtime.ApprovalRelay``). Configuration that cannot take effect is logged as a warning once.
    ``gateway``: the real ``dsh``'s model calls go through a model gateway run for the block
    (docs/gateway.md); ``None`` lets the runtime call the provider itself.

    Raises:
        RuntimeStartError: the runtime did not start or greet.
        ValueError: ``approval_relay="on"`` without a policy or an answerer, or for a runtime
            that loads no ``--patch`` files.
        ExceptionGroup: an error inside the block, alongside the actor's own (use except*).
    """
    async with gateway_for(spec, gateway) as (running, routed):
        async with _open_runtime(routed, approvals=approvals, answerer=answerer, audit=audit,
                                 approval_relay=approval_relay) as runtime:
            runtime.gateway = running
            yield runtime


@asynccontextmanager
async def _open_runtime(
    spec: RuntimeSpec | None, *, approvals: Any, answerer: Any, audit: AuditLog | str | os.PathLike[str] | None,
    approval_relay: str | None,
) -> AsyncIterator[Runtime]:
    if approval_relay is not None and spec is not None:
        spec = spec.evolve(approval_relay=approval_relay)
    with _default_home(spec) as resolved, ExitStack() as stack:
        if approval_relay is not None and spec is None:
            resolved = resolved.evolve(approval_relay=approval_relay)
        relay = None
        if resolved.relays(approvals=approvals is not None, answerer=answerer is not None):
            relay = ApprovalRelay()
            resolved = relay.prepare(resolved, approvals=approvals is not None, questions=answerer is not None)
            stack.callback(relay.cleanup)
        elif resolved.approval_relay == "on":
            raise ParamValueError(Param("approval_relay", "on"), " needs open_runtime(..., ", Param("approvals", spelled="approvals=<policy>"),
                                  ") or ", Param("answerer", spelled="answerer=<answerer>"))
        report_warnings(configuration_warnings(resolved, approvals=approvals is not None, answerer=answerer is not None))
        if audit is not None and not isinstance(audit, AuditLog):
            audit = stack.enter_context(AuditLog(audit, secrets=resolved.secrets()))
        register_secrets(resolved.secrets())  # redacted from every dsh_orchestra log record
        # The real runtime ignores the handshake flags; with the relay they say what we answer.
        actor = RuntimeActor(resolved, approval_requests=approvals is not None, user_questions=answerer is not None)
        router = SessionRouter(source=lambda: actor.connection)
        actor.add_sink(router.push_many)
        runtime = Runtime(actor, router)
        _install_handlers(runtime, approvals=approvals, answerer=answerer, audit=audit)
        runtime.relay = relay
        if relay is not None:
            relay.contexts, relay.root_of = runtime.contexts, router.root_of
        started = False
        try:
            async with trio.open_nursery() as nursery:
                if relay is not None:
                    await nursery.start(relay.run, runtime.approvals, runtime.questions, lambda: actor.pid)
                with log_context(runtime=actor.name):  # the actor's tasks inherit the field
                    await nursery.start(actor.run)
                started = True
                try:
                    yield runtime
                finally:
                    with trio.CancelScope(shield=True):
                        await runtime.aclose()
        except BaseExceptionGroup as group:
            failure = None if started else _sole_error(group)
            if failure is None:
                raise
            raise failure from failure.__cause__  # a failed start comes out bare, as documented


def _sole_error(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The one ordinary exception a group holds (nested groups flattened), else None."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        item = pending.pop()
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        else:
            leaves.append(item)
    return leaves[0] if len(leaves) == 1 and isinstance(leaves[0], Exception) else None


class _default_home:
    """``spec`` as given, or the simulator in a temporary DSH_HOME removed afterwards."""

    def __init__(self, spec: RuntimeSpec | None) -> None:
        self._spec = spec
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> RuntimeSpec:
        if self._spec is not None:
            return self._spec
        self._tmp = scratch_dir("runtime")
        return RuntimeSpec.simulator(dsh_home=self._tmp.name, cwd=self._tmp.name)

    def __exit__(self, *exc_info: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _install_handlers(runtime: Runtime, *, approvals: Any, answerer: Any, audit: Any) -> None:
    """Register the approval and question services on the runtime actor (before it starts)."""
    actor = runtime.actor
    if approvals is not None:
        if isinstance(approvals, ApprovalService):
            service = approvals
            if audit is not None and service.audit is None:
                service.audit = audit
                audit.add_secrets(service.secrets)
        else:
            if not callable(approvals):
                raise ParamTypeError(Param("approvals", approvals, spelled="approvals"),
                                     f" must be a policy (a callable) or an ApprovalService, not {type(approvals).__name__}")
            service = ApprovalService(approvals, runtime=runtime.name, audit=audit, secrets=actor.spec.secrets())
        runtime.approvals = service

        async def approve(params: ApprovalRequestParams) -> Any:
            return await service.handle(params)

        actor.register(APPROVAL_REQUEST, observed_approvals(
            approve, runtime=runtime.name, root_of=runtime.router.root_of, contexts=runtime.contexts
        ), ApprovalRequestParams)
    if answerer is not None:
        if not isinstance(answerer, QuestionService) and not callable(answerer):
            raise ParamTypeError(Param("answerer", answerer, spelled="answerer"),
                                 f" must be a callable or a QuestionService, not {type(answerer).__name__}")
        questions = answerer if isinstance(answerer, QuestionService) else QuestionService(answerer, runtime=runtime.name)
        runtime.questions = questions

        async def ask(params: UserQuestionAskParams) -> Any:
            result = await questions.handle(params)
            if result is None:
                raise NoReply  # the runtime cancelled the question: a late answer is never sent
            return result

        actor.register(USER_QUESTION_ASK, ask, UserQuestionAskParams)
        actor.add_sink(_QuestionSink(questions).push_many)


class _QuestionSink:
    """Feeds ``user-question.cancelled`` to the question service from the reader."""

    def __init__(self, service: QuestionService) -> None:
        self.service = service

    def push_many(self, notifications: list[Notification]) -> None:
        for notification in notifications:
            if notification.method == USER_QUESTION_CANCELLED:
                self.service.on_notification(notification.method, notification.params)

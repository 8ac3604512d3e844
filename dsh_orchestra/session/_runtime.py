"""Runtime: the runtime actor composed with session routing; ``open_runtime`` owns one.

Owns: the session router sink, session handles, abandoned sessions, the approval and
question handlers' registration. Must not know about pools or graphs.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from contextlib import ExitStack, asynccontextmanager
from typing import Any, AsyncIterator, Callable

import trio

from ..approvals import ApprovalService, AuditLog
from ..protocol import (
    APPROVAL_REQUEST,
    SESSION_RESUME,
    USER_QUESTION_ASK,
    USER_QUESTION_CANCELLED,
    ApprovalRequestParams,
    EmptyResult,
    TransportClosedError,
    UserQuestionAskParams,
)
from ..questions import QuestionService
from ..runtime import RuntimeActor, RuntimeSpec
from ..transport import Connection, NoReply, Notification
from ._router import SessionRouter
from ._session import Session
from ._turn import TurnCollector

log = logging.getLogger("dsh_orchestra.session")


class Runtime:
    """A ready runtime: make sessions with ``session()`` and ``resume()``."""

    def __init__(self, actor: RuntimeActor, router: SessionRouter) -> None:
        self.actor = actor
        self.router = router
        self.abandoned: set[str] = set()
        self.approvals: ApprovalService | None = None
        self.questions: QuestionService | None = None

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

    async def resume(self, id: str) -> Session:
        """Restore persisted session ``id`` (session/resume) and return its handle.

        Raises:
            JsonRpcResponseError: missing, unreadable or occupied; nothing replaces it.
        """
        if not isinstance(id, str) or not id:
            raise ValueError(f"a session id must be a non-empty string, not {id!r}")
        await self.connection.request(SESSION_RESUME, {"sessionId": id}, EmptyResult)
        return Session(self, id)

    def abandon(self, session_id: str) -> None:
        """Mark a session whose run was cancelled mid-turn."""
        self.abandoned.add(session_id)
        log.warning("session %r abandoned by a cancelled run on runtime %r", session_id, self.name)

    def decisions_for(self, collector: TurnCollector, since: float) -> tuple[Any, ...]:
        """Take the approval decisions made for ``collector``'s session tree."""
        if self.approvals is None:
            return ()
        return self.approvals.take((collector.session_id, *collector.children))

    async def aclose(self) -> None:
        """Close the runtime (the close ladder); idempotent."""
        await self.actor.aclose()


Registrar = Callable[[Runtime], None]
"""Registers request handlers (approvals, questions) on a Runtime before it starts."""


@asynccontextmanager
async def open_runtime(
    spec: RuntimeSpec | None = None,
    *,
    approvals: Any = None,
    answerer: Any = None,
    audit: AuditLog | str | os.PathLike[str] | None = None,
) -> AsyncIterator[Runtime]:
    """Start a runtime, yield it ready, and close it (the whole ladder) on exit.

    With no spec, the simulated runtime runs as a process in a temporary DSH_HOME.
    ``approvals`` (a policy) makes the handshake send ``approvalRequests: true``;
    ``answerer`` sets ``capabilities.userQuestions``. ``audit`` (an AuditLog or a path)
    receives one JSON line per approval decision.

    Raises:
        RuntimeStartError: the runtime did not start or greet.
        ExceptionGroup: an error inside the block, alongside the actor's own (use except*).
    """
    with _default_home(spec) as resolved, ExitStack() as stack:
        if audit is not None and not isinstance(audit, AuditLog):
            audit = stack.enter_context(AuditLog(audit, secrets=resolved.secrets()))
        actor = RuntimeActor(resolved, approval_requests=approvals is not None, user_questions=answerer is not None)
        router = SessionRouter()
        actor.add_sink(router.push)
        runtime = Runtime(actor, router)
        _install_handlers(runtime, approvals=approvals, answerer=answerer, audit=audit)
        started = False
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(actor.run)
                started = True
                try:
                    yield runtime
                finally:
                    with trio.CancelScope(shield=True):
                        await actor.aclose()
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
        self._tmp = tempfile.TemporaryDirectory(prefix="dsh-orchestra-")
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
        else:
            service = ApprovalService(approvals, runtime=runtime.name, audit=audit, secrets=actor.spec.secrets())
        runtime.approvals = service
        actor.register(APPROVAL_REQUEST, service.handle, ApprovalRequestParams)
    if answerer is not None:
        questions = answerer if isinstance(answerer, QuestionService) else QuestionService(answerer, runtime=runtime.name)
        runtime.questions = questions

        async def ask(params: UserQuestionAskParams) -> Any:
            result = await questions.handle(params)
            if result is None:
                raise NoReply  # the runtime cancelled the question: a late answer is never sent
            return result

        actor.register(USER_QUESTION_ASK, ask, UserQuestionAskParams)
        actor.add_sink(_QuestionSink(questions).push)


class _QuestionSink:
    """Feeds ``user-question.cancelled`` to the question service from the reader."""

    def __init__(self, service: QuestionService) -> None:
        self.service = service

    def push(self, notification: Notification) -> None:
        if notification.method == USER_QUESTION_CANCELLED:
            self.service.on_notification(notification.method, notification.params)

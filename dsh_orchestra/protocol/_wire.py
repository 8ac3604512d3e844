"""Params and results of every method and notification of the newest spec.

Pure: no trio, no I/O. Attribute names are snake_case; only the converter knows the wire
names (``session_id`` is ``sessionId``). An optional left at its default is omitted on the
wire, never sent as null.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ._content import ContentBlock
from ._events import SessionEvent

# Method names (client -> server).
INITIALIZE = "initialize"
SESSION_PROMPT = "session/prompt"
SESSION_QUERY = "session/query"
SESSION_RESUME = "session/resume"
SESSION_WAIT = "session/wait"
WORKING_DIRECTORY_GET = "session/working-directory/get"
WORKING_DIRECTORY_SET = "session/working-directory/set"
SHUTDOWN = "shutdown"
# Server -> client requests.
APPROVAL_REQUEST = "approval/request"
USER_QUESTION_ASK = "user-question/ask"
# Server -> client notifications.
SESSION_EVENT = "session.event"
SESSION_STATUS = "session.status"
SESSION_QUERY_COMPLETED = "session.query.completed"
SUBAGENT_STARTED = "subagent.started"
SUBAGENT_FINISHED = "subagent.finished"
USER_QUESTION_CANCELLED = "user-question.cancelled"

ApprovalOutcome = Literal["allowed-once", "rejected", "cancelled"]
SessionStatus = Literal["running", "idle"]


@attrs.frozen(kw_only=True)
class ClientCapabilities:
    """``initialize.capabilities``."""

    user_questions: bool | None = None


@attrs.frozen(kw_only=True)
class InitializeParams:
    """Params of ``initialize``; ``cwd`` should be absolute (the runtime resolves it again)."""

    cwd: str
    provider: str
    model: str
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    approval_requests: bool | None = None
    capabilities: ClientCapabilities | None = None


@attrs.frozen(kw_only=True)
class ServerInfo:
    """``initialize.serverInfo``; ``version`` is not a protocol version."""

    name: str | None = None
    version: str | None = None


@attrs.frozen(kw_only=True)
class InitializeResult:
    """Result of ``initialize``."""

    server_info: ServerInfo | None = None


@attrs.frozen(kw_only=True)
class PromptParams:
    """Params of ``session/prompt``."""

    session_id: str
    content_blocks: list[ContentBlock]


@attrs.frozen(kw_only=True)
class PromptResult:
    """Result of ``session/prompt``: the durable enqueue receipt."""

    message_id: str


@attrs.frozen(kw_only=True)
class QueryParams:
    """Params of ``session/query``."""

    session_id: str
    content_blocks: list[ContentBlock]


@attrs.frozen(kw_only=True)
class QueryResult:
    """Result of ``session/query``: a prompt receipt or a command execution (opaque)."""

    kind: Literal["prompt", "command"]
    message_id: str | None = None
    execution: Any = None


@attrs.frozen(kw_only=True)
class SessionIdParams:
    """Params of ``session/resume``, ``session/wait`` and ``working-directory/get``."""

    session_id: str


ResumeParams = WaitParams = WorkingDirectoryGetParams = SessionIdParams


@attrs.frozen(kw_only=True)
class EmptyResult:
    """``{}``: the result of ``session/resume``, ``session/wait`` and ``shutdown``."""


ResumeResult = WaitResult = ShutdownResult = EmptyResult


@attrs.frozen(kw_only=True)
class WorkingDirectorySetParams:
    """Params of ``session/working-directory/set``."""

    session_id: str
    path: str


@attrs.frozen(kw_only=True)
class WorkingDirectoryResult:
    """Result of both working-directory methods: the absolute effective directory."""

    cwd: str


@attrs.frozen(kw_only=True)
class ShutdownParams:
    """``shutdown`` takes no params."""


@attrs.frozen(kw_only=True)
class ApprovalRequestParams:
    """Params of the server's ``approval/request``."""

    session_id: str
    tool_name: str
    call_id: str | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalRequestResult:
    """Our answer to ``approval/request``; only ``allowed-once`` approves."""

    outcome: ApprovalOutcome


@attrs.frozen(kw_only=True)
class QuestionOption:
    """One option of a user question."""

    label: str
    description: str | None = None


@attrs.frozen(kw_only=True)
class QuestionIntent:
    """Display intent of a question (``plan-review``)."""

    kind: str
    approve: str
    call_id: str | None = None


@attrs.frozen(kw_only=True)
class Question:
    """One question of ``user-question/ask``, as the model asked it."""

    id: str
    question: str
    detail: str | None = None
    header: str | None = None
    options: list[QuestionOption] | None = None
    multi_select: bool | None = None
    intent: QuestionIntent | None = None


@attrs.frozen(kw_only=True)
class UserQuestionAskParams:
    """Params of the server's ``user-question/ask``."""

    request_id: str
    session_id: str
    questions: list[Question]


@attrs.frozen(kw_only=True)
class Answer:
    """The answer to one question: the labels selected, and optional free text."""

    id: str
    selected: list[str]
    custom: str | None = None


@attrs.frozen(kw_only=True)
class UserQuestionAskResult:
    """Either ``answers`` (each question id exactly once) or ``cancelled: true``."""

    answers: list[Answer] | None = None
    cancelled: bool | None = None


@attrs.frozen(kw_only=True)
class UserQuestionCancelledParams:
    """Params of ``user-question.cancelled``; extra fields are tolerated."""

    request_id: str
    session_id: str | None = None


@attrs.frozen(kw_only=True)
class SessionEventParams:
    """Params of the ``session.event`` notification."""

    session_id: str
    event: SessionEvent


@attrs.frozen(kw_only=True)
class SessionStatusParams:
    """Params of ``session.status``: one agent's running/idle transition."""

    session_id: str
    status: SessionStatus


@attrs.frozen(kw_only=True)
class SessionQueryCompletedParams:
    """Params of ``session.query.completed``; ``finish_reason`` is sent even when null."""

    session_id: str
    command_id: str
    final_response: str
    finish_reason: str | None


@attrs.frozen(kw_only=True)
class SubagentStartedParams:
    """Params of ``subagent.started``: a parent/child edge."""

    parent_session_id: str
    child_session_id: str


@attrs.frozen(kw_only=True)
class SubagentFinishedParams:
    """Params of ``subagent.finished`` (in-process runs only)."""

    provider: str
    agent_id: str
    parent_session_id: str
    child_session_id: str
    status: Literal["ok", "error"]
    stop_reason: str
    last_assistant_message: list[ContentBlock] | None = None


# method -> (params class, result class or None for notifications)
REQUESTS: dict[str, tuple[type, type]] = {
    INITIALIZE: (InitializeParams, InitializeResult),
    SESSION_PROMPT: (PromptParams, PromptResult),
    SESSION_QUERY: (QueryParams, QueryResult),
    SESSION_RESUME: (SessionIdParams, EmptyResult),
    SESSION_WAIT: (SessionIdParams, EmptyResult),
    WORKING_DIRECTORY_GET: (SessionIdParams, WorkingDirectoryResult),
    WORKING_DIRECTORY_SET: (WorkingDirectorySetParams, WorkingDirectoryResult),
    SHUTDOWN: (ShutdownParams, EmptyResult),
    APPROVAL_REQUEST: (ApprovalRequestParams, ApprovalRequestResult),
    USER_QUESTION_ASK: (UserQuestionAskParams, UserQuestionAskResult),
}
NOTIFICATIONS: dict[str, type] = {
    SESSION_EVENT: SessionEventParams,
    SESSION_STATUS: SessionStatusParams,
    SESSION_QUERY_COMPLETED: SessionQueryCompletedParams,
    SUBAGENT_STARTED: SubagentStartedParams,
    SUBAGENT_FINISHED: SubagentFinishedParams,
    USER_QUESTION_CANCELLED: UserQuestionCancelledParams,
}

__all__ = [
    "REQUESTS",
    "NOTIFICATIONS",
    'APPROVAL_REQUEST',
    'Answer',
    'ApprovalOutcome',
    'ApprovalRequestParams',
    'ApprovalRequestResult',
    'ClientCapabilities',
    'EmptyResult',
    'INITIALIZE',
    'InitializeParams',
    'InitializeResult',
    'PromptParams',
    'PromptResult',
    'QueryParams',
    'QueryResult',
    'Question',
    'QuestionIntent',
    'QuestionOption',
    'ResumeParams',
    'ResumeResult',
    'SESSION_EVENT',
    'SESSION_PROMPT',
    'SESSION_QUERY',
    'SESSION_QUERY_COMPLETED',
    'SESSION_RESUME',
    'SESSION_STATUS',
    'SESSION_WAIT',
    'SHUTDOWN',
    'SUBAGENT_FINISHED',
    'SUBAGENT_STARTED',
    'ServerInfo',
    'SessionEventParams',
    'SessionIdParams',
    'SessionQueryCompletedParams',
    'SessionStatus',
    'SessionStatusParams',
    'ShutdownParams',
    'ShutdownResult',
    'SubagentFinishedParams',
    'SubagentStartedParams',
    'USER_QUESTION_ASK',
    'USER_QUESTION_CANCELLED',
    'UserQuestionAskParams',
    'UserQuestionAskResult',
    'UserQuestionCancelledParams',
    'WORKING_DIRECTORY_GET',
    'WORKING_DIRECTORY_SET',
    'WaitParams',
    'WaitResult',
    'WorkingDirectoryGetParams',
    'WorkingDirectoryResult',
    'WorkingDirectorySetParams',
]

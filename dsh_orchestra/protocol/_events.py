"""Typed session events (PROTOCOL.md section 8): envelope plus typed ``data`` per event type.

Pure: no trio, no I/O. The vocabulary is extensible, so an event of an unknown type becomes
``UnknownEvent`` with its raw ``data`` kept. Unknown fields inside known data are ignored.
Opaque parts (message ``source``, ``request/header``) stay plain JSON (``Any``).
"""

from __future__ import annotations

from typing import Any

import attrs

from ._content import ContentBlock


@attrs.frozen(kw_only=True)
class UserMessage:
    """A user-role message (a prompt, a runtime-context block, a notice, ...)."""

    id: str
    role: str
    content: list[ContentBlock]
    source: Any = None


@attrs.frozen(kw_only=True)
class ModelMessage:
    """A system, assistant or tool message inside an event."""

    id: str
    role: str
    content: list[ContentBlock]
    source: Any = None
    tool_call_id: str | None = None
    is_error: bool | None = None


@attrs.frozen(kw_only=True)
class Usage:
    """Token usage of one model step."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


@attrs.frozen(kw_only=True)
class LlmFailure:
    """Why a model call failed (``turn/end`` error, ``llm/retry`` failure)."""

    message: str
    code: str
    status: int | None = None
    provider_retry_after_ms: int | None = None
    request_id: str | None = None


@attrs.frozen(kw_only=True)
class TurnEndReason:
    """``turn/end.data.reason``: ``kind`` plus the error or abort detail."""

    kind: str
    error: LlmFailure | None = None
    reason: Any = None


# ---- data classes, one per event type -------------------------------------------------


@attrs.frozen(kw_only=True)
class PermissionPresetData:
    """The ``data`` of the ``permission/preset`` session event."""
    preset: str


@attrs.frozen(kw_only=True)
class SandboxModeData:
    """The ``data`` of the ``sandbox/mode`` session event."""
    mode: str
    source: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalPolicyData:
    """The ``data`` of the ``approval/policy`` session event."""
    policy: str
    source: str | None = None


@attrs.frozen(kw_only=True)
class InboxSplicedData:
    """The ``data`` of the ``agent/inbox/spliced`` session event."""
    target: str
    start: int
    inserted: list[UserMessage]
    removed_count: int | None = None
    outcome: str | None = None


@attrs.frozen(kw_only=True)
class TurnData:
    """The ``data`` of the ``turn/start`` session event."""
    turn: int


@attrs.frozen(kw_only=True)
class StepData:
    """The ``data`` of the ``step/end`` / ``step/start`` session events."""
    turn: int
    step: int


@attrs.frozen(kw_only=True)
class SystemMessageData:
    """The ``data`` of the ``system/message`` session event."""
    turn: int
    step: int
    message: ModelMessage


@attrs.frozen(kw_only=True)
class RequestHeaderData:
    """The ``data`` of the ``request/header`` session event."""
    header: Any
    reason: str | None = None
    starts_series: bool | None = None


@attrs.frozen(kw_only=True)
class RequestContextData:
    """The ``data`` of the ``request/context`` session event."""
    provider: str
    model: str
    context_window: int | None = None
    system_prompt_update: Any = None


@attrs.frozen(kw_only=True)
class SessionTitleData:
    """The ``data`` of the ``session/title`` session event."""
    title: str
    message_seqs: list[int] | None = None
    source: Any = None


@attrs.frozen(kw_only=True)
class AssistantMessageData:
    """The ``data`` of the ``assistant/message`` session event."""
    turn: int
    step: int
    message: ModelMessage
    usage: Usage | None = None
    stream: Any = None
    interrupted: bool | None = None


@attrs.frozen(kw_only=True)
class AssistantAttemptData:
    """The ``data`` of the ``assistant/attempt`` session event."""
    turn: int
    step: int
    stream: Any = None


@attrs.frozen(kw_only=True)
class ToolCallData:
    """The ``data`` of the ``tool/call`` session event."""
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@attrs.frozen(kw_only=True)
class ToolError:
    """Why a tool call failed (``error`` of a ``tool/result`` event's data)."""
    name: str
    code: str
    reason: Any = None


@attrs.frozen(kw_only=True)
class ToolResultData:
    """The ``data`` of the ``tool/result`` session event."""
    turn: int
    step: int
    message: ModelMessage
    error: ToolError | None = None
    meta: Any = None


@attrs.frozen(kw_only=True)
class TurnEndData:
    """The ``data`` of the ``turn/end`` session event."""
    turn: int
    reason: TurnEndReason


@attrs.frozen(kw_only=True)
class SubagentCatalogData:
    """The ``data`` of the ``subagent/catalog`` session event."""
    child_id: str
    mode: str
    version: int | None = None
    child_created_at: Any = None
    label: str | None = None


@attrs.frozen(kw_only=True)
class WorkingDirectoryChangeData:
    """The ``data`` of the ``working-directory/change`` session event."""
    cwd: str


@attrs.frozen(kw_only=True)
class ApprovalAskedData:
    """The ``data`` of the ``approval/asked`` session event."""
    id: str
    tool_name: str
    call_id: str | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalDecidedData:
    """The ``data`` of the ``approval/decided`` session event."""
    id: str
    outcome: str


@attrs.frozen(kw_only=True)
class LlmRetryData:
    """The ``data`` of the ``llm/retry`` session event."""
    retry_id: str
    turn: int
    step: int
    retry: int
    provider: str | None = None
    mode: str | None = None
    policy_key: str | None = None
    max_retries: int | None = None
    delay_ms: float | None = None  # the runtime sends a jittered float (transcript 04)
    failure: LlmFailure | None = None


@attrs.frozen(kw_only=True)
class LlmRetryStartedData:
    """The ``data`` of the ``llm/retry-started`` session event."""
    retry_id: str
    turn: int
    step: int
    retry: int


@attrs.frozen(kw_only=True)
class DeliveryAcceptedData:
    """The ``data`` of the ``session-log-deepseek/delivery-accepted`` session event."""
    session_id: str
    session_format_version: int | None = None
    through_seq: int | None = None


@attrs.frozen(kw_only=True)
class CommandRunData:
    """The ``data`` of the ``command/run`` session event."""
    command_id: str
    name: str
    source: Any = None
    args: Any = None


@attrs.frozen(kw_only=True)
class CommandDoneData:
    """The ``data`` of the ``command/done`` session event."""
    command_id: str
    kind: str
    text: str | None = None
    source_event_seq: int | None = None


# ---- envelopes -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class _Envelope:
    """Fields every session event carries."""

    type: str
    seq: int
    time: int
    ignorable: bool | None = None
    surface_op: Any = None
    source_event_seqs: list[int] | None = None


@attrs.frozen(kw_only=True)
class UnknownEvent(_Envelope):
    """An event of a type we do not model; ``data`` is kept raw."""

    data: Any = None


# Explicit classes (not generated) so type checkers and users can name them.
@attrs.frozen(kw_only=True)
class PermissionPreset(_Envelope):
    """The ``permission/preset`` session event."""
    data: PermissionPresetData


@attrs.frozen(kw_only=True)
class SandboxMode(_Envelope):
    """The ``sandbox/mode`` session event."""
    data: SandboxModeData


@attrs.frozen(kw_only=True)
class ApprovalPolicy(_Envelope):
    """The ``approval/policy`` session event."""
    data: ApprovalPolicyData


@attrs.frozen(kw_only=True)
class InboxSpliced(_Envelope):
    """The ``agent/inbox/spliced`` session event."""
    data: InboxSplicedData


@attrs.frozen(kw_only=True)
class TurnStart(_Envelope):
    """The ``turn/start`` session event."""
    data: TurnData


@attrs.frozen(kw_only=True)
class StepStart(_Envelope):
    """The ``step/start`` session event."""
    data: StepData


@attrs.frozen(kw_only=True)
class StepEnd(_Envelope):
    """The ``step/end`` session event."""
    data: StepData


@attrs.frozen(kw_only=True)
class SystemMessageEvent(_Envelope):
    """The ``system/message`` session event."""
    data: SystemMessageData


@attrs.frozen(kw_only=True)
class UserMessageEvent(_Envelope):
    """The ``user/message`` session event."""
    data: UserMessage


@attrs.frozen(kw_only=True)
class RequestHeader(_Envelope):
    """The ``request/header`` session event."""
    data: RequestHeaderData


@attrs.frozen(kw_only=True)
class RequestContext(_Envelope):
    """The ``request/context`` session event."""
    data: RequestContextData


@attrs.frozen(kw_only=True)
class SessionTitle(_Envelope):
    """The ``session/title`` session event."""
    data: SessionTitleData


@attrs.frozen(kw_only=True)
class AssistantMessage(_Envelope):
    """The ``assistant/message`` session event."""
    data: AssistantMessageData


@attrs.frozen(kw_only=True)
class AssistantAttempt(_Envelope):
    """The ``assistant/attempt`` session event."""
    data: AssistantAttemptData


@attrs.frozen(kw_only=True)
class ToolCall(_Envelope):
    """The ``tool/call`` session event."""
    data: ToolCallData


@attrs.frozen(kw_only=True)
class ToolResult(_Envelope):
    """The ``tool/result`` session event."""
    data: ToolResultData


@attrs.frozen(kw_only=True)
class TurnEnd(_Envelope):
    """The ``turn/end`` session event."""
    data: TurnEndData


@attrs.frozen(kw_only=True)
class SubagentCatalog(_Envelope):
    """The ``subagent/catalog`` session event."""
    data: SubagentCatalogData


@attrs.frozen(kw_only=True)
class WorkingDirectoryChange(_Envelope):
    """The ``working-directory/change`` session event."""
    data: WorkingDirectoryChangeData


@attrs.frozen(kw_only=True)
class ApprovalAsked(_Envelope):
    """The ``approval/asked`` session event."""
    data: ApprovalAskedData


@attrs.frozen(kw_only=True)
class ApprovalDecided(_Envelope):
    """The ``approval/decided`` session event."""
    data: ApprovalDecidedData


@attrs.frozen(kw_only=True)
class LlmRetry(_Envelope):
    """The ``llm/retry`` session event."""
    data: LlmRetryData


@attrs.frozen(kw_only=True)
class LlmRetryStarted(_Envelope):
    """The ``llm/retry-started`` session event."""
    data: LlmRetryStartedData


@attrs.frozen(kw_only=True)
class DeliveryAccepted(_Envelope):
    """The ``session-log-deepseek/delivery-accepted`` session event."""
    data: DeliveryAcceptedData


@attrs.frozen(kw_only=True)
class CommandRun(_Envelope):
    """The ``command/run`` session event."""
    data: CommandRunData


@attrs.frozen(kw_only=True)
class CommandDone(_Envelope):
    """The ``command/done`` session event."""
    data: CommandDoneData


EVENT_CLASSES: dict[str, type[_Envelope]] = {
    "permission/preset": PermissionPreset,
    "sandbox/mode": SandboxMode,
    "approval/policy": ApprovalPolicy,
    "agent/inbox/spliced": InboxSpliced,
    "turn/start": TurnStart,
    "step/start": StepStart,
    "step/end": StepEnd,
    "system/message": SystemMessageEvent,
    "user/message": UserMessageEvent,
    "request/header": RequestHeader,
    "request/context": RequestContext,
    "session/title": SessionTitle,
    "assistant/message": AssistantMessage,
    "assistant/attempt": AssistantAttempt,
    "tool/call": ToolCall,
    "tool/result": ToolResult,
    "turn/end": TurnEnd,
    "subagent/catalog": SubagentCatalog,
    "working-directory/change": WorkingDirectoryChange,
    "approval/asked": ApprovalAsked,
    "approval/decided": ApprovalDecided,
    "llm/retry": LlmRetry,
    "llm/retry-started": LlmRetryStarted,
    "session-log-deepseek/delivery-accepted": DeliveryAccepted,
    "command/run": CommandRun,
    "command/done": CommandDone,
}

SessionEvent = (
    PermissionPreset
    | SandboxMode
    | ApprovalPolicy
    | InboxSpliced
    | TurnStart
    | StepStart
    | StepEnd
    | SystemMessageEvent
    | UserMessageEvent
    | RequestHeader
    | RequestContext
    | SessionTitle
    | AssistantMessage
    | AssistantAttempt
    | ToolCall
    | ToolResult
    | TurnEnd
    | SubagentCatalog
    | WorkingDirectoryChange
    | ApprovalAsked
    | ApprovalDecided
    | LlmRetry
    | LlmRetryStarted
    | DeliveryAccepted
    | CommandRun
    | CommandDone
    | UnknownEvent
)

__all__ = [
    "EVENT_CLASSES",
    'ApprovalAsked',
    'ApprovalAskedData',
    'ApprovalDecided',
    'ApprovalDecidedData',
    'ApprovalPolicy',
    'ApprovalPolicyData',
    'AssistantAttempt',
    'AssistantAttemptData',
    'AssistantMessage',
    'AssistantMessageData',
    'CommandDone',
    'CommandDoneData',
    'CommandRun',
    'CommandRunData',
    'DeliveryAccepted',
    'DeliveryAcceptedData',
    'InboxSpliced',
    'InboxSplicedData',
    'LlmFailure',
    'LlmRetry',
    'LlmRetryData',
    'LlmRetryStarted',
    'LlmRetryStartedData',
    'ModelMessage',
    'PermissionPreset',
    'PermissionPresetData',
    'RequestContext',
    'RequestContextData',
    'RequestHeader',
    'RequestHeaderData',
    'SandboxMode',
    'SandboxModeData',
    'SessionEvent',
    'SessionTitle',
    'SessionTitleData',
    'StepData',
    'StepEnd',
    'StepStart',
    'SubagentCatalog',
    'SubagentCatalogData',
    'SystemMessageData',
    'SystemMessageEvent',
    'ToolCall',
    'ToolCallData',
    'ToolError',
    'ToolResult',
    'ToolResultData',
    'TurnData',
    'TurnEnd',
    'TurnEndData',
    'TurnEndReason',
    'TurnStart',
    'UnknownEvent',
    'Usage',
    'UserMessage',
    'UserMessageEvent',
    'WorkingDirectoryChange',
    'WorkingDirectoryChangeData',
]

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
    preset: str


@attrs.frozen(kw_only=True)
class SandboxModeData:
    mode: str
    source: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalPolicyData:
    policy: str
    source: str | None = None


@attrs.frozen(kw_only=True)
class InboxSplicedData:
    target: str
    start: int
    inserted: list[UserMessage]
    removed_count: int | None = None
    outcome: str | None = None


@attrs.frozen(kw_only=True)
class TurnData:
    turn: int


@attrs.frozen(kw_only=True)
class StepData:
    turn: int
    step: int


@attrs.frozen(kw_only=True)
class SystemMessageData:
    turn: int
    step: int
    message: ModelMessage


@attrs.frozen(kw_only=True)
class RequestHeaderData:
    header: Any
    reason: str | None = None
    starts_series: bool | None = None


@attrs.frozen(kw_only=True)
class RequestContextData:
    provider: str
    model: str
    context_window: int | None = None
    system_prompt_update: Any = None


@attrs.frozen(kw_only=True)
class SessionTitleData:
    title: str
    message_seqs: list[int] | None = None
    source: Any = None


@attrs.frozen(kw_only=True)
class AssistantMessageData:
    turn: int
    step: int
    message: ModelMessage
    usage: Usage | None = None
    stream: Any = None
    interrupted: bool | None = None


@attrs.frozen(kw_only=True)
class AssistantAttemptData:
    turn: int
    step: int
    stream: Any = None


@attrs.frozen(kw_only=True)
class ToolCallData:
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@attrs.frozen(kw_only=True)
class ToolError:
    name: str
    code: str
    reason: Any = None


@attrs.frozen(kw_only=True)
class ToolResultData:
    turn: int
    step: int
    message: ModelMessage
    error: ToolError | None = None
    meta: Any = None


@attrs.frozen(kw_only=True)
class TurnEndData:
    turn: int
    reason: TurnEndReason


@attrs.frozen(kw_only=True)
class SubagentCatalogData:
    child_id: str
    mode: str
    version: int | None = None
    child_created_at: Any = None
    label: str | None = None


@attrs.frozen(kw_only=True)
class WorkingDirectoryChangeData:
    cwd: str


@attrs.frozen(kw_only=True)
class ApprovalAskedData:
    id: str
    tool_name: str
    call_id: str | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalDecidedData:
    id: str
    outcome: str


@attrs.frozen(kw_only=True)
class LlmRetryData:
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
    retry_id: str
    turn: int
    step: int
    retry: int


@attrs.frozen(kw_only=True)
class DeliveryAcceptedData:
    session_id: str
    session_format_version: int | None = None
    through_seq: int | None = None


@attrs.frozen(kw_only=True)
class CommandRunData:
    command_id: str
    name: str
    source: Any = None
    args: Any = None


@attrs.frozen(kw_only=True)
class CommandDoneData:
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
    data: PermissionPresetData


@attrs.frozen(kw_only=True)
class SandboxMode(_Envelope):
    data: SandboxModeData


@attrs.frozen(kw_only=True)
class ApprovalPolicy(_Envelope):
    data: ApprovalPolicyData


@attrs.frozen(kw_only=True)
class InboxSpliced(_Envelope):
    data: InboxSplicedData


@attrs.frozen(kw_only=True)
class TurnStart(_Envelope):
    data: TurnData


@attrs.frozen(kw_only=True)
class StepStart(_Envelope):
    data: StepData


@attrs.frozen(kw_only=True)
class StepEnd(_Envelope):
    data: StepData


@attrs.frozen(kw_only=True)
class SystemMessageEvent(_Envelope):
    data: SystemMessageData


@attrs.frozen(kw_only=True)
class UserMessageEvent(_Envelope):
    data: UserMessage


@attrs.frozen(kw_only=True)
class RequestHeader(_Envelope):
    data: RequestHeaderData


@attrs.frozen(kw_only=True)
class RequestContext(_Envelope):
    data: RequestContextData


@attrs.frozen(kw_only=True)
class SessionTitle(_Envelope):
    data: SessionTitleData


@attrs.frozen(kw_only=True)
class AssistantMessage(_Envelope):
    data: AssistantMessageData


@attrs.frozen(kw_only=True)
class AssistantAttempt(_Envelope):
    data: AssistantAttemptData


@attrs.frozen(kw_only=True)
class ToolCall(_Envelope):
    data: ToolCallData


@attrs.frozen(kw_only=True)
class ToolResult(_Envelope):
    data: ToolResultData


@attrs.frozen(kw_only=True)
class TurnEnd(_Envelope):
    data: TurnEndData


@attrs.frozen(kw_only=True)
class SubagentCatalog(_Envelope):
    data: SubagentCatalogData


@attrs.frozen(kw_only=True)
class WorkingDirectoryChange(_Envelope):
    data: WorkingDirectoryChangeData


@attrs.frozen(kw_only=True)
class ApprovalAsked(_Envelope):
    data: ApprovalAskedData


@attrs.frozen(kw_only=True)
class ApprovalDecided(_Envelope):
    data: ApprovalDecidedData


@attrs.frozen(kw_only=True)
class LlmRetry(_Envelope):
    data: LlmRetryData


@attrs.frozen(kw_only=True)
class LlmRetryStarted(_Envelope):
    data: LlmRetryStartedData


@attrs.frozen(kw_only=True)
class DeliveryAccepted(_Envelope):
    data: DeliveryAcceptedData


@attrs.frozen(kw_only=True)
class CommandRun(_Envelope):
    data: CommandRunData


@attrs.frozen(kw_only=True)
class CommandDone(_Envelope):
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

"""dsh_orchestra: trio-native orchestration for DeepSeek Harness runtimes.

The public API is re-exported here, lazily: ``import dsh_orchestra.protocol`` stays free of trio.
The subpackages are the layers (protocol, transport, runtime, session, approvals, questions,
pool, workflow, eval, batch) and ``testing`` (simulator, scripted model server).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._logging import install_library_logging as _install_logging
from ._version import __version__ as __version__

_EXPORTS: dict[str, tuple[str, str]] = {
    'ApprovalRequest': ('approvals', 'ApprovalRequest'),
    'ApprovalService': ('approvals', 'ApprovalService'),
    'AuditLog': ('approvals', 'AuditLog'),
    'BatchOptions': ('batch', 'BatchOptions'),
    'BatchSummary': ('batch', 'BatchSummary'),
    'BatchUsageError': ('batch', 'BatchUsageError'),
    'CommandResult': ('session', 'CommandResult'),
    'Connection': ('transport', 'Connection'),
    'DatasetError': ('batch', 'DatasetError'),
    'Decision': ('approvals', 'Decision'),
    'DecisionRecord': ('approvals', 'DecisionRecord'),
    'EvalItem': ('eval', 'EvalItem'),
    'EvalResult': ('eval', 'EvalResult'),
    'FrameTooLargeError': ('protocol', 'FrameTooLargeError'),
    'JsonRpcResponseError': ('protocol', 'JsonRpcResponseError'),
    'MethodNotSupportedError': ('protocol', 'MethodNotSupportedError'),
    'Notification': ('transport', 'Notification'),
    'OrchestraError': ('protocol', 'OrchestraError'),
    'PoolClosedError': ('pool', 'PoolClosedError'),
    'QuestionAnswerError': ('questions', 'QuestionAnswerError'),
    'QuestionsRequest': ('questions', 'QuestionsRequest'),
    'RequestTimeoutError': ('protocol', 'RequestTimeoutError'),
    'Runtime': ('session', 'Runtime'),
    'RuntimeActor': ('runtime', 'RuntimeActor'),
    'RuntimeExitedError': ('protocol', 'RuntimeExitedError'),
    'RuntimePool': ('pool', 'RuntimePool'),
    'RuntimeSpec': ('runtime', 'RuntimeSpec'),
    'RuntimeStartError': ('protocol', 'RuntimeStartError'),
    'Score': ('eval', 'Score'),
    'SdkProtocolError': ('protocol', 'SdkProtocolError'),
    'Session': ('session', 'Session'),
    'StepContext': ('workflow', 'StepContext'),
    'StepResult': ('workflow', 'StepResult'),
    'SubagentResult': ('session', 'SubagentResult'),
    'SubscriberOverflowError': ('protocol', 'SubscriberOverflowError'),
    'Subscription': ('transport', 'Subscription'),
    'TransportClosedError': ('protocol', 'TransportClosedError'),
    'TurnResult': ('session', 'TurnResult'),
    'Workflow': ('workflow', 'Workflow'),
    'WorkflowResult': ('workflow', 'WorkflowResult'),
    'configure_logging': ('_logging', 'configure_logging'),
    'enable_tracing': ('_tracing', 'enable_tracing'),
    'load_dataset': ('batch', 'load_dataset'),
    'load_policy': ('approvals', 'load_policy'),
    'log_context': ('_logging', 'log_context'),
    'open_pool': ('pool', 'open_pool'),
    'open_runtime': ('session', 'open_runtime'),
    'register_secrets': ('_logging', 'register_secrets'),
    'replay': ('approvals', 'replay'),
    'run_batch': ('batch', 'run_batch'),
    'run_workflow': ('workflow', 'run_workflow'),
    'open_workflow': ('workflow', 'open_workflow'),
    'escalate': ('workflow', 'escalate'),
    'load_recipe': ('workflow', 'load_recipe'),
    'CheckpointError': ('workflow', 'CheckpointError'),
}

if TYPE_CHECKING:
    from ._logging import configure_logging as configure_logging, log_context as log_context, register_secrets as register_secrets
    from ._tracing import enable_tracing as enable_tracing
    from .approvals import ApprovalRequest as ApprovalRequest, ApprovalService as ApprovalService, AuditLog as AuditLog, Decision as Decision, DecisionRecord as DecisionRecord, load_policy as load_policy, replay as replay
    from .eval import EvalItem as EvalItem, EvalResult as EvalResult, Score as Score
    from .batch import BatchOptions as BatchOptions, BatchSummary as BatchSummary, BatchUsageError as BatchUsageError, DatasetError as DatasetError, load_dataset as load_dataset, run_batch as run_batch
    from .pool import PoolClosedError as PoolClosedError, RuntimePool as RuntimePool, open_pool as open_pool
    from .protocol import FrameTooLargeError as FrameTooLargeError, JsonRpcResponseError as JsonRpcResponseError, MethodNotSupportedError as MethodNotSupportedError, OrchestraError as OrchestraError, RequestTimeoutError as RequestTimeoutError, RuntimeExitedError as RuntimeExitedError, RuntimeStartError as RuntimeStartError, SdkProtocolError as SdkProtocolError, SubscriberOverflowError as SubscriberOverflowError, TransportClosedError as TransportClosedError
    from .questions import QuestionAnswerError as QuestionAnswerError, QuestionsRequest as QuestionsRequest
    from .runtime import RuntimeActor as RuntimeActor, RuntimeSpec as RuntimeSpec
    from .session import CommandResult as CommandResult, Runtime as Runtime, Session as Session, SubagentResult as SubagentResult, TurnResult as TurnResult, open_runtime as open_runtime
    from .transport import Connection as Connection, Notification as Notification, Subscription as Subscription
    from .workflow import StepContext as StepContext, StepResult as StepResult, Workflow as Workflow, WorkflowResult as WorkflowResult, run_workflow as run_workflow
    from .workflow import CheckpointError as CheckpointError, escalate as escalate, load_recipe as load_recipe, open_workflow as open_workflow


def __getattr__(name: str) -> Any:
    """Import a re-exported name on first use."""
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


_install_logging()

__all__ = ["__version__", 'ApprovalRequest', 'ApprovalService', 'AuditLog', 'BatchOptions', 'BatchSummary', 'BatchUsageError', 'CommandResult', 'Connection', 'DatasetError', 'Decision', 'DecisionRecord', 'EvalItem', 'EvalResult', 'FrameTooLargeError', 'JsonRpcResponseError', 'MethodNotSupportedError', 'Notification', 'OrchestraError', 'PoolClosedError', 'QuestionAnswerError', 'QuestionsRequest', 'RequestTimeoutError', 'Runtime', 'RuntimeActor', 'RuntimeExitedError', 'RuntimePool', 'RuntimeSpec', 'RuntimeStartError', 'Score', 'SdkProtocolError', 'Session', 'StepContext', 'StepResult', 'SubagentResult', 'SubscriberOverflowError', 'Subscription', 'TransportClosedError', 'TurnResult', 'Workflow', 'WorkflowResult', 'configure_logging', 'enable_tracing', 'load_dataset', 'load_policy', 'log_context', 'open_pool', 'open_runtime', 'register_secrets', 'replay', 'run_batch', 'run_workflow', 'open_workflow', 'escalate', 'load_recipe', 'CheckpointError']

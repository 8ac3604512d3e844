"""dsh_orchestra: trio-native orchestration for DeepSeek Harness runtimes.

The public API (the curated list ``_public.ROOT_EXPORTS``) is re-exported here, lazily:
``import dsh_orchestra.protocol`` stays free of trio.
The subpackages are the layers (protocol, transport, runtime, session, approvals, questions,
pool, workflow, results, eval, batch, gateway) and ``testing`` (simulator, scripted model server).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _logging as _logging, _tracing as _tracing  # used by name below
from ._logging import install_library_logging as _install_logging
from ._public import ROOT_EXPORTS as _EXPORTS, fix_module as _fix_module
from ._version import __version__ as __version__

if TYPE_CHECKING:
    from ._logging import configure_logging as configure_logging, log_context as log_context, register_secrets as register_secrets
    from ._tracing import enable_tracing as enable_tracing
    from .approvals import ApprovalRequest as ApprovalRequest, ApprovalService as ApprovalService, AuditLog as AuditLog, Decision as Decision, DecisionRecord as DecisionRecord, load_policy as load_policy, replay as replay
    from .eval import EvalItem as EvalItem, EvalResult as EvalResult, Score as Score
    from .gateway import GatewayOptions as GatewayOptions
    from .batch import BatchOptions as BatchOptions, BatchSummary as BatchSummary, BatchUsageError as BatchUsageError, DatasetError as DatasetError, load_dataset as load_dataset, run_batch as run_batch
    from .pool import PoolClosedError as PoolClosedError, RuntimePool as RuntimePool, open_places as open_places, open_pool as open_pool
    from .protocol import FrameTooLargeError as FrameTooLargeError, JsonRpcResponseError as JsonRpcResponseError, MethodNotSupportedError as MethodNotSupportedError, OrchestraError as OrchestraError, RequestTimeoutError as RequestTimeoutError, RuntimeExitedError as RuntimeExitedError, RuntimeStartError as RuntimeStartError, SdkProtocolError as SdkProtocolError, SubscriberOverflowError as SubscriberOverflowError, TransportClosedError as TransportClosedError
    from .questions import QuestionAnswerError as QuestionAnswerError, QuestionsRequest as QuestionsRequest
    from .results import ResultLine as ResultLine
    from .runtime import RuntimeActor as RuntimeActor, RuntimeSpec as RuntimeSpec
    from .session import CommandResult as CommandResult, Runtime as Runtime, Session as Session, SubagentResult as SubagentResult, TurnGroup as TurnGroup, TurnResult as TurnResult, open_runtime as open_runtime
    from .transport import Connection as Connection, Notification as Notification, Subscription as Subscription
    from .workflow import StepContext as StepContext, StepResult as StepResult, Workflow as Workflow, WorkflowResult as WorkflowResult, run_workflow as run_workflow
    from .workflow import WorkflowOptions as WorkflowOptions
    from .workflow import CheckpointError as CheckpointError, escalate as escalate, load_recipe as load_recipe, open_workflow as open_workflow


def __getattr__(name: str) -> Any:
    """Import a re-exported name on first use."""
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


for _name, _module in _EXPORTS.items():  # the shared helpers' exports: public here, at once
    if _module in ("_logging", "_tracing"):
        _fix_module(getattr(globals()[_module], _name), _name, __name__)

_install_logging()

__all__ = ["__version__", *_EXPORTS]

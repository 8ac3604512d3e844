"""dsh_orchestra: trio-native orchestration for DeepSeek Harness runtimes.

The public API is re-exported here; the subpackages are the layers (protocol, transport,
runtime, session, approvals, questions, pool, batch) and ``testing`` (simulator, fake model).
"""

from ._version import __version__ as __version__
from ._logging import configure_logging as configure_logging, install_library_logging as _install_logging, log_context as log_context
from ._tracing import enable_tracing as enable_tracing
from .approvals import (
    ApprovalRequest as ApprovalRequest,
    ApprovalService as ApprovalService,
    AuditLog as AuditLog,
    Decision as Decision,
    DecisionRecord as DecisionRecord,
    load_policy as load_policy,
    replay as replay,
)
from .batch import (
    BatchOptions as BatchOptions,
    BatchSummary as BatchSummary,
    BatchUsageError as BatchUsageError,
    DatasetError as DatasetError,
    load_dataset as load_dataset,
    run_batch as run_batch,
)
from .pool import PoolClosedError as PoolClosedError, RuntimePool as RuntimePool, open_pool as open_pool
from .protocol import (
    FrameTooLargeError as FrameTooLargeError,
    JsonRpcResponseError as JsonRpcResponseError,
    MethodNotSupportedError as MethodNotSupportedError,
    OrchestraError as OrchestraError,
    RequestTimeoutError as RequestTimeoutError,
    RuntimeExitedError as RuntimeExitedError,
    RuntimeStartError as RuntimeStartError,
    SdkProtocolError as SdkProtocolError,
    SubscriberOverflowError as SubscriberOverflowError,
    TransportClosedError as TransportClosedError,
)
from .questions import QuestionAnswerError as QuestionAnswerError, QuestionsRequest as QuestionsRequest
from .runtime import RuntimeActor as RuntimeActor, RuntimeSpec as RuntimeSpec
from .session import (
    CommandResult as CommandResult,
    Runtime as Runtime,
    Session as Session,
    SubagentResult as SubagentResult,
    TurnResult as TurnResult,
    open_runtime as open_runtime,
)
from .transport import Connection as Connection, Notification as Notification, Subscription as Subscription
from .workflow import (
    StepContext as StepContext,
    StepResult as StepResult,
    Workflow as Workflow,
    WorkflowResult as WorkflowResult,
    run_workflow as run_workflow,
)

_install_logging()  # a NullHandler on "dsh_orchestra" (silent unless configured); filters on every layer's logger

__all__ = [
    "__version__",
    "configure_logging", "enable_tracing", "log_context",
    "ApprovalRequest", "ApprovalService", "AuditLog", "BatchOptions", "BatchSummary", "BatchUsageError",
    "CommandResult", "Connection", "DatasetError", "Decision", "DecisionRecord", "FrameTooLargeError",
    "JsonRpcResponseError", "MethodNotSupportedError", "Notification", "OrchestraError", "PoolClosedError",
    "QuestionAnswerError", "QuestionsRequest", "RequestTimeoutError", "Runtime", "RuntimeActor",
    "RuntimeExitedError", "RuntimePool", "RuntimeSpec", "RuntimeStartError", "SdkProtocolError", "Session",
    "SubagentResult", "SubscriberOverflowError", "Subscription", "TransportClosedError", "TurnResult",
    "StepContext", "StepResult", "Workflow", "WorkflowResult", "run_workflow",
    "load_dataset", "load_policy", "open_pool", "open_runtime", "replay", "run_batch",
]

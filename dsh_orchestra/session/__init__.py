"""Session layer: session handles, session-tree routing, turn collection, ``open_runtime``.

Knows nothing about pools or workflow graphs.
"""

from ._router import SessionRouter as SessionRouter
from ._runtime import Runtime as Runtime, open_runtime as open_runtime
from ._session import (
    CommandResult as CommandResult,
    PromptInput as PromptInput,
    Session as Session,
    content_blocks as content_blocks,
)
from ._turn import (
    EventLog as EventLog,
    SubagentResult as SubagentResult,
    TurnCollector as TurnCollector,
    TurnResult as TurnResult,
)

__all__ = [
    "CommandResult",
    "EventLog",
    "PromptInput",
    "Runtime",
    "Session",
    "SessionRouter",
    "SubagentResult",
    "TurnCollector",
    "TurnResult",
    "content_blocks",
    "open_runtime",
]

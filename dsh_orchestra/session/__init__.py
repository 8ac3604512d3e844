"""Session layer: session handles, session-tree routing, turn collection, ``open_runtime``.

Knows nothing about pools or workflow graphs.
"""

from .._public import publish as _publish
from ._router import SessionRouter as SessionRouter
from ._runtime import (
    Runtime as Runtime,
    configuration_warnings as configuration_warnings,
    report_warnings as report_warnings,
    open_runtime as open_runtime,
    warnings_reported as warnings_reported,
)
from ._session import (
    CommandResult as CommandResult,
    PromptInput as PromptInput,
    Session as Session,
    content_blocks as content_blocks,
)
from ._turn import (
    OK_FINISH_REASONS as OK_FINISH_REASONS,
    EventLog as EventLog,
    SubagentResult as SubagentResult,
    TurnCollector as TurnCollector,
    TurnResult as TurnResult,
)
from ._turns import TurnGroup as TurnGroup

__all__ = _publish(globals())

"""Workflow graphs: steps that fan prompts across sessions, await settling, and join typed results.

Knows nothing about datasets or the CLI.
"""

from ._engine import (
    FailurePolicy as FailurePolicy,
    SessionLostError as SessionLostError,
    Statistics as Statistics,
    StepContext as StepContext,
    TurnFailedError as TurnFailedError,
    retryable as retryable,
    run_workflow as run_workflow,
)
from ._graph import Route as Route, Step as Step, Workflow as Workflow, WorkflowDefinitionError as WorkflowDefinitionError
from ._output import (
    REPAIR_PREFIX as REPAIR_PREFIX,
    OutputParseError as OutputParseError,
    extract_json as extract_json,
    parse_output as parse_output,
    repair_prompt as repair_prompt,
)
from ._result import (
    ApprovalNote as ApprovalNote,
    ItemResult as ItemResult,
    StepError as StepError,
    StepFailedError as StepFailedError,
    StepResult as StepResult,
    WorkflowResult as WorkflowResult,
    format_summary as format_summary,
    to_mermaid as to_mermaid,
)

__all__ = [
    "REPAIR_PREFIX", "ApprovalNote", "FailurePolicy", "ItemResult", "OutputParseError", "Route",
    "SessionLostError", "Statistics", "Step", "StepContext", "StepError", "StepFailedError", "StepResult",
    "TurnFailedError", "Workflow", "WorkflowDefinitionError", "WorkflowResult", "extract_json",
    "format_summary", "parse_output", "repair_prompt", "retryable", "run_workflow", "to_mermaid",
]

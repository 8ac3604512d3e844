"""Workflow graphs: steps that fan prompts across sessions, await settling, and join typed results.

Knows nothing about datasets or the CLI.
"""

from ._engine import (
    FailurePolicy as FailurePolicy,
    Statistics as Statistics,
    StepContext as StepContext,
    StepFailedError as StepFailedError,
    TurnFailedError as TurnFailedError,
    retryable as retryable,
    run_workflow as run_workflow,
)
from ._graph import Route as Route, Step as Step, Workflow as Workflow, WorkflowDefinitionError as WorkflowDefinitionError
from ._output import OutputParseError as OutputParseError, extract_json as extract_json, parse_output as parse_output
from ._result import (
    ApprovalNote as ApprovalNote,
    ItemResult as ItemResult,
    StepError as StepError,
    StepResult as StepResult,
    WorkflowResult as WorkflowResult,
    to_mermaid as to_mermaid,
)

__all__ = [
    "ApprovalNote", "FailurePolicy", "ItemResult", "OutputParseError", "Route", "Statistics", "Step",
    "StepContext", "StepError", "StepFailedError", "StepResult", "TurnFailedError", "Workflow",
    "WorkflowDefinitionError", "WorkflowResult", "extract_json", "parse_output", "retryable",
    "run_workflow", "to_mermaid",
]

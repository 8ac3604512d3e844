"""Workflow graphs: steps that fan prompts across sessions, await settling, and join typed results;
checkpoints and resume, interrupts, subworkflows, live events, recipes.

Knows nothing about datasets or the CLI.
"""

from .._public import publish as _publish
from ._answers import answer_type as answer_type, typed_answer as typed_answer
from ._engine import (
    FailurePolicy as FailurePolicy,
    SessionLostError as SessionLostError,
    Statistics as Statistics,
    StepContext as StepContext,
    TurnFailedError as TurnFailedError,
    retryable as retryable,
)
from ._events import EventChannel as EventChannel, WorkflowEvent as WorkflowEvent
from ._graph import Route as Route, Step as Step, Workflow as Workflow, WorkflowDefinitionError as WorkflowDefinitionError
from ._interrupts import (
    Answerer as Answerer,
    Answers as Answers,
    Escalation as Escalation,
    InterruptPending as InterruptPending,
    answer_on_terminal as answer_on_terminal,
    escalate as escalate,
)
from ._journal import CheckpointError as CheckpointError, compact_checkpoint as compact_checkpoint
from ._open import (
    CheckpointChanges as CheckpointChanges,
    WorkflowRun as WorkflowRun,
    checkpoint_changes as checkpoint_changes,
    open_workflow as open_workflow,
    run_workflow as run_workflow,
)
from ._options import WorkflowOptions as WorkflowOptions
from ._output import (
    REPAIR_PREFIX as REPAIR_PREFIX,
    OutputParseError as OutputParseError,
    extract_json as extract_json,
    parse_output as parse_output,
    repair_prompt as repair_prompt,
)
from ._recipe import RECIPE_FILE as RECIPE_FILE, Recipe as Recipe, RecipeError as RecipeError, load_recipe as load_recipe
from ._result import (
    ApprovalNote as ApprovalNote,
    Interrupt as Interrupt,
    ItemResult as ItemResult,
    StepError as StepError,
    StepFailedError as StepFailedError,
    StepResult as StepResult,
    WorkflowResult as WorkflowResult,
    format_summary as format_summary,
    to_mermaid as to_mermaid,
)

__all__ = _publish(globals())

"""Recipes: a workflow in a Python file, with what running it needs (script, inputs, policies).

A recipe is one Python file (or a directory holding ``recipe.py``) that defines at module level
``workflow`` (a Workflow, required), ``SCRIPT`` (the scenario script the simulator plays, a
path relative to the recipe), ``INPUTS`` (a dict of workflow inputs), ``APPROVALS`` (an
approval policy) and ``ANSWERER`` (a question answerer). ``dsh-orchestra run`` loads them with
``load_recipe``; so can a Python user.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import attrs

from ._graph import Workflow, WorkflowDefinitionError

RECIPE_FILE = "recipe.py"


class RecipeError(ValueError):
    """The recipe file cannot be loaded or does not follow the convention."""


@attrs.frozen(kw_only=True)
class Recipe:
    """What a recipe file defines."""

    path: Path
    workflow: Workflow
    script: Path | None = None
    inputs: dict[str, Any] = attrs.field(factory=dict)
    approvals: Any = None
    answerer: Any = None


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Execute a recipe file (or ``DIR/recipe.py``) and collect what it defines.

    Raises:
        RecipeError: no such file, it raised while loading, or it breaks the convention.
    """
    file = Path(path)
    if file.is_dir():
        file = file / RECIPE_FILE
    if not file.is_file():
        raise RecipeError(f"recipe {str(path)!r} is not a Python file (or a directory holding {RECIPE_FILE})")
    file = file.resolve()
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(f"dsh_orchestra_recipe_{digest}", file)
    if spec is None or spec.loader is None:
        raise RecipeError(f"recipe {str(file)!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs classes and dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 (the recipe's own error, reported with its traceback)
        sys.modules.pop(spec.name, None)
        detail = "".join(traceback.format_exception_only(exc)).strip()
        raise RecipeError(f"recipe {str(file)!r} failed to load: {detail}") from exc
    workflow = getattr(module, "workflow", None)
    if not isinstance(workflow, Workflow):
        found = type(workflow).__name__ if workflow is not None else "nothing"
        raise RecipeError(f"recipe {str(file)!r} must define a module-level `workflow = Workflow(...)`, found {found}")
    try:
        workflow.validate()
    except WorkflowDefinitionError as exc:
        raise RecipeError(f"recipe {str(file)!r}: {exc}") from exc
    script = getattr(module, "SCRIPT", None)
    if script is not None:
        if not isinstance(script, (str, os.PathLike)):
            raise RecipeError(f"recipe {str(file)!r}: SCRIPT must be a path, not {type(script).__name__}")
        script = (file.parent / script).resolve()
        if not script.is_file():
            raise RecipeError(f"recipe {str(file)!r}: SCRIPT {str(script)!r} does not exist")
    inputs = getattr(module, "INPUTS", {})
    if not isinstance(inputs, dict) or not all(isinstance(k, str) for k in inputs):
        raise RecipeError(f"recipe {str(file)!r}: INPUTS must be a dict with string keys")
    return Recipe(
        path=file, workflow=workflow, script=script, inputs=dict(inputs),
        approvals=getattr(module, "APPROVALS", None), answerer=getattr(module, "ANSWERER", None),
    )

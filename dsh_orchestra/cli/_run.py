"""``dsh-orchestra run RECIPE``: load a workflow from a Python file, run it, print its result.

A recipe is one Python file (or a directory holding ``recipe.py``) that defines at module level:

* ``workflow``: a :class:`~dsh_orchestra.workflow.Workflow` (required);
* ``SCRIPT``: the scenario script (TOML) the simulator plays, a path relative to the recipe
  file; used with ``--runtime sim`` (the default) unless ``--script`` is given;
* ``INPUTS``: a dict of workflow inputs; ``--input KEY=VALUE`` adds or overrides entries;
* ``APPROVALS``: an approval policy, ``ANSWERER``: a question answerer (``--policy`` and
  ``--answerer`` override them).

Exit status: 0 the workflow succeeded, 1 it failed (or its runtime did not start), 2 bad
arguments or a recipe that cannot be loaded. Holds no logic of its own: ``load_recipe`` and
``run_workflow`` are what a Python user would call.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import attrs
import trio

from ..protocol import OrchestraError
from ..workflow import Workflow, WorkflowDefinitionError, WorkflowResult, run_workflow
from ._common import UsageError, add_runtime_options, answerer_option, build_spec, fail, policy_option

RECIPE_FILE = "recipe.py"


class RecipeError(UsageError):
    """The recipe file cannot be loaded or does not follow the convention (exit status 2)."""


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


def parse_inputs(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a VALUE that parses as JSON is used as JSON, else as text.

    Raises:
        UsageError: a pair without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--input takes KEY=VALUE, not {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def register(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    parser = sub.add_parser(
        "run",
        help="run a workflow defined in a Python recipe file and print its result",
        description="Run the `workflow` a recipe file defines (see docs/workflows.md for the convention). "
        "With --runtime sim (the default) the simulator plays the recipe's SCRIPT. Prints a readable "
        "summary, or the whole result as JSON with --json. Exit status: 0 ok, 1 the workflow failed, "
        "2 bad arguments or recipe.",
    )
    parser.add_argument("recipe", help=f"the recipe: a Python file, or a directory holding {RECIPE_FILE}")
    add_runtime_options(parser)
    parser.add_argument("--input", action="append", default=[], metavar="KEY=VALUE", help="a workflow input (VALUE: JSON, else text); repeatable")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of the summary")
    parser.add_argument("--mermaid", default=None, metavar="FILE", help="also write the graph, annotated with the run, as Mermaid")
    parser.add_argument("--runtimes", type=int, default=1, metavar="N", help="runtime processes (a pool when N > 1; default 1)")
    parser.add_argument("--concurrency", type=int, default=None, metavar="N", help="sessions in flight in the workflow (default: no limit)")
    parser.add_argument("--runtime-limit", type=int, default=None, metavar="N", help="sessions in flight per runtime")
    parser.add_argument("--failure", choices=("fail-fast", "collect"), default="fail-fast", help="fail-fast (default): cancel the rest at the first failure; collect: finish what can")
    parser.add_argument("--policy", default=None, metavar="FILE|module:attr", help="approval policy (overrides the recipe's APPROVALS)")
    parser.add_argument("--audit", default=None, metavar="FILE", help="append every approval decision to this JSONL file")
    parser.add_argument("--answerer", default=None, metavar="first-option|FILE|module:attr", help="answers user questions (overrides the recipe's ANSWERER)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run the ``run`` command; returns the exit status."""
    with tempfile.TemporaryDirectory(prefix="dsh-orchestra-home-") as temp_home:
        try:
            recipe = load_recipe(args.recipe)
            simulated = args.runtime_command is None and args.runtime in (None, "sim")
            if simulated and args.script is None and recipe.script is not None:
                args.script = str(recipe.script)
            spec = build_spec(args, temp_home=temp_home)
            inputs = {**recipe.inputs, **parse_inputs(args.input)}
            loaded = policy_option(args.policy)
            approvals = loaded if loaded is not None else recipe.approvals
            answerer = answerer_option(args.answerer) or recipe.answerer
            options: dict[str, Any] = dict(
                spec=spec, runtimes=args.runtimes, approvals=approvals, answerer=answerer, audit=args.audit,
                inputs=inputs, concurrency=args.concurrency, runtime_limit=args.runtime_limit, failure=args.failure,
            )
        except UsageError as exc:
            return fail(str(exc))
        try:
            result: WorkflowResult = trio.run(_run, recipe.workflow, options)
        except ValueError as exc:  # contradictory numbers (run_workflow checks them first)
            return fail(str(exc))
        except (OrchestraError, ExceptionGroup) as exc:
            cause = _first_leaf(exc)
            if not isinstance(cause, OrchestraError):
                raise
            print(f"dsh-orchestra: the workflow could not run: {cause}", file=sys.stderr)
            return 1
    if args.mermaid:
        Path(args.mermaid).write_text(result.mermaid(), encoding="utf-8")
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        print(result.summary(), end="")
    return 0 if result.ok else 1


async def _run(workflow: Workflow, options: dict[str, Any]) -> WorkflowResult:
    return await run_workflow(workflow, **options)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc

"""``dsh-orchestra run RECIPE``: load a workflow from a Python file, run it, print its result.

The recipe convention is ``dsh_orchestra.workflow.load_recipe``'s (docs/workflows.md):
``workflow`` (required), ``SCRIPT``, ``INPUTS`` (``--input KEY=VALUE`` adds or overrides),
``APPROVALS`` and ``ANSWERER`` (``--policy`` and ``--answerer`` override them).
``--checkpoint PATH [--resume]`` journals the run and continues it; ``--answer ID=VALUE``
answers interrupts (the terminal asks too, when stdin is a TTY).

Exit status (docs/batch.md#exit-status): 0 the workflow succeeded, 1 it failed, 2 bad
arguments, a recipe that cannot be loaded or a runtime that cannot start, 3 it ended with
interrupts waiting for answers, 75 it could not run (trouble that may pass), 130 interrupted,
143 terminated (SIGTERM, stopped as Ctrl-C stops it).
Holds no logic of its own: ``load_recipe``, ``checkpoint_changes`` and ``open_workflow`` are
what a Python user would call.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import trio

from .._scratch import scratch_dir
from ..protocol import OrchestraError, RuntimeStartError
from ..workflow import (
    RECIPE_FILE,
    CheckpointError,
    Interrupt,
    RecipeError,
    Workflow,
    WorkflowOptions,
    WorkflowResult,
    answer_on_terminal,
    answer_type,
    checkpoint_changes,
    compact_checkpoint,
    open_workflow,
    typed_answer,
)
from ..workflow import (
    Recipe as Recipe,
)
from ..workflow import (
    load_recipe as load_recipe,
)
from ._common import (
    UsageError,
    add_runtime_options,
    answerer_option,
    build_spec,
    check_numbers,
    fail,
    policy_option,
    start_warnings,
)

from ..session import warnings_reported
from ._gateway import add_gateway_options, check_gateway_flags, gateway_options
from ._paths import Paths, file_option
from ._run_status import StepBoard

from ._exit import EXIT_PENDING, EXIT_TEMPFAIL

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


def parse_answers(pairs: list[str]) -> dict[str, str]:
    """``ID=VALUE`` pairs: an id ends with ``:N``, so the first ``=`` after one ends it.

    Raises:
        UsageError: a pair without ``=`` or with an empty id; one id answered twice differently.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        match = re.match(r"(.+?:\d+)=(.*)\Z", pair, re.DOTALL)
        key, sep, value = (match[1], "=", match[2]) if match else pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--answer takes ID=VALUE, not {pair!r}")
        if key in out and out[key] != value:  # contradictory: neither wins silently
            raise UsageError(f"--answer {key}: given twice with different values ({out[key]!r}, {value!r}); "
                             f"answer interrupt {key!r} once")
        out[key] = value
    return out


def _check_answers(answers: dict[str, str], pending: tuple[Interrupt, ...], workflow: Workflow) -> None:
    """Each ``--answer`` against its pending interrupt: one of its choices, or text that reads
    as the type its step is annotated with (``-> int``: the checkpoint records no type, so it
    comes from the recipe's code, as the engine takes it)."""
    by_id = {i.id: i for i in pending}
    for key, value in answers.items():
        interrupt = by_id.get(key)
        if interrupt is None:
            waiting = ", ".join(by_id) or "none"
            raise UsageError(f"--answer {key}=...: the checkpoint has no pending interrupt {key!r} (pending: {waiting})")
        if interrupt.choices and value not in interrupt.choices:
            raise UsageError(f"--answer {key}={value}: choose one of {', '.join(interrupt.choices)}")
        try:
            typed_answer(key, answer_type(workflow, interrupt), value)
        except ValueError as exc:
            raise UsageError(f"--answer {key}={value}: {exc}") from exc


def register(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    parser = sub.add_parser(
        "run",
        help="run a workflow defined in a Python recipe file and print its result",
        description="Run the `workflow` a recipe file defines (see docs/workflows.md for the convention). "
        "With --runtime sim (the default) the simulator plays the recipe's SCRIPT. Prints a readable "
        "summary, or the whole result as JSON with --json. With --checkpoint the run is journaled as it "
        "goes; --resume continues it after a crash or an interrupt, running only what did not complete. "
        "Exit status: 0 ok, 1 the workflow failed, 2 bad arguments, recipe or runtime, 3 interrupts wait for answers, "
        "75 it could not run part-way (trouble that may pass), 130 interrupted, 143 terminated (SIGTERM).",
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
    parser.add_argument("--checkpoint", default=None, metavar="PATH", help="journal the run in this file (SQLite) as its work completes")
    parser.add_argument("--resume", action="store_true", help="continue the run in --checkpoint: reuse what completed, run the rest")
    parser.add_argument("--answer", action="append", default=[], metavar="ID=VALUE", help="answer a pending interrupt (with --resume); repeatable")
    parser.add_argument("--compact", action="store_true", help="when the run finished, compact --checkpoint to its final result")
    parser.add_argument("--no-progress", action="store_true", help="no live step status on the terminal")
    add_gateway_options(parser)
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """The recipe run's inputs and outputs, by flag (checked before anything runs)."""
    recipe = Path(args.recipe) / RECIPE_FILE if os.path.isdir(args.recipe) else args.recipe
    inputs = {"RECIPE": recipe, "--script": args.script, "--policy": file_option(args.policy),
              "--answerer": file_option(args.answerer)}
    return inputs, {"--audit": args.audit, "--mermaid": args.mermaid, "--checkpoint": args.checkpoint}, {}


def main(args: argparse.Namespace) -> int:
    """Run the ``run`` command; returns the exit status."""
    with scratch_dir("home") as temp_home:
        try:
            check_numbers(args, {"--runtimes": ("int", 1), "--concurrency": ("int", 1), "--runtime-limit": ("int", 1)})
            check_gateway_flags(args)
            recipe = load_recipe(args.recipe)
            simulated = args.runtime_command is None and args.runtime in (None, "sim")
            if simulated and args.script is None and recipe.script is not None:
                args.script = str(recipe.script)
            spec = build_spec(args, temp_home=temp_home)
            inputs = {**recipe.inputs, **parse_inputs(args.input)}
            loaded = policy_option(args.policy)
            approvals = loaded if loaded is not None else recipe.approvals
            answerer = answerer_option(args.answerer) or recipe.answerer
            answers = _answers(args, recipe, inputs)
            options: dict[str, Any] = dict(
                spec=spec, runtimes=args.runtimes, approvals=approvals, answerer=answerer, audit=args.audit,
                inputs=inputs, concurrency=args.concurrency, runtime_limit=args.runtime_limit, failure=args.failure,
                checkpoint=args.checkpoint, resume=args.resume, answers=answers, gateway=gateway_options(args),
            )
            start_warnings(spec, policy=approvals, answerer=answerer)
        except (UsageError, RecipeError) as exc:
            return fail(exc)
        except CheckpointError as exc:
            return fail(exc)
        try:
            with warnings_reported():  # printed and logged once above
                result: WorkflowResult = trio.run(_run, recipe.workflow, options, not args.no_progress)
        except Exception as exc:  # noqa: BLE001 (sorted into exit statuses; anything else re-raised)
            cause = _first_leaf(exc)
            if isinstance(cause, CheckpointError):
                return fail(cause)
            if isinstance(cause, ValueError):  # contradictory numbers (run_workflow checks them first)
                return fail(cause)
            if not isinstance(cause, OrchestraError):
                raise
            if isinstance(cause, RuntimeStartError):  # bad input: the runtime cannot start at all
                return fail(f"the runtime could not start: {cause}")
            print(f"dsh-orchestra: the workflow could not run: {cause}", file=sys.stderr)
            return EXIT_TEMPFAIL
    if args.mermaid:
        Path(args.mermaid).write_text(result.mermaid(), encoding="utf-8")
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        print(result.summary(), end="")
    if result.pending:
        how = f"--checkpoint {args.checkpoint} --resume" if args.checkpoint else "a --checkpoint PATH run, then --resume"
        print(f"dsh-orchestra: {len(result.pending)} interrupt(s) wait for answers; answer with {how} --answer ID=VALUE:", file=sys.stderr)
        for interrupt in result.pending:
            choices = f" (choices: {', '.join(interrupt.choices)})" if interrupt.choices else ""
            print(f"  {interrupt.id}: {interrupt.question}{choices}", file=sys.stderr)
        return EXIT_PENDING
    if args.compact and args.checkpoint:
        try:
            before, after = compact_checkpoint(args.checkpoint)
        except CheckpointError as exc:
            print(f"dsh-orchestra: --compact: {exc.reason}", file=sys.stderr)
        else:
            print(f"dsh-orchestra: checkpoint compacted from {before} to {after} bytes", file=sys.stderr)
    return 0 if result.ok else 1


def _answers(args: argparse.Namespace, recipe: Recipe, inputs: dict[str, Any]) -> Any:
    """The interrupt answers: --answer pairs (checked against the checkpoint), the terminal on a TTY.

    Prints, on --resume, which steps changed since the checkpoint.
    """
    given = parse_answers(args.answer)
    if args.resume and args.checkpoint is None:
        raise UsageError("--resume needs --checkpoint PATH")
    if args.compact and args.checkpoint is None:
        raise UsageError("--compact needs --checkpoint PATH")
    if given and not args.resume:
        raise UsageError("--answer answers the interrupts of a checkpoint: give it with --checkpoint PATH --resume")
    if args.resume:
        changes = checkpoint_changes(recipe.workflow, args.checkpoint, inputs=inputs)
        _check_answers(given, changes.pending, recipe.workflow)
        if changes.changed:
            print(f"dsh-orchestra: changed since the checkpoint (they and their dependents run again): "
                  f"{', '.join(changes.changed)}", file=sys.stderr)
        if changes.added:
            print(f"dsh-orchestra: new since the checkpoint: {', '.join(changes.added)}", file=sys.stderr)
        if changes.removed:
            print(f"dsh-orchestra: no longer in the workflow (ignored): {', '.join(changes.removed)}", file=sys.stderr)
        print(f"dsh-orchestra: {len(changes.reusable)} completed step(s) to reuse unless their inputs change", file=sys.stderr)
    terminal = answer_on_terminal() if sys.stdin.isatty() else None
    if terminal is None:
        return given or None

    async def answer(interrupt: Interrupt) -> Any:
        if interrupt.id in given:
            return given[interrupt.id]
        kind = answer_type(recipe.workflow, interrupt)
        while True:  # a typed step's interrupt: asked again until the answer reads as its type
            value = terminal(interrupt)
            if inspect.isawaitable(value):
                value = await value
            try:
                if value is not None:
                    typed_answer(interrupt.id, kind, value)
                return value
            except ValueError as exc:
                print(f"dsh-orchestra: {exc}", file=sys.stderr)

    return answer


async def _run(workflow: Workflow, options: dict[str, Any], progress: bool) -> WorkflowResult:
    async with open_workflow(workflow, WorkflowOptions(**options)) as run:
        if progress:
            board = StepBoard(workflow, run.events())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(board.run)
                result = await run.result()
                await board.finished.wait()
                nursery.cancel_scope.cancel()
        else:
            result = await run.result()
    return result


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc

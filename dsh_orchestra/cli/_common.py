"""Options shared by the commands that start runtimes: building a RuntimeSpec, policies, answerers."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping

from .._logging import redact, register_secrets
from .._params import ParamError
from ..approvals import LoadedPolicy, PolicyFileError, load_policy
from ..questions import Answerer, AnswererFileError, QuestionsRequest, load_answerer
from ..runtime import RuntimeSpec
from ._errors import message
from ..runtime import APPROVAL_RELAY_MODES
from ..session import configuration_warnings, report_warnings


class UsageError(ValueError):
    """A command-line problem; the message says what to fix (exit status 2)."""


def check_numbers(args: argparse.Namespace, rules: Mapping[str, tuple[str, float]]) -> None:
    """Check numeric flags: ``rules`` maps a flag to (kind, minimum), kind ``"int"`` (an
    integer >= minimum) or ``"seconds"`` (a finite number > minimum: nan and inf are refused).
    Flags not given (None) pass.

    Raises:
        UsageError: naming the flag, the value and what is expected.
    """
    for flag, (kind, minimum) in rules.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is None:
            continue
        if kind == "seconds" and not (math.isfinite(value) and value > minimum):
            raise UsageError(f"{flag} must be a positive number of seconds (finite), not {value!r}")
        if kind == "int" and value < minimum:
            raise UsageError(f"{flag} must be an integer >= {minimum:g}, not {value!r}")


def add_runtime_options(parser: argparse.ArgumentParser) -> None:
    """--runtime, --runtime-command, --dsh-home, --workspace, --provider, --model, ..."""
    group = parser.add_argument_group("runtime")
    group.add_argument("--runtime", choices=("sim", "dsh"), default=None, help="sim (default): the built-in simulator; dsh: the bundled real runtime")
    group.add_argument("--runtime-command", metavar="CMD", default=None, help="a command line for any program that speaks the protocol on stdio")
    group.add_argument("--script", metavar="FILE", default=None, help="scenario script for the simulator (--runtime sim)")
    group.add_argument("--dsh-home", metavar="DIR", default=None, help="the runtime's DSH_HOME (required for dsh and --runtime-command unless DSH_HOME is set)")
    group.add_argument("--workspace", metavar="DIR", default=None, help="the sessions' working directory (default: the current directory)")
    group.add_argument("--provider", default=None)
    group.add_argument("--model", default=None)
    group.add_argument("--max-tokens", type=int, default=None, metavar="N")
    group.add_argument("--reasoning-effort", default=None, metavar="E")
    group.add_argument(
        "--approval-relay", choices=APPROVAL_RELAY_MODES, default="auto",
        help="answer the real runtime's internal approvals and questions with --policy/--answerer: auto "
        "(default: on for --runtime dsh when either is given), on, off",
    )


def build_spec(args: argparse.Namespace, *, temp_home: str | None = None) -> RuntimeSpec:
    """The RuntimeSpec the runtime options describe.

    Raises:
        UsageError: contradictory options, a missing DSH_HOME, bad values.
    """
    if args.runtime is not None and args.runtime_command is not None:
        raise UsageError("give either --runtime or --runtime-command, not both")
    for flag, value in (("--workspace", args.workspace), ("--dsh-home", args.dsh_home), ("--script", args.script)):
        if value is not None and not value.strip():
            raise UsageError(f"{flag} needs a path, not {value!r}")
    workspace = Path(args.workspace).absolute() if args.workspace is not None else Path.cwd()
    if args.workspace is not None and not workspace.exists():
        raise UsageError(f"--workspace {args.workspace!r} does not exist; create the directory first")
    if args.workspace is not None and not workspace.is_dir():
        raise UsageError(f"--workspace {args.workspace!r} is a file, not a directory")
    home = args.dsh_home or os.environ.get("DSH_HOME") or None
    kind = "command" if args.runtime_command is not None else (args.runtime or "sim")
    if home is None:
        if kind != "sim" or temp_home is None:
            raise UsageError(f"--runtime {kind} needs --dsh-home DIR (or DSH_HOME); dsh_orchestra never uses ~/.dsh")
        home = temp_home
    route: dict[str, Any] = {"approval_relay": getattr(args, "approval_relay", None) or "auto"}
    for key in ("provider", "model", "max_tokens", "reasoning_effort"):
        value = getattr(args, key, None)
        if value is not None:
            route[key] = value
    if args.script is not None:
        check_script(args.script)
    spec = _build(args, kind, home, workspace, route)
    register_secrets(spec.secrets())  # every message the CLI prints is redacted with them
    return spec


def _build(args: argparse.Namespace, kind: str, home: str, workspace: Path, route: dict[str, Any]) -> RuntimeSpec:
    try:
        if kind == "sim":
            return RuntimeSpec.simulator(script=args.script, dsh_home=home, cwd=workspace, **route)
        if args.script:
            raise UsageError("--script is for the simulator (--runtime sim)")
        if kind == "dsh":
            return RuntimeSpec(dsh_home=home, cwd=workspace, **route)
        try:
            command = shlex.split(args.runtime_command)
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"--runtime-command {args.runtime_command!r} is not a valid command line: {exc}") from exc
        if not command:
            raise UsageError(f"--runtime-command is empty ({args.runtime_command!r}); give the program to run")
        return RuntimeSpec(command=command, dsh_home=home, cwd=workspace, **route)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, UsageError):
            raise
        if isinstance(exc, ParamError) and exc.param == "approval_relay" and exc.value == "on":
            raise UsageError("--approval-relay on needs --runtime dsh (a runtime that loads --patch files)") from exc
        raise UsageError(message(exc)) from exc


def check_script(path: str) -> None:
    """``--script FILE``: a scenario the simulator and the scripted model can play, checked
    here so that a bad one is refused before any process starts.

    Raises:
        UsageError: missing, not a file, cannot be read, not UTF-8 TOML, or not a valid scenario.
    """
    from ..testing import ScriptError, load_script  # the scenario format lives with them

    if not Path(path).exists():
        raise UsageError(f"--script {path!r} does not exist")
    if not Path(path).is_file():
        raise UsageError(f"--script {path!r} is not a file")
    try:
        load_script(path)
    except OSError as exc:
        raise UsageError(f"--script {path!r}: cannot read it: {exc.strerror or exc}") from exc
    except ScriptError as exc:
        raise UsageError(f"--script {path!r}: {exc}") from exc


def start_warnings(spec: RuntimeSpec, *, policy: Any, answerer: Any) -> list[str]:
    """Check ``--approval-relay`` against the other options; print (once) what cannot take effect.

    Each warning is one ``dsh-orchestra: warning: ...`` line on stderr and one warning log
    record (kept off the console, which shows the line already).

    Raises:
        UsageError: ``--approval-relay on`` without --policy or --answerer.
    """
    if spec.approval_relay == "on" and policy is None and answerer is None:
        raise UsageError("--approval-relay on needs --policy or --answerer (there is nothing to relay)")
    messages = configuration_warnings(spec, approvals=policy is not None, answerer=answerer is not None)
    for line in messages:
        print(f"dsh-orchestra: warning: {line}", file=sys.stderr)
    report_warnings(messages, console=False)
    return messages


def policy_option(value: str | None) -> LoadedPolicy | None:
    """``--policy FILE|module:attr`` (``load_policy``)."""
    if value is None:
        return None
    try:
        return load_policy(value)
    except PolicyFileError as exc:
        raise UsageError(message(exc)) from exc


class NamedAnswerer:
    """An answerer named as the command line gave it (``answered_by`` in result lines)."""

    def __init__(self, answerer: Answerer, name: str) -> None:
        self.answerer = answerer
        self.name = name

    def __call__(self, request: QuestionsRequest) -> Any:
        return self.answerer(request)


def answerer_option(value: str | None) -> Answerer | None:
    """``--answerer first-option|FILE|module:attr`` (``load_answerer``), named as given."""
    if value is None:
        return None
    try:
        return NamedAnswerer(load_answerer(value), value)
    except AnswererFileError as exc:
        raise UsageError(message(exc)) from exc


def fail(problem: BaseException | str) -> int:
    """Print a usage problem (an error's parameters as flags, secrets redacted); return exit status 2."""
    say(message(problem))
    return 2


def say(message: str) -> None:
    """Print ``dsh-orchestra: message`` on stderr, with every known secret redacted."""
    print(redact(f"dsh-orchestra: {message}"), file=sys.stderr)

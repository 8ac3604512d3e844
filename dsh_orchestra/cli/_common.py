"""Options shared by the commands that start runtimes: building a RuntimeSpec, policies, answerers."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator, Mapping, TypeVar

import trio

from .._logging import redact, register_secrets
from .._params import ParamError
from ..approvals import LoadedPolicy, PolicyFileError, load_policy
from ..questions import Answerer, AnswererFileError, QuestionsRequest, load_answerer
from ..runtime import RuntimeSpec
from ._errors import message
from ..runtime import APPROVAL_RELAY_MODES, SANDBOX_MODES, bwrap_problem
from ..session import configuration_warnings, report_warnings


T = TypeVar("T")


class UsageError(ValueError):
    """A command-line problem; the message says what to fix (exit status 2)."""


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """For the block, what anything writes to stdout (``print`` and file descriptor 1: user
    scorers, policies, the processes they start) goes to stderr, so stdout holds only what the
    CLI prints after it."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1: Python's stream only
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


TERMINATED = 143
"""The exit status after SIGTERM (128 + 15), as after SIGINT it is 130."""


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


async def until_terminated(fn: Callable[[], Awaitable[T]]) -> tuple[T | None, bool]:
    """Run ``fn()``; SIGTERM cancels it as Ctrl-C would stop it (its cleanup runs: temporary
    directories removed, runtimes closed, results kept). Returns (its result, False), or
    (None, True) when SIGTERM stopped it."""
    terminated = False
    result: T | None = None
    error: BaseException | None = None
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal terminated
                async for _ in signals:
                    terminated = True
                    nursery.cancel_scope.cancel(reason="SIGTERM")
                    return

            nursery.start_soon(watch)
            try:
                result = await fn()
            except BaseException as exc:
                if _only_cancelled(exc):  # SIGTERM's cancellation: the nursery's scope takes it
                    raise
                error = exc  # raised as it is below, not inside the nursery's ExceptionGroup
            nursery.cancel_scope.cancel(reason="finished")
    if error is not None:
        raise error
    return (None, True) if terminated else (result, False)


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
    group.add_argument(
        "--sandbox", choices=SANDBOX_MODES, default="auto",
        help="run the runtime under bubblewrap: the system read-only, only its workspace and DSH_HOME writable, the "
        "run's outputs hidden (docs/runtime.md#sandbox): auto (default: --runtime dsh, when bubblewrap works here; a "
        "one-line notice when it does not), bwrap (insist; any runtime), none",
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
    route["sandbox"] = sandbox_mode(getattr(args, "sandbox", None) or "auto", kind)
    spec = _build(args, kind, home, workspace, route)
    register_secrets(spec.secrets())  # every message the CLI prints is redacted with them
    check_startable(spec, "--runtime dsh" if kind == "dsh" else "--runtime-command" if kind == "command" else "--runtime sim")
    return spec


def sandbox_mode(mode: str, kind: str) -> str:
    """``--sandbox`` resolved for the runtime ``kind`` (sim, dsh, command): ``bwrap`` or ``none``.

    ``auto`` sandboxes ``--runtime dsh`` when bubblewrap works here (else one notice line on
    stderr, and none).

    Raises:
        UsageError: ``--sandbox bwrap`` and bubblewrap does not work here.
    """
    if mode == "none" or (mode == "auto" and kind != "dsh"):
        return "none"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if mode == "bwrap":
        raise UsageError(f"--sandbox bwrap: bubblewrap does not work here: {problem}; install it, or pass --sandbox none")
    say(f"notice: the runtime runs without a sandbox: {problem} (--sandbox none silences this)")
    return "none"


def check_startable(spec: RuntimeSpec, flag: str) -> None:
    """Refuse, before the first item, a runtime that cannot start: a program that is not
    there, the bundled ``dsh`` not installed, or ``dsh`` on ``deepseek-official`` without
    ``DEEPSEEK_API_KEY`` (every item would fail on its first model call).

    Raises:
        UsageError: naming the flag and what to fix.
    """
    if spec.connect is not None:
        return
    if spec.command is None:
        from ..runtime import bundled_dsh_command

        try:
            bundled_dsh_command()
        except FileNotFoundError as exc:
            raise UsageError(f"{flag}: {exc}") from None
        key = spec.api_key or spec.env.get("DEEPSEEK_API_KEY") or (os.environ.get("DEEPSEEK_API_KEY") if spec.inherit_env else None)
        if spec.provider == "deepseek-official" and not key:
            raise UsageError(f"{flag} on the provider deepseek-official needs a credential: set DEEPSEEK_API_KEY in the "
                             "environment (checked before the first item; nothing ran)")
        return
    program = spec.command[0]
    if os.path.isabs(program):
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise UsageError(f"{flag}: {program!r} is not an executable file; check the path")
    elif os.sep not in program and shutil.which(program) is None:
        raise UsageError(f"{flag}: program {program!r} is not on PATH; install it or give its full path")


def check_judge_runtimes(scorers: Any, scoring: str | None) -> None:
    """Refuse, before the first item, a judge whose own ``[judge] runtime`` (of the scoring
    file ``scoring``) cannot start, as ``check_startable`` refuses ``--runtime``: a program that
    is not there, the bundled ``dsh`` not installed, ``dsh`` on ``deepseek-official`` without
    ``DEEPSEEK_API_KEY``. A judge without its own runtime uses the runtime options' (checked
    with them).

    Raises:
        UsageError: naming the judge, its runtime, the scoring file and what to fix.
    """
    from ..eval import ScoringError, judge_spec

    for spec in scorers:
        if spec.kind != "judge" or spec.settings.get("runtime") is None:
            continue
        try:
            runtime = judge_spec(spec.settings, dsh_home=os.devnull)  # the home is not used by the check
        except ScoringError as exc:
            raise UsageError(message(exc)) from exc
        if runtime is not None:
            where = f" of --scoring {scoring}" if scoring else ""
            check_startable(runtime, f"judge {spec.name!r}: [judge] runtime = {spec.settings['runtime']!r}{where}")


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


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """``text`` with its control characters (but newline and tab) written as ``\\xNN``, so
    that text from a file (an id, a response) cannot drive the terminal it is printed on."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def say(message: str) -> None:
    """Print ``dsh-orchestra: message`` on stderr, with every known secret redacted and control
    characters escaped."""
    print(escape_controls(redact(f"dsh-orchestra: {message}")), file=sys.stderr)

"""Argument parsing and dispatch for ``dsh-orchestra``; each subcommand lives in its own module.

The global options (``--log-level``, ``--log-file``) are accepted before the command and after
it. ``sim`` hands everything after it to the simulator's own parser (its stdout is the wire).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator, Sequence

from .._logging import configure_cli_logging
from .._tracing import missing_api_warning
from .._version import __version__
from ._exit import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE
from ._paths import check_command_paths

Command = Callable[[argparse.Namespace], int]
GLOBAL_VALUE_OPTIONS = ("--log-level", "--log-file")
NO_GLOBAL_OPTIONS = ("sim",)
"""Commands whose own parser takes every argument after the command name."""


def _sim(args: argparse.Namespace) -> int:
    from ..testing import sim_main  # (the package is imported first either way)

    return int(sim_main(args.rest))


def _add_global_options(parser: argparse.ArgumentParser, *, default: Any) -> None:
    parser.add_argument("--log-level", default=default, metavar="LEVEL", help="debug, info, warning (default), error")
    parser.add_argument("--log-file", default=default, metavar="FILE", help="append log records as JSON Lines (level info unless --log-level)")


def _command_index(argv: Sequence[str]) -> int | None:
    """Where the command name is in ``argv`` (after any global options), or None."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word in GLOBAL_VALUE_OPTIONS:
            index += 2
        elif word.startswith("-"):
            index += 1
        else:
            return index
    return None


def _fake_model(args: argparse.Namespace) -> int:
    from ..testing import fake_model_main

    return int(fake_model_main(args.port, args.script, args.rate_limit))


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (subcommands register themselves here)."""
    parser = argparse.ArgumentParser(
        prog="dsh-orchestra",
        description="Trio-native orchestration for DeepSeek Harness runtimes: batches, workflows, "
        "approval policies. Runs on the built-in simulated runtime unless told otherwise.",
    )
    parser.add_argument("--version", action="version", version=f"dsh-orchestra {__version__}")
    _add_global_options(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sim = sub.add_parser(
        "sim",
        help="run the simulated runtime on stdio (a stand-in for `dsh --profile sdk`)",
        description="Run the simulated runtime on stdio. Options: --script FILE, --store DIR, "
        "--profile P and --patch F (accepted and ignored, as a stand-in for dsh).",
        add_help=False,
    )
    sim.add_argument("rest", nargs=argparse.REMAINDER)
    sim.set_defaults(func=_sim)

    fake = sub.add_parser(
        "fake-model",
        help="serve the scripted model API on 127.0.0.1 (drives the real runtime offline)",
    )
    fake.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 picks a free one)")
    fake.add_argument("--script", default=None, help="scenario script (TOML); default answers anything")
    fake.add_argument("--rate-limit", default=None, metavar="R/s|R/min",
                      help="a quota: above R requests per second (or minute) answer 429 with retry-after")
    fake.set_defaults(func=_fake_model, paths=lambda args: ({"--script": args.script}, {}, {}))

    for register in _EXTRA_COMMANDS:
        register(sub)
    for name, command in sub.choices.items():
        if name not in NO_GLOBAL_OPTIONS:  # also after the command; SUPPRESS keeps one given before
            _add_global_options(command, default=argparse.SUPPRESS)
    return parser


def _extra_commands() -> list[Callable[[Any], None]]:
    from . import _batch, _compare, _ctl, _export, _gateway, _merge, _plan, _policy, _report, _run, _score, _view

    return [_batch.register, _compare.register, _ctl.register, _export.register, _gateway.register, _merge.register,
            _plan.register, _policy.register, _report.register, _run.register, _score.register, _view.register]


_EXTRA_COMMANDS = _extra_commands()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dsh-orchestra`` console script; returns the exit status."""
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    at = _command_index(words)
    if at is not None and words[at] in NO_GLOBAL_OPTIONS:
        args = parser.parse_args(words[:at + 1])  # the global options; the rest is the command's
        args.rest = words[at + 1:]
    else:
        args = parser.parse_args(words)
    func: Command | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    problem = check_command_paths(args)  # before a log file is opened or anything is written
    if problem is not None:
        print(f"dsh-orchestra: {problem}", file=sys.stderr)
        return EXIT_USAGE
    failure = configure_cli_logging(args.log_level, args.log_file)
    if failure is not None:
        from ._errors import message

        print(f"dsh-orchestra: {message(failure)}", file=sys.stderr)
        return EXIT_USAGE
    if (otel := missing_api_warning()) is not None:
        print(f"dsh-orchestra: warning: {otel}", file=sys.stderr)
    terminated: list[bool] = []
    try:
        with _sigterm_as_interrupt(terminated, args.command in TERM_AS_INTERRUPT):
            return func(args)
    except (KeyboardInterrupt, BaseExceptionGroup) as exc:  # a command that does not say more (batch says more)
        if isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is None:
            raise  # not an interruption (trio's nurseries group what they raise)
        if terminated:
            print("dsh-orchestra: terminated (SIGTERM)", file=sys.stderr)
            return EXIT_TERMINATED
        print("dsh-orchestra: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


TERM_AS_INTERRUPT = ("run", "score", "compare", "view")
"""The commands SIGTERM stops as Ctrl-C does (cleaning up: temporary files removed, workers and
runtimes closed), exiting 143 (docs/batch.md#exit-status); ``batch`` and ``fake-model`` handle
SIGTERM themselves."""


@contextlib.contextmanager
def _sigterm_as_interrupt(terminated: list[bool], active: bool) -> Iterator[None]:
    """While the block runs, SIGTERM is turned into SIGINT (which trio delivers safely as
    KeyboardInterrupt) and noted in ``terminated``. Only in the main thread; else nothing.

    A process started with SIGINT ignored (a background job of a shell script) gets Python's
    SIGINT handler for the block, or the SIGINT it sends itself would be lost and SIGTERM would
    not stop it; SIGINT then stops it too."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        terminated.append(True)
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, on_term)
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The simulated runtime as a process on stdio: ``python -m dsh_orchestra.testing sim``.

Owns the command line (it accepts and ignores ``--profile`` and ``--patch`` so the simulator can
stand in for ``dsh --profile sdk``), the choice of the session store (``--store`` or
``$DSH_HOME/sim-sessions``, never the user's home), the stdio streams, signals and the exit
status: 0 after ``shutdown``, end of input or SIGTERM; 130 after SIGINT; the crash status
(3 unless ``--crash-status``) after a scripted crash; 2 for a bad command line or script.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import trio

from ._script import DEFAULT_SCRIPT, load_script
from ._sim_agent import SimOptions
from ._simulator import SimulatedRuntime

EXIT_USAGE = 2
STORE_DIR = "sim-sessions"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh-orchestra sim",
        description="Run the simulated DeepSeek Harness SDK runtime on stdio (newline-delimited "
        "JSON-RPC 2.0), a stand-in for `dsh --profile sdk`.")
    parser.add_argument("--script", metavar="FILE", help="scenario script (TOML); default: answer every prompt")
    parser.add_argument("--store", metavar="DIR", help="session store directory (default: $DSH_HOME/sim-sessions)")
    parser.add_argument("--profile", metavar="P", help="accepted and ignored (dsh compatibility)")
    parser.add_argument("--patch", metavar="F", action="append", default=[], help="accepted and ignored (dsh compatibility)")
    parser.add_argument("--max-retries", type=int, default=5, metavar="N", help="provider retries of http-500/overloaded (default 5)")
    parser.add_argument("--retry-delay", type=float, default=0.5, metavar="S", help="first retry delay in seconds, doubling (default 0.5)")
    parser.add_argument("--model-latency", type=float, default=0.0, metavar="S", help="seconds every model call takes (default 0)")
    parser.add_argument("--ask-timeout", type=float, default=None, metavar="S", help="cancel unanswered approvals and questions after S seconds")
    parser.add_argument("--crash-status", type=int, default=3, metavar="N", help="exit status of a scripted crash (default 3)")
    return parser


def sim_main(argv: list[str]) -> int:
    """Run the simulator on this process's stdin/stdout; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    store = args.store
    if store is None:
        home = os.environ.get("DSH_HOME", "")
        if not home.strip():
            print("dsh-orchestra sim: no session store: give --store DIR or set DSH_HOME "
                  "(the simulator never falls back to your home directory)", file=sys.stderr)
            return EXIT_USAGE
        store = str(Path(home) / STORE_DIR)
    for name in ("max_retries", "crash_status"):
        if getattr(args, name) < 0:
            print(f"dsh-orchestra sim: --{name.replace('_', '-')} must be >= 0", file=sys.stderr)
            return EXIT_USAGE
    try:
        script = DEFAULT_SCRIPT if args.script is None else load_script(args.script)
    except (OSError, ValueError) as exc:
        print(f"dsh-orchestra sim: {exc}", file=sys.stderr)
        return EXIT_USAGE
    options = SimOptions(max_retries=args.max_retries, retry_delay=args.retry_delay, model_latency=args.model_latency,
                         ask_timeout=args.ask_timeout, crash_status=args.crash_status, hard_exit=True)
    try:
        runtime = SimulatedRuntime(script, store=store, options=options)
    except OSError as exc:
        print(f"dsh-orchestra sim: cannot use the session store {store!r}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return trio.run(_serve_stdio, runtime)


async def _serve_stdio(runtime: SimulatedRuntime) -> int:
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    async with stdin, stdout:
        async with trio.open_nursery() as nursery:
            await nursery.start(_signals, runtime)
            await runtime.run(trio.StapledStream(stdout, stdin))
            nursery.cancel_scope.cancel(reason="simulator finished")
    return runtime.exit_status or 0


async def _signals(runtime: SimulatedRuntime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for number in signals:
            runtime.terminate(130 if number == signal.SIGINT else 0)



"""``dsh-orchestra ctl``: pause, resume, stop or retune a running batch, or ask its status."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..batch import ControlError, send_command
from ._common import fail
from ._paths import Paths


def register(sub: Any) -> None:
    """Add the ``ctl`` subcommand."""
    parser = sub.add_parser(
        "ctl",
        help="pause, resume, stop or retune a running batch, or print its status",
        description="Act on the `dsh-orchestra batch` writing RESULTS, through its control socket (private to "
        "this user): pause stops starting items (those in flight finish), resume starts them again, stop ends "
        "the run as Ctrl-C does (exit 130; --resume finishes it), status prints progress, the limit and what is "
        "in flight, concurrency N sets how many items may be in flight (and the model gateway's concurrency, "
        "fixed at N, when the run has a gateway). Exit status: 0 done, 2 no batch "
        "running on RESULTS or bad arguments.",
    )
    parser.add_argument("results", metavar="RESULTS", help="the results file the batch writes (its --out)")
    parser.add_argument("command", choices=("pause", "resume", "stop", "status", "concurrency"), help="what to do")
    parser.add_argument("value", nargs="?", type=int, default=None, metavar="N", help="the limit, for concurrency")
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    return {"RESULTS": args.results}, {}, {}


def describe(status: dict[str, Any]) -> str:
    """The status in a few lines."""
    eta = status.get("eta_s")
    rate = status.get("items_per_s")
    lines = [
        f"{status['results']}: {status['state']} (pid {status['pid']})",
        f"done {status['done']} of {status['total']} ({status['failed']} failed, {status['resumed']} resumed)"
        + (f", {rate:.2f} items/s" if rate else "") + (f", about {eta:.0f} s left" if eta is not None else ""),
        f"concurrency {status['concurrency']} (at most {status['capacity']}), in flight {status['in_flight']}",
    ]
    if status.get("model_concurrency") is not None:
        lines.append(f"model gateway: concurrency {status['model_concurrency']}, calls in flight {status.get('model_in_flight')}")
    if status["in_flight_items"]:
        lines.append("in flight: " + ", ".join(status["in_flight_items"]))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Send the command; print the status after it."""
    if args.command == "concurrency" and (args.value is None or args.value < 1):
        return fail("concurrency needs N, a whole number of at least 1 (dsh-orchestra ctl RESULTS concurrency 8)")
    if args.command != "concurrency" and args.value is not None:
        return fail(f"{args.command} takes no N (only concurrency does)")
    try:
        status = send_command(args.results, args.command, args.value)
    except ControlError as exc:
        return fail(exc)
    print(json.dumps(status, indent=2) if args.json else describe(status))
    return 0

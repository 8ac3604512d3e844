"""``dsh-orchestra policy replay``: which recorded approval decisions would a new policy change?

Thin: reads the audit log (``read_audit``), loads the policy (``load_policy``), runs ``replay``
and prints ``ReplayReport.to_text()`` or its JSON. Exit status: 0 nothing would change, 1 some
decision would change, 2 bad arguments or input.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import trio

from ..approvals import PolicyFileError, load_policy, read_audit, replay
from ._common import fail
from ._paths import Paths, file_option

EXIT_SAME = 0
EXIT_CHANGED = 1


def register(sub: Any) -> None:
    """Add the ``policy`` subcommand (with ``replay``)."""
    parser = sub.add_parser(
        "policy",
        help="work with approval policies and their audit logs",
        description="Approval policies: replay an audit log against a new policy.",
    )
    actions = parser.add_subparsers(dest="policy_command", metavar="ACTION")
    parser.set_defaults(func=_usage(parser))
    rerun = actions.add_parser(
        "replay",
        help="decide every recorded approval again with a new policy and report what would change",
        description="Decide every approval recorded in AUDIT (a JSON Lines audit log written with --audit) "
        "again with the policy given by --policy, in order, and report the decisions that would change. "
        "Exit status: 0 nothing would change, 1 some decision would change, 2 bad arguments or input.",
    )
    rerun.add_argument("audit", metavar="AUDIT.jsonl", help="the audit log to replay")
    rerun.add_argument("--policy", required=True, metavar="FILE|module:attr", help="the new policy (TOML rules file or a Python policy)")
    rerun.add_argument("--deadline", type=float, default=None, metavar="SECONDS", help="bound per decision (default: the policy's own, else 30)")
    rerun.add_argument("--json", action="store_true", help="print the report as JSON")
    rerun.set_defaults(func=replay_main, paths=replay_paths)


def replay_paths(args: argparse.Namespace) -> Paths:
    """``policy replay`` reads the audit log and the policy; it writes only a log file."""
    return {"AUDIT": args.audit, "--policy": file_option(args.policy)}, {}, {}


def _usage(parser: argparse.ArgumentParser) -> Any:
    def usage(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return usage


def replay_main(args: argparse.Namespace) -> int:
    """Run ``policy replay``; returns the exit status."""
    if args.deadline is not None and not (math.isfinite(args.deadline) and args.deadline > 0):
        return fail(f"--deadline must be a positive number of seconds (finite), not {args.deadline!r}")
    try:
        records = read_audit(args.audit)
    except OSError as exc:
        return fail(f"cannot read the audit log {args.audit!r}: {exc.strerror or exc}")
    except ValueError as exc:
        return fail(exc)
    try:
        policy = load_policy(args.policy)
    except PolicyFileError as exc:
        return fail(exc)
    report = trio.run(lambda: replay(records, policy, deadline=args.deadline))
    if args.json:
        print(json.dumps({"audit": args.audit, "policy": args.policy, **report.to_json()}, indent=2))
    else:
        print(report.to_text(source=args.audit, policy=args.policy))
    return EXIT_CHANGED if report.changed else EXIT_SAME

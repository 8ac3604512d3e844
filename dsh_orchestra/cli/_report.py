"""``dsh-orchestra report``: one self-contained HTML file from a batch's results (or a workflow)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..report import ReportInputError, write_report
from ..report import DEFAULT_MAX_TEXT, DEFAULT_MAX_TRANSCRIPT
from ._common import UsageError, check_numbers, fail
from ._paths import Paths


def register(sub: Any) -> None:
    """Add the ``report`` subcommand."""
    parser = sub.add_parser(
        "report",
        help="write a self-contained HTML report of a batch's results (or of a workflow result)",
        description="Write ONE self-contained HTML file (opens offline): the run summary, a latency histogram "
        "and percentiles, statuses and finish reasons, errors by type, approvals by tool and rule, subagents, "
        "evaluations (scores with intervals, groups, pass@k, usage and cost), a searchable, sortable table of the "
        "items with each item's conversation, and with --compare BASE the comparison. Exit status: 0 written, "
        "2 bad arguments or input.",
    )
    parser.add_argument("results", nargs="?", default=None, metavar="RESULTS", help="results file of `dsh-orchestra batch` (JSON Lines)")
    parser.add_argument("--summary", default=None, metavar="FILE", help="the batch's --summary JSON (run time, rate, retries)")
    parser.add_argument("--audit", default=None, metavar="FILE", help="the batch's --audit log (approval latency, fail-closed errors)")
    parser.add_argument("--dataset", default=None, metavar="FILE", help="the dataset, to show each item's prompt")
    parser.add_argument("--transcripts", default=None, metavar="DIR", help="the batch's --transcripts directory, linked from each item")
    parser.add_argument("--workflow", default=None, metavar="RESULT.json", help="a WorkflowResult.to_json() file: its graph and step timing")
    parser.add_argument("--out", default="report.html", metavar="FILE", help="the HTML file to write (default report.html)")
    parser.add_argument("--title", default=None, help="the report's title")
    parser.add_argument("--max-text", type=int, default=DEFAULT_MAX_TEXT, metavar="N",
                        help=f"keep at most N characters of each prompt and response (default {DEFAULT_MAX_TEXT})")
    parser.add_argument("--max-transcript", type=int, default=DEFAULT_MAX_TRANSCRIPT, metavar="N",
                        help=f"embed at most N characters of each item's conversation from --transcripts (default {DEFAULT_MAX_TRANSCRIPT})")
    parser.add_argument("--group-by", default=None, metavar="FIELD", help="scores per group of this metadata key")
    parser.add_argument("--compare", default=None, metavar="BASE", help="compare RESULTS (the candidate) with this baseline's results file")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the comparison's bootstrap and permutation test (default 0)")
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """The report's inputs and its output, by flag (checked before anything is written)."""
    inputs = {"RESULTS": args.results, "--summary": args.summary, "--audit": args.audit,
              "--dataset": args.dataset, "--workflow": args.workflow, "--transcripts": args.transcripts,
              "--compare": args.compare}
    return inputs, {"--out": args.out}, {}


def main(args: argparse.Namespace) -> int:
    """Build the report; returns the exit status."""
    try:
        check_numbers(args, {"--max-text": ("int", 1)})
    except UsageError as exc:
        return fail(str(exc))
    try:
        path = write_report(
            args.out,
            results=args.results,
            summary=args.summary,
            audit=args.audit,
            dataset=args.dataset,
            workflow=args.workflow,
            transcripts=args.transcripts,
            title=args.title,
            max_text=args.max_text,
            max_transcript=args.max_transcript,
            group_by=args.group_by,
            compare=args.compare,
            seed=args.seed,
        )
    except (ReportInputError, ValueError) as exc:
        return fail(exc)
    except OSError as exc:
        return fail(f"cannot write {args.out!r}: {exc.strerror or exc}")
    print(f"dsh-orchestra: wrote {path}", file=sys.stderr)
    return 0

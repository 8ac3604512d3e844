"""``dsh-orchestra batch``: parse the options, call run_batch, print the summary, set the exit status."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from functools import partial
from typing import Any

import trio

from .._logging import redact
from .._params import ParamError
from .._paths import PathConflictError
from .._scratch import scratch_dir
from ..batch import BatchOptions, BatchUsageError, DatasetError, ResultsTamperedError, parse_shard, run_batch
from ..batch import MAX_SESSIONS_PER_RUNTIME, may_write_transcript
from ..protocol import OrchestraError, RuntimeStartError
from ._common import (
    UsageError,
    add_runtime_options,
    answerer_option,
    build_spec,
    check_judge_runtimes,
    check_numbers,
    fail,
    policy_option,
    say,
    TERMINATED,
    start_warnings,
    stdout_to_stderr,
    until_terminated,
)
from ._errors import message
from ._gateway import add_gateway_options, check_gateway_flags, gateway_options
from ._exit import EXIT_BUDGET, EXIT_TEMPFAIL
from ._paths import Paths, describe_flag, file_option
from ._ray_options import (  # --ray: scale-out (imports no Ray)
    add_ray_options,
    ray_options,
)
from ._score import add_scoring_options, scoring_plan
from ._table import batch_table
from ._stats import dataset_clusters
from ..session import warnings_reported

log = logging.getLogger("dsh_orchestra.batch")


NUMBERS = {"--runtimes": ("int", 1), "--concurrency": ("int", 1), "--retries": ("int", 0), "--timeout": ("seconds", 0),
           "--epochs": ("int", 1), "--seed": ("int", 0), "--max-total-tokens": ("int", 0),
           "--scorer-workers": ("int", 0), "--scorer-timeout": ("seconds", 0)}


def register(sub: Any) -> None:
    """Add the ``batch`` subcommand."""
    parser = sub.add_parser(
        "batch",
        help="run every prompt of a JSON Lines dataset in its own session; results as JSON Lines",
        description="Run a dataset (JSONL: id, prompt, optional session_id, metadata, target, choices) over a "
        "pool of runtimes, optionally scoring every result (docs/evaluation.md). Exit status (docs/batch.md#exit-status): 0 every item ok, "
        "1 some item ended in error (or a scorer failed on every item), 2 bad arguments or input (a runtime that cannot "
        "start included), 4 a budget stopped the run, 75 stopped part-way by trouble that may pass (--resume continues) "
        "or the results file was changed by something else (not to be trusted), 130 interrupted (Ctrl-C), "
        "143 terminated (SIGTERM; cleaned up like Ctrl-C).",
    )
    parser.add_argument("dataset", help="the dataset (JSON Lines)")
    parser.add_argument("--out", required=True, metavar="RESULTS", help="results file (JSON Lines, one line per item)")
    add_runtime_options(parser)
    parser.add_argument("--runtimes", type=int, default=1, metavar="N", help="runtime processes in the pool (default 1)")
    parser.add_argument("--concurrency", type=int, default=None, metavar="N", help="items in flight (default 4 per runtime)")
    parser.add_argument("--max-sessions-per-runtime", type=int, default=MAX_SESSIONS_PER_RUNTIME, metavar="N",
                        help=f"recycle a runtime after N sessions (default {MAX_SESSIONS_PER_RUNTIME}): it finishes its "
                        "items in flight while a fresh one takes new items")
    parser.add_argument("--max-runtime-rss", type=float, default=None, metavar="MIB",
                        help="also recycle a runtime once its process tree's resident memory passes MIB (checked as "
                        "each of its items ends; default: no limit)")
    parser.add_argument("--policy", default=None, metavar="FILE|module:attr", help="approval policy (TOML rules file or a Python policy)")
    parser.add_argument("--audit", default=None, metavar="FILE", help="append every approval decision to this JSONL file")
    parser.add_argument("--answerer", default=None, metavar="first-option|FILE|module:attr", help="answers user questions")
    parser.add_argument("--resume", action="store_true", help="skip ids already in RESULTS (repairing a torn last line)")
    parser.add_argument("--retry-errors", action="store_true",
                        help="with --resume: run again the items whose line is an error (RESULTS rewritten without them, atomically)")
    parser.add_argument("--shard", default=None, metavar="I/N", help="only items whose stable id hash falls in shard I of N (0 <= I < N)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="per-item timeout (retried)")
    parser.add_argument("--retries", type=int, default=2, metavar="N", help="retries for retryable failures (default 2)")
    parser.add_argument("--summary", default=None, metavar="FILE", help="also write the summary JSON here")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON (default: a table for the terminal)")
    parser.add_argument("--transcripts", default=None, metavar="DIR", help="write each item's notifications to DIR/<id>.jsonl.gz (bounded)")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    add_gateway_options(parser)  # --no-gateway --upstream --api-key-env --model-concurrency --cache ...
    add_ray_options(parser)  # --ray [ADDRESS] --ray-actors N --runtimes-per-actor M --ray-runtime-env JSON
    add_scoring_options(parser, epochs=True)  # --score --scoring --epochs --epoch-reducer --group-by --seed --prices
    budget = parser.add_argument_group("budgets and workspaces")
    budget.add_argument("--max-total-tokens", type=int, default=None, metavar="N", help="stop at N tokens: with the gateway no further model call once this run's calls used N, the items cut short get no line; without it no new item once this run's items used N (exit 4; --resume continues)")
    budget.add_argument("--max-total-cost", type=float, default=None, metavar="USD", help="stop at USD spent, as --max-total-tokens (needs --prices; exit 4)")
    budget.add_argument("--workspace-template", default=None, metavar="DIR", help="give each item's session a fresh copy of DIR as its working directory")
    budget.add_argument("--keep-workspaces", action="store_true", help="keep the copies (in RESULTS.workspaces/) instead of removing them after scoring")
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """The batch's inputs, outputs and output directory, by flag (checked before anything runs)."""
    return (
        {"DATASET": args.dataset, "--script": args.script, "--policy": file_option(args.policy),
         "--answerer": file_option(args.answerer), "--scoring": args.scoring, "--prices": args.prices},
        {"--out": args.out, "--summary": args.summary, "--audit": args.audit},
        {"--transcripts": (args.transcripts, may_write_transcript)},
    )


def main(args: argparse.Namespace) -> int:
    """Run the batch command; returns the exit status."""
    with scratch_dir("home") as temp_home:
        try:
            check_numbers(args, NUMBERS)
            check_gateway_flags(args)
            spec = build_spec(args, temp_home=temp_home)
            options = BatchOptions(
                runtimes=args.runtimes,
                concurrency=args.concurrency,
                max_sessions_per_runtime=args.max_sessions_per_runtime,
                max_runtime_rss_mib=args.max_runtime_rss,
                timeout=args.timeout,
                retries=args.retries,
                resume=args.resume,
                retry_errors=args.retry_errors,
                shard=parse_shard(args.shard) if args.shard else None,
                policy=policy_option(args.policy),
                answerer=answerer_option(args.answerer),
                audit=args.audit,
                summary=args.summary,
                transcripts=args.transcripts,
                progress="none" if args.no_progress else "auto",
                scorers=args.score,
                scoring=args.scoring,
                epochs=args.epochs,
                epoch_reducer=args.epoch_reducer,
                group_by=args.group_by,
                cluster_by=args.cluster_by,
                seed=args.seed,
                prices=args.prices,
                max_total_tokens=args.max_total_tokens,
                max_total_cost=args.max_total_cost,
                workspace_template=args.workspace_template,
                keep_workspaces=args.keep_workspaces,
                scorer_workers=args.scorer_workers,
                scorer_timeout=args.scorer_timeout,
                argv=sys.argv,
                gateway=gateway_options(args),
                control=True,  # `dsh-orchestra ctl RESULTS ...` and the viewer's buttons
            )
            dataset_clusters(args.cluster_by, args.dataset)
            if args.scoring is not None:  # a judge's own runtime (only a scoring file names one): checked now
                check_judge_runtimes(scoring_plan(args, (spec.provider, spec.model)).scorers, args.scoring)
            scale = ray_options(args, spec, temp_home) if args.ray is not None else None
            printed = start_warnings(spec, policy=options.policy, answerer=options.answerer)
        except (UsageError, ValueError) as exc:
            return fail(exc)
        except DatasetError as exc:
            return fail(exc)
        try:
            executor = None
            if scale is not None:  # --ray: the same batch, its items run on Ray actors
                from ..scale import RayExecutor

                executor = RayExecutor(**scale)
            with warnings_reported(), stdout_to_stderr():  # warnings: printed once above; stdout: the summary's
                summary, terminated = trio.run(until_terminated, partial(run_batch, args.dataset, args.out, spec, options, executor=executor))
            if terminated or summary is None:
                print("dsh-orchestra: terminated (SIGTERM); results written so far are kept: run again with --resume",
                      file=sys.stderr)
                return TERMINATED
        except (DatasetError, ParamError) as exc:  # BatchUsageError, or a bad value found on the way in
            return fail(exc)
        except PathConflictError as exc:
            return fail(exc.format(describe_flag))
        except OSError as exc:  # before any work: the dataset or an output cannot be opened
            return fail(f"{exc.filename or args.dataset}: {exc.strerror or exc}")
        except RuntimeStartError as exc:  # raised bare: no runtime of the pool ever started
            return fail(
                f"the runtime could not start: {exc}\n  check --runtime / --runtime-command, --dsh-home "
                "and the route options (--provider, --model, --reasoning-effort, --max-tokens)"
            )
        except ResultsTamperedError as exc:
            return _tampered(exc)
        except (OrchestraError, ExceptionGroup) as exc:  # stopped part-way (e.g. the pool gave up)
            cause = _first_leaf(exc)
            if isinstance(cause, ResultsTamperedError):
                return _tampered(cause)
            if isinstance(cause, (DatasetError, BatchUsageError)):  # e.g. the dataset changed underneath
                return fail(f"{message(cause)}; results written so far are kept: run again with --resume")
            if not isinstance(cause, (OrchestraError, OSError)):
                raise
            say(f"the batch stopped: {message(cause)}; results written so far are kept: run again with --resume")
            return EXIT_TEMPFAIL
        except (KeyboardInterrupt, BaseExceptionGroup) as exc:
            if isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is None:
                raise
            print("dsh-orchestra: interrupted; results written so far are kept: run again with --resume",
                  file=sys.stderr)
            return 130
    if summary.note is not None:
        print(f"dsh-orchestra: {summary.note}", file=sys.stderr)
    for line in summary.warnings:
        if line not in printed:
            say(f"warning: {line}")
    if args.json:
        print(redact(json.dumps(summary.to_json(), indent=2)))
    else:
        print(batch_table(summary.to_json()))
    if summary.stopped == "budget":
        return EXIT_BUDGET
    return 0 if summary.error == 0 and not summary.scorers_without_value else 1



TAMPERED = 75
"""The exit status when the results file was changed by something other than the batch."""


def _tampered(exc: ResultsTamperedError) -> int:
    print(f"dsh-orchestra: {exc}", file=sys.stderr)
    return TAMPERED


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc

"""``dsh-orchestra score``: re-score finished results; parse, call ``eval.rescore``, print the summary."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from functools import partial
from typing import Any

import trio

from .._scratch import scratch_dir
from ..batch import DatasetError, index_dataset
from ..eval import (
    SCORER_TIMEOUT,
    SCORER_WORKERS,
    PricesError,
    RescoreError,
    ScoringError,
    load_prices,
    load_scoring,
    check_plan_inputs,
    make_plan,
    parse_reducer,
    rescore,
    sha256_file,
)
from ..gateway import DEFAULT_GATEWAY
from ..protocol import OrchestraError
from ..runtime import DEFAULT_MODEL, DEFAULT_PROVIDER
from ._errors import message
from ._exit import EXIT_ERRORS, EXIT_OK
from ._memory import map_large_blocks
from ._paths import Paths
from ._common import (
    UsageError,
    add_runtime_options,
    build_spec,
    check_judge_runtimes,
    check_numbers,
    fail,
    say,
    stdout_to_stderr,
)
from ._table import score_table
from ._stats import labels_agreement, read_labels, results_clusters


def add_scoring_options(parser: argparse.ArgumentParser, *, epochs: bool) -> None:
    """--score, --scoring, --epoch-reducer, --group-by, --seed, --prices (and --epochs)."""
    group = parser.add_argument_group("scoring")
    group.add_argument("--score", action="append", default=[], metavar="SPEC",
                       help="a scorer: exact, includes, choice, numeric, f1, judge, regex:NAME, module:attr, "
                       "or a [scorers.NAME] of --scoring (repeatable)")
    group.add_argument("--scoring", default=None, metavar="FILE", help="scoring file (TOML): named scorers and their settings")
    if epochs:
        group.add_argument("--epochs", type=int, default=1, metavar="K", help="run each item K times, each in its own session (default 1)")
    group.add_argument("--epoch-reducer", default="mean", metavar="R", help="mean (default), max, min, mode, pass@k or pass^k: one value per item from its epochs")
    group.add_argument("--group-by", default=None, metavar="FIELD", help="also report the scores per value of this metadata key")
    group.add_argument("--cluster-by", default=None, metavar="FIELD",
                       help="items sharing this metadata key's value form a cluster: cluster-robust (CR1) stderr and a "
                       "cluster bootstrap ci95; the summary adds n_clusters and design_effect")
    group.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the bootstrap confidence intervals (default 0)")
    group.add_argument("--prices", default=None, metavar="FILE", help='prices (TOML): ["provider/model"] input_per_mtok, output_per_mtok; adds cost_usd')
    group.add_argument("--scorer-workers", type=int, default=SCORER_WORKERS, metavar="N",
                       help=f"run module:attr scorers in N worker processes (default {SCORER_WORKERS}); 0 runs them in "
                       "this process, unprotected: a scorer that hangs, exits or forks can take the run down")
    group.add_argument("--scorer-timeout", type=float, default=SCORER_TIMEOUT, metavar="SECONDS",
                       help=f"bound each call of a Python or regex scorer (default {SCORER_TIMEOUT:g}; a scorer's own "
                       "timeout in its [scorers.NAME] table wins): past it the call is that scorer's error")


def scoring_plan(args: argparse.Namespace, route: tuple[str, str]) -> Any:
    """The EvalPlan the scoring options describe.

    Raises:
        UsageError: a bad scorer, scoring file, reducer, seed, epochs or prices file.
    """
    try:
        scoring = load_scoring(args.scoring) if args.scoring else None
        prices = load_prices(args.prices) if args.prices else None
        reducer = parse_reducer(args.epoch_reducer)
        # score: the epochs are those found in RESULTS (rescore checks pass@k against them)
        epochs = getattr(args, "epochs", None) or reducer.k or 1
        plan = make_plan(
            args.score, scoring=scoring, epochs=epochs, reducer=reducer,
            group_by=args.group_by, seed=args.seed, prices=prices, route=route, cluster_by=args.cluster_by,
        )
        if prices is not None:
            plan.price()  # the route must have a price before anything runs
    except (ScoringError, PricesError, ValueError) as exc:
        raise UsageError(message(exc)) from exc
    return plan


def register(sub: Any) -> None:
    """Add the ``score`` subcommand."""
    parser = sub.add_parser(
        "score",
        help="re-score finished batch results without running the items again",
        description="Score the lines of RESULTS (a batch's results) against DATASET and write them, with the new "
        "scores, to RESCORED; print the summary. RESULTS is never modified. Only judge scorers start a runtime "
        "(the runtime options, or [judge] runtime). Exit status (docs/batch.md#exit-status): 0 every line scored and none ended in error, 1 some line of RESULTS "
        "ended in error or a scorer produced no value on any item that ran, 2 bad arguments or input (a judge runtime "
        "that cannot start included), 130 interrupted, 143 terminated (SIGTERM; RESCORED is then not written).",
    )
    parser.add_argument("results", metavar="RESULTS", help="a batch results file (JSON Lines)")
    parser.add_argument("--dataset", required=True, metavar="DATASET", help="the dataset the results came from")
    parser.add_argument("--out", required=True, metavar="RESCORED", help="where to write the re-scored result lines")
    parser.add_argument("--summary", default=None, metavar="FILE", help="also write the summary JSON here")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON (default: a table for the terminal)")
    parser.add_argument("--labels", default=None, metavar="LABELS",
                        help='people\'s labels (JSON Lines {"id": ..., "label": <number, true/false or '
                        'correct/partial/incorrect>}): the summary adds each scorer\'s agreement with them (accuracy, '
                        "Cohen's kappa, the confusion matrix) and a prediction-powered mean")
    add_scoring_options(parser, epochs=False)
    add_runtime_options(parser)
    parser.add_argument("--no-gateway", action="store_true",
                        help="a judge's dsh runtime calls the provider itself, with the real key (default: through a gateway of its own)")
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """The score command's inputs and outputs, by flag (checked like batch's before anything runs)."""
    return (
        {"RESULTS": args.results, "--dataset": args.dataset, "--scoring": args.scoring, "--prices": args.prices,
         "--script": args.script},
        {"--out": args.out, "--summary": args.summary},
        {},
    )


def main(args: argparse.Namespace) -> int:
    """Run the score command; returns the exit status."""

    if not args.score and not args.scoring:
        return fail("give at least one --score SPEC (or a --scoring FILE whose [scorers] are all used)")
    map_large_blocks(args.results, args.dataset)  # (millions of lines: freed columns go back to the system)
    with scratch_dir("home") as temp_home, contextlib.ExitStack() as stack:
        try:
            route = (args.provider or DEFAULT_PROVIDER, args.model or DEFAULT_MODEL)
            plan = scoring_plan(args, route)
            check_judge_runtimes(plan.scorers, args.scoring)
            results_clusters(args.cluster_by, args.results)
            labels = read_labels(args.labels, args.results) if args.labels is not None else None
            judge = build_spec(args, temp_home=temp_home) if any(s.kind == "judge" for s in plan.scorers) else None
            # the dataset validated, then read item by item (memory: 24 bytes per item, not the items)
            items = stack.enter_context(index_dataset(args.dataset))
            warnings = check_plan_inputs(plan, where=args.dataset, items=len(items), metadata_keys=items.metadata_keys,
                                         targets=items.targets)
            for line in warnings:
                say(f"warning: {line}")
            dataset = {"path": args.dataset, "sha256": sha256_file(args.dataset), "items": len(items)}
            check_numbers(args, {"--scorer-workers": ("int", 0), "--scorer-timeout": ("seconds", 0)})
            with stdout_to_stderr():  # what scorers print: stdout holds the summary only
                summary = trio.run(partial(
                    rescore, args.results, items, args.out, plan, summary=args.summary,
                    judge_runtime=judge, dataset=dataset, scoring_sha256=sha256_file(args.scoring), argv=sys.argv,
                    scorer_workers=args.scorer_workers, scorer_timeout=args.scorer_timeout,
                    gateway=None if args.no_gateway else DEFAULT_GATEWAY,
                ))
        except (UsageError, DatasetError, RescoreError, ScoringError, PricesError) as exc:
            return fail(exc)
        except OSError as exc:
            return fail(f"{exc.filename or args.results}: {exc.strerror or exc}")
        except (OrchestraError, ExceptionGroup) as exc:  # a judge runtime failed
            return fail(f"the judge's runtime failed: {exc}")
    for line in summary.get("warnings", ()):
        say(f"warning: {line}")
    if labels is not None:
        summary["agreement"] = labels_agreement(args.out, plan, labels)
        if args.summary is not None:
            with open(args.summary, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2) if args.json else score_table(summary))
    # docs/batch.md#exit-status: 1 when a line of RESULTS ended in error, as batch's
    return EXIT_ERRORS if summary.get("error") or summary.get("scorers_without_value") else EXIT_OK

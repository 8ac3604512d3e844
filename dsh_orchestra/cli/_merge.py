"""``dsh-orchestra merge``: shard results files into one, each (id, epoch) once; print the summary."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..batch import DatasetError, MergeError, ResultsFileError, merge_results
from ..eval import PricesError, ScoringError, load_prices, make_plan, parse_reducer
from ..runtime import DEFAULT_MODEL, DEFAULT_PROVIDER
from ._common import fail
from ._paths import Paths


def register(sub: Any) -> None:
    """Add the ``merge`` subcommand."""
    parser = sub.add_parser(
        "merge",
        help="merge shard results files (--shard I/N runs) into one, each (id, epoch) exactly once",
        description="Merge the results files of a batch's shards into RESULTS: every (id, epoch) once (identical "
        "lines met twice are written once; the same pair with different content is refused), in the dataset's "
        "order with --dataset (which also refuses ids outside it and lists items with no line), else by id and "
        "epoch; lines are copied as written. Shards of runs with different configurations (their RESULTS.run.json "
        "records) or epochs are refused. Prints the merged summary. Exit status: 0 merged, 2 bad input "
        "(nothing written).",
    )
    parser.add_argument("shards", nargs="+", metavar="SHARD", help="a shard's results file (JSON Lines of `dsh-orchestra batch`)")
    parser.add_argument("--out", required=True, metavar="RESULTS", help="the merged results file (must not exist)")
    parser.add_argument("--summary", default=None, metavar="FILE", help="also write the summary JSON here")
    parser.add_argument("--dataset", default=None, metavar="FILE", help="order the lines as this dataset and check that every item has one")
    parser.add_argument("--allow-missing", action="store_true", help="with --dataset: merge even when some items have no line (listed)")
    group = parser.add_argument_group("summary metrics (as the shards' batch runs had them)")
    group.add_argument("--epoch-reducer", default="mean", metavar="R", help="mean (default), max, min, mode or pass@k")
    group.add_argument("--group-by", default=None, metavar="FIELD", help="also report the scores per value of this metadata key")
    group.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the bootstrap confidence intervals (default 0)")
    group.add_argument("--prices", default=None, metavar="FILE", help="prices (TOML), for the summary's cost_usd")
    group.add_argument("--provider", default=None, help="the route whose price applies (default: the runtime's default)")
    group.add_argument("--model", default=None)
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """The shards and the dataset in, the merged file and the summary out (checked first)."""
    inputs = {f"SHARD {i}": shard for i, shard in enumerate(args.shards, start=1)}
    inputs.update({"--dataset": args.dataset, "--prices": args.prices})
    return inputs, {"--out": args.out, "--summary": args.summary}, {}


def main(args: argparse.Namespace) -> int:
    """Run the merge command; returns the exit status."""
    try:
        prices = load_prices(args.prices) if args.prices else None
        reducer = parse_reducer(args.epoch_reducer)
        route = (args.provider or DEFAULT_PROVIDER, args.model or DEFAULT_MODEL)
        plan = make_plan((), epochs=reducer.k or 1, reducer=reducer, group_by=args.group_by, seed=args.seed,
                         prices=prices, route=route)
        report = merge_results(args.shards, args.out, dataset=args.dataset, allow_missing=args.allow_missing,
                               plan=plan)
    except (MergeError, ResultsFileError, DatasetError, ScoringError, PricesError, ValueError) as exc:
        return fail(exc)
    except OSError as exc:
        return fail(f"{exc.filename or args.out}: {exc.strerror or exc}")
    summary = report.summary.to_json()
    summary["merged"] = {"shards": report.shards, "lines": report.lines, "duplicates": report.duplicates,
                         "torn": list(report.torn), "missing": [{"id": i, "epoch": e} for i, e in report.missing]}
    text = json.dumps(summary, indent=2)
    if args.summary is not None:
        with open(args.summary, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    return 0

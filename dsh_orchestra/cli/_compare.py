"""``dsh-orchestra compare``: two scored runs paired by item id, with paired statistics."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from functools import partial
from typing import Any

import orjson
import trio

from ..batch import DatasetError, load_dataset
from ..eval import RescoreError, ScoringError, rescore
from ..eval import CompareInputError, compare_runs, scorer_names
from ..protocol import OrchestraError
from ..report import ReportInputError
from ..report import load_result_lines
from ..runtime import DEFAULT_MODEL, DEFAULT_PROVIDER, RuntimeSpec
from .._scratch import scratch_dir
from ._errors import message
from ._common import UsageError, fail
from ._paths import Paths
from ._score import scoring_plan


def register(sub: Any) -> None:
    """Add the ``compare`` subcommand."""
    parser = sub.add_parser(
        "compare",
        help="compare two scored runs item by item: mean differences, intervals, paired tests, regressions",
        description="Pair the items of two results files by id (epochs reduced per item first) and compare "
        "every scorer: means, the mean difference with a paired bootstrap 95%% interval, a paired test "
        "(McNemar's exact test for 0/1 scores, else a sign-flip permutation test), the regressions and "
        "improvements, and usage and latency side by side. Exit status: 0 compared, 2 bad input.",
    )
    parser.add_argument("base", metavar="BASE", help="the baseline's results file (JSON Lines of `dsh-orchestra batch`)")
    parser.add_argument("candidate", metavar="CANDIDATE", help="the candidate's results file")
    parser.add_argument("--score", action="append", default=None, metavar="NAME",
                        help="compare this scorer (repeatable; default: every scorer either run has). A run without "
                        "it is scored first, as `score` does, when --dataset is given (any SPEC of `score`)")
    parser.add_argument("--scoring", default=None, metavar="FILE", help="scoring file (TOML) naming the --score scorers, as for `score`")
    parser.add_argument("--epoch-reducer", default="mean", metavar="R",
                        help="how an item's epochs become one value: mean (default), max, min, mode, pass@k")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the bootstrap and the permutation test (default 0)")
    parser.add_argument("--json", action="store_true", help="print the comparison as one JSON document")
    parser.add_argument("--out", default=None, metavar="FILE", help="also write the comparison page (self-contained HTML)")
    parser.add_argument("--dataset", default=None, metavar="FILE",
                        help="the runs' dataset: the targets to score a run that lacks a --score scorer, the prompts of the page")
    parser.add_argument("--title", default=None, help="the comparison page's title")
    parser.set_defaults(func=main, paths=paths, prices=None, group_by=None)


def paths(args: argparse.Namespace) -> Paths:
    """The inputs and the page, by flag (checked before anything is written)."""
    inputs = {"BASE": args.base, "CANDIDATE": args.candidate, "--dataset": args.dataset, "--scoring": args.scoring}
    return inputs, {"--out": args.out}, {}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.{digits}f}" if abs(value) < 1e6 else f"{value:.4g}"
    return str(value)


def _ids(ids: list[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", … {len(ids) - limit} more" if len(ids) > limit else "")


def render_text(doc: dict[str, Any]) -> str:
    """The comparison as plain text, for a terminal."""
    out = [
        f"pairs: {doc['pairs']}   only in base: {len(doc['only_in_base'])}   only in candidate: "
        f"{len(doc['only_in_candidate'])}   status changes: {len(doc['status_changes'])}",
    ]
    for change in doc["status_changes"][:10]:
        out.append(f"  {change['id']}: {change['base']} -> {change['candidate']}")
    for name, s in doc["scorers"].items():
        interval = "—" if s["ci95"] is None else f"[{_fmt(s['ci95'][0])}, {_fmt(s['ci95'][1])}]"
        diff = "—" if s["diff"] is None else f"{s['diff']:+.3f}"
        out.append(f"{name}: n {s['n']}   base {_fmt(s['mean_base'])}   candidate {_fmt(s['mean_candidate'])}   "
                   f"diff {diff}   95% CI {interval}   p {_fmt(s['p_value'], 4)}")
        out.append(f"  regressions ({len(s['regressions'])}): {_ids(s['regressions'])}")
        out.append(f"  improvements ({len(s['improvements'])}): {_ids(s['improvements'])}")
    for what, key, unit in (("tokens per item", "usage", ""), ("latency per item", "latency", " s")):
        side = doc[key]
        b, c, r = side["base"], side["candidate"], side["ratio"]
        out.append(f"{what}: total {_fmt(b['total'])}{unit} -> {_fmt(c['total'])}{unit} (x{_fmt(r.get('total'), 2)})   "
                   f"median {_fmt(b['median'])} -> {_fmt(c['median'])} (x{_fmt(r.get('median'), 2)})   "
                   f"p95 {_fmt(b['p95'])} -> {_fmt(c['p95'])} (x{_fmt(r.get('p95'), 2)})")
    if "cost_usd" in doc["usage"]["base"] or "cost_usd" in doc["usage"]["candidate"]:
        b, c = doc["usage"]["base"].get("cost_usd"), doc["usage"]["candidate"].get("cost_usd")
        out.append(f"cost: {_fmt(b, 4)} USD -> {_fmt(c, 4)} USD (x{_fmt(doc['usage']['ratio'].get('cost_usd'), 2)})")
    return "\n".join(out)


def _score_run(args: argparse.Namespace, path: str, lines: list[dict[str, Any]], directory: str, what: str) -> list[dict[str, Any]]:
    """``lines`` as they are when they have every --score scorer, else scored (as `score` does)
    into a temporary file and read back.

    Raises:
        UsageError, RescoreError, ...: as `score` (the message names the problem).
    """
    if not args.score or args.dataset is None:
        return lines
    plan = scoring_plan(args, (DEFAULT_PROVIDER, DEFAULT_MODEL))
    present = set(scorer_names(lines))
    if all(spec.name in present for spec in plan.scorers):
        return lines
    items, _ = load_dataset(args.dataset)
    out = os.path.join(directory, f"{what}.jsonl")
    with tempfile.TemporaryDirectory(prefix="dsh-orchestra-home-", dir=directory) as home:
        judge = RuntimeSpec.simulator(dsh_home=home) if any(s.kind == "judge" for s in plan.scorers) else None
        trio.run(partial(rescore, path, {i.id: i for i in items}, out, plan, judge_runtime=judge))
    return load_result_lines(out, f"{what} results file (scored)", strict=True)


def main(args: argparse.Namespace) -> int:
    """Compare; returns the exit status."""
    try:
        base = load_result_lines(args.base, "base results file", strict=True)
        candidate = load_result_lines(args.candidate, "candidate results file", strict=True)
        with scratch_dir("compare") as directory:
            base = _score_run(args, args.base, base, directory, "base")
            candidate = _score_run(args, args.candidate, candidate, directory, "candidate")
        names = None
        if args.score:
            names = [spec.name for spec in scoring_plan(args, (DEFAULT_PROVIDER, DEFAULT_MODEL)).scorers] if args.dataset else args.score
        doc = compare_runs(base, candidate, scorers=names, reducer=args.epoch_reducer, seed=args.seed)
    except (ReportInputError, CompareInputError, UsageError, DatasetError, RescoreError, ScoringError, ValueError) as exc:
        text = message(exc)
        if isinstance(exc, CompareInputError) and "in neither run" in text and args.dataset is None:
            text += "; give --dataset DATASET to score the runs with it"
        return fail(text)
    except OSError as exc:
        return fail(f"{exc.filename or args.base}: {exc.strerror or exc}")
    except (OrchestraError, ExceptionGroup) as exc:  # a judge runtime failed
        return fail(f"the judge's runtime failed: {exc}")
    if args.out is not None:
        from ..report import write_compare

        try:
            path = write_compare(args.out, base=args.base, candidate=args.candidate, comparison=doc, dataset=args.dataset,
                                 title=args.title, base_lines=base, candidate_lines=candidate)
        except (ReportInputError, ValueError) as exc:
            return fail(exc)
        except OSError as exc:
            return fail(f"cannot write {args.out!r}: {exc.strerror or exc}")
        print(f"dsh-orchestra: wrote {path}", file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps(doc).decode("utf-8") + "\n")
    else:
        print(render_text(doc))
    return 0

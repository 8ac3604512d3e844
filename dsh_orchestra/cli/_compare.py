"""``dsh-orchestra compare``: scored runs paired by item id, with paired statistics: a base and
one candidate, or several candidates (or ``--all-pairs``) with adjusted p-values and a leaderboard."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from functools import partial
from typing import Any, Callable, Iterable

import orjson
import trio

from ..batch import DatasetError, load_dataset
from ..eval import RescoreError, ScoringError, rescore
from ..eval import Comparison, CompareInputError, compare_line_problem, compare_many, compare_runs, read_run, scorer_names
from ..protocol import OrchestraError
from ..report import ReportInputError
from ..report import load_result_lines
from ..runtime import DEFAULT_MODEL, DEFAULT_PROVIDER, RuntimeSpec
from .._scratch import scratch_dir
from ._errors import message
from ._common import UsageError, check_judge_runtimes, escape_controls, fail
from ._memory import map_large_blocks
from ._paths import Paths
from ._score import scoring_plan
from ._stats import lines_clusters


def register(sub: Any) -> None:
    """Add the ``compare`` subcommand."""
    parser = sub.add_parser(
        "compare",
        help="compare scored runs item by item: mean differences, intervals, paired tests, regressions, a leaderboard",
        description="Pair the items of results files by id (epochs reduced per item first) and compare each "
        "CANDIDATE with BASE (or, with --all-pairs, every pair) for every scorer: means, the mean difference with "
        "a paired bootstrap 95%% interval, a paired test (McNemar's exact test for 0/1 scores, else a sign-flip "
        "permutation test; with --cluster-by a sign-flip test of the clusters' sums) with its p-value raw and "
        "adjusted across candidates and scorers (--correction), the regressions and improvements, usage and "
        "latency side by side, and a leaderboard. Exit status (docs/batch.md#exit-status): 0 compared, 2 bad input "
        "(a judge runtime that cannot start included), 130 interrupted, 143 terminated (SIGTERM).",
    )
    parser.add_argument("base", metavar="BASE", help="the baseline's results file (JSON Lines of `dsh-orchestra batch`)")
    parser.add_argument("candidates", metavar="CANDIDATE", nargs="+", help="a candidate's results file (one or more)")
    parser.add_argument("--all-pairs", action="store_true", help="compare every pair of the runs, not each candidate with BASE")
    parser.add_argument("--correction", choices=("holm", "bh", "none"), default="holm",
                        help="adjust the p-values across comparisons and scorers: holm (default; family-wise), "
                        "bh (Benjamini-Hochberg; false discovery rate) or none")
    parser.add_argument("--cluster-by", default=None, metavar="FIELD",
                        help="items sharing this metadata key's value form a cluster: clustered standard error, cluster "
                        "bootstrap interval and cluster sign-flip test of the differences")
    parser.add_argument("--score", action="append", default=None, metavar="NAME",
                        help="compare this scorer (repeatable; default: every scorer either run has). A run without "
                        "it is scored first, as `score` does, when --dataset is given (any SPEC of `score`)")
    parser.add_argument("--scoring", default=None, metavar="FILE", help="scoring file (TOML) naming the --score scorers, as for `score`")
    parser.add_argument("--epoch-reducer", default="mean", metavar="R",
                        help="how an item's epochs become one value: mean (default), max, min, mode, pass@k, pass^k")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the bootstrap and the permutation test (default 0)")
    parser.add_argument("--json", action="store_true", help="print the comparison as one JSON document")
    parser.add_argument("--out", default=None, metavar="FILE", help="also write the comparison page (self-contained HTML)")
    parser.add_argument("--dataset", default=None, metavar="FILE",
                        help="the runs' dataset: the targets to score a run that lacks a --score scorer, the prompts of the page")
    parser.add_argument("--title", default=None, help="the comparison page's title")
    parser.set_defaults(func=main, paths=paths, prices=None, group_by=None)


def paths(args: argparse.Namespace) -> Paths:
    """The inputs and the page, by flag (checked before anything is written)."""
    inputs = {"BASE": args.base, "--dataset": args.dataset, "--scoring": args.scoring}
    for number, path in enumerate(args.candidates, 1):
        inputs["CANDIDATE" if number == 1 else f"CANDIDATE {number}"] = path
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


def verdict(name: str, s: dict[str, Any]) -> str:
    """One line per scorer, what a reader wants first: ``exact: candidate +0.120 [0.050, 0.190],
    p = 0.003, 4 regressions, 12 improvements`` (and the strict difference when an item ended
    in error in either run)."""
    if s["diff"] is None:
        line = f"{name}: no pair to compare (n 0)"
    else:
        interval = "" if s["ci95"] is None else f" [{s['ci95'][0]:+.3f}, {s['ci95'][1]:+.3f}]"
        p = "—" if s["p_value"] is None else f"{s['p_value']:.3g}"
        line = (f"{name}: candidate {s['diff']:+.3f}{interval}, p = {p}, {len(s['regressions'])} regressions, "
                f"{len(s['improvements'])} improvements")
    strict = s.get("strict")
    if isinstance(strict, dict) and strict.get("n") != s["n"] and strict.get("diff") is not None:
        line += (f"; strict (an error scores 0) {strict['diff']:+.3f}, {len(strict['regressions'])} regressions, "
                 f"{len(strict['improvements'])} improvements")
    return line


def render_text(doc: dict[str, Any]) -> str:
    """The comparison as plain text, for a terminal (one comparison, or many with a leaderboard)."""
    if "comparisons" in doc:
        out = []
        for one in doc["comparisons"]:
            out += [f"== {one['candidate']} against {one['base']}", _render_one(one)]
        out.append(render_leaderboard(doc["leaderboard"], doc["correction"], doc["alpha"]))
        return "\n".join(out)
    return _render_one(doc) + "\n" + render_leaderboard(doc["leaderboard"], doc["correction"], 0.05)


def render_leaderboard(board: dict[str, Any], correction: str, alpha: float) -> str:
    """The leaderboard: per scorer the runs ranked by mean, their intervals and the differences
    that hold after the correction."""
    out = [f"leaderboard (differences that hold: adjusted p < {alpha:g}, correction {correction}):"]
    for name, rows in board.items():
        out.append(f"  {name}:")
        for row in rows:
            interval = "—" if row["ci95"] is None else f"[{_fmt(row['ci95'][0])}, {_fmt(row['ci95'][1])}]"
            holds = ""
            if row["better_than"]:
                holds += "   better than " + ", ".join(row["better_than"])
            if row["worse_than"]:
                holds += "   worse than " + ", ".join(row["worse_than"])
            out.append(f"    {row['rank']}. {row['run']}   mean {_fmt(row['mean'])}   95% CI {interval}   n {row['n']}{holds}")
    return "\n".join(out)


def _render_one(doc: dict[str, Any]) -> str:
    """One comparison: a verdict line per scorer first, then the details."""
    out = [verdict(name, s) for name, s in doc["scorers"].items()]
    out += [
        "",
        f"pairs: {doc['pairs']}   only in base: {len(doc['only_in_base'])}   only in candidate: "
        f"{len(doc['only_in_candidate'])}   status changes: {len(doc['status_changes'])}",
    ]
    for change in doc["status_changes"][:10]:
        out.append(f"  {change['id']}: {change['base']} -> {change['candidate']}")
    for name, s in doc["scorers"].items():
        interval = "—" if s["ci95"] is None else f"[{_fmt(s['ci95'][0])}, {_fmt(s['ci95'][1])}]"
        diff = "—" if s["diff"] is None else f"{s['diff']:+.3f}"
        out.append(f"{name}: n {s['n']}   base {_fmt(s['mean_base'])}   candidate {_fmt(s['mean_candidate'])}   "
                   f"diff {diff}   95% CI {interval}   p {_fmt(s['p_value'], 4)}   "
                   f"p adjusted {_fmt(s.get('p_adjusted'), 4)}")
        if s.get("n_clusters") is not None:
            out.append(f"  clusters {s['n_clusters']}   clustered stderr {_fmt(s['stderr'], 4)}   "
                       f"design effect {_fmt(s['design_effect'], 2)}")
        out.append(f"  regressions ({len(s['regressions'])}): {_ids(s['regressions'])}")
        out.append(f"  improvements ({len(s['improvements'])}): {_ids(s['improvements'])}")
        strict = s.get("strict")
        if isinstance(strict, dict) and strict.get("n") != s["n"]:  # an item ended in error in a run
            interval = "—" if strict["ci95"] is None else f"[{_fmt(strict['ci95'][0])}, {_fmt(strict['ci95'][1])}]"
            diff = "—" if strict["diff"] is None else f"{strict['diff']:+.3f}"
            out.append(f"  strict (an error scores 0): n {strict['n']}   base {_fmt(strict['mean_base'])}   candidate "
                       f"{_fmt(strict['mean_candidate'])}   diff {diff}   95% CI {interval}   p {_fmt(strict['p_value'], 4)}")
            out.append(f"    regressions ({len(strict['regressions'])}): {_ids(strict['regressions'])}")
            out.append(f"    improvements ({len(strict['improvements'])}): {_ids(strict['improvements'])}")
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
    check_judge_runtimes(plan.scorers, args.scoring)
    items, _ = load_dataset(args.dataset)
    out = os.path.join(directory, f"{what}.jsonl")
    with tempfile.TemporaryDirectory(prefix="dsh-orchestra-home-", dir=directory) as home:
        judge = RuntimeSpec.simulator(dsh_home=home) if any(s.kind == "judge" for s in plan.scorers) else None
        trio.run(partial(rescore, path, {i.id: i for i in items}, out, plan, judge_runtime=judge))
    return load_result_lines(out, f"{what} results file (scored)", strict=True)


def compare_check() -> Callable[[Any], str | None]:
    """What compare refuses in a line (besides the schema's rules), for one file: a score value
    that is not a number or null, and an (id, epoch) that an earlier line of the file has."""
    seen: set[tuple[Any, Any]] = set()

    def check(value: Any) -> str | None:
        scores = value.get("scores")
        for name, record in (scores.items() if isinstance(scores, dict) else ()):
            found = record.get("value") if isinstance(record, dict) else record
            if found is not None and (isinstance(found, bool) or not isinstance(found, (int, float))):
                return f"score {name!r} has the value {found!r}: compare needs a number (or null); fix or re-score the line"
        key = (value.get("id"), value.get("epoch", 1))
        if key in seen:
            return (f"id {key[0]!r} (epoch {key[1]}) is already on an earlier line: one line per (id, epoch); "
                    "keep one of them (or merge shards with `dsh-orchestra merge`)")
        seen.add(key)
        return None

    return check


def _load(args: argparse.Namespace, path: str, what: str) -> Any:
    """A run's lines: as columns (``eval.read_run``: score values as arrays, for runs of millions
    of lines), or decoded (for the page and --cluster-by, which read more of each line)."""
    if args.out is None and args.cluster_by is None:
        return read_run(path, what, check=compare_line_problem, unique=True, line_usage=False)
    return load_result_lines(path, what, strict=True, check=compare_check())


def _write_json(chunks: Iterable[bytes]) -> None:
    """The JSON document ``chunks`` and a newline to stdout: as bytes when stdout is UTF-8 text
    (no str, nor one bytes object, of a document that holds a million-line comparison's ids),
    else as text."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    buffer = getattr(sys.stdout, "buffer", None)
    if encoding == "utf8" and buffer is not None:
        sys.stdout.flush()
        for chunk in chunks:
            buffer.write(chunk)
        buffer.write(b"\n")
        buffer.flush()
    else:
        sys.stdout.write(b"".join(chunks).decode("utf-8") + "\n")


def main(args: argparse.Namespace) -> int:
    """Compare; returns the exit status."""
    many = len(args.candidates) > 1 or args.all_pairs
    map_large_blocks(args.base, *args.candidates)  # (millions of lines: freed columns go back to the system)
    try:
        base = _load(args, args.base, "base results file")
        candidates = [_load(args, path, "candidate results file") for path in args.candidates]
        with scratch_dir("compare") as directory:
            base = _score_run(args, args.base, base, directory, "base")
            candidates = [_score_run(args, path, lines, directory, f"candidate-{number}")
                          for number, (path, lines) in enumerate(zip(args.candidates, candidates, strict=True), 1)]
        names = None
        if args.score:
            names = [spec.name for spec in scoring_plan(args, (DEFAULT_PROVIDER, DEFAULT_MODEL)).scorers] if args.dataset else args.score
        if args.cluster_by is not None:  # over every run: an item's cluster is from the first run that has the item
            lines_clusters(args.cluster_by, [line for lines in (base, *candidates) for line in lines],
                           " or ".join([args.base, *args.candidates]))
        if many:
            doc = compare_many([(args.base, base), *zip(args.candidates, candidates, strict=True)], all_pairs=args.all_pairs,
                               scorers=names, reducer=args.epoch_reducer, seed=args.seed, cluster_by=args.cluster_by,
                               correction=args.correction)
        else:
            labels = (args.base, args.candidates[0]) if args.base != args.candidates[0] else ("base", "candidate")
            doc = compare_runs(base, candidates[0], scorers=names, reducer=args.epoch_reducer, seed=args.seed,
                               cluster_by=args.cluster_by, correction=args.correction, labels=labels,
                               _id_positions=args.out is None)  # (the page reads plain lists)
        candidate = candidates[0]
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

        page_doc = doc
        if many:  # the page: the first comparison's pairs, every comparison's statistics and the leaderboard
            first = doc["comparisons"][0]
            page_doc = {**first, "leaderboard": doc["leaderboard"], "all_comparisons": doc["comparisons"]}
        try:
            path = write_compare(args.out, base=args.base, candidate=args.candidates[0], comparison=page_doc,
                                 dataset=args.dataset, title=args.title, base_lines=base, candidate_lines=candidate)
        except (ReportInputError, ValueError) as exc:
            return fail(exc)
        except OSError as exc:
            return fail(f"cannot write {args.out!r}: {exc.strerror or exc}")
        print(f"dsh-orchestra: wrote {path}", file=sys.stderr)
    if args.json:
        # JSON escapes control characters; a comparison's id lists are written a chunk at a time
        _write_json(doc.json_chunks() if isinstance(doc, Comparison) else [orjson.dumps(doc)])
    else:
        print(escape_controls(render_text(doc)))
    return 0

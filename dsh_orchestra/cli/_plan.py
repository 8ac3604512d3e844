"""``dsh-orchestra plan``: items needed to detect a difference, or the minimum detectable one,
from a pilot run (or two runs on the same items)."""

from __future__ import annotations

import argparse
import math
from typing import Any

import orjson

from ..eval import PlanInputError, plan_runs
from ..report import ReportInputError, load_result_lines
from ._common import UsageError, fail
from ._errors import message
from ._paths import Paths
from ._stats import lines_clusters


def register(sub: Any) -> None:
    """Add the ``plan`` subcommand."""
    parser = sub.add_parser(
        "plan",
        help="power planning: items needed to detect a difference, or the minimum detectable difference",
        description="From a pilot RESULTS (a two-sample design: the candidate would be another run on items of the "
        "same kind) or RESULTS and RESULTS2 on the same items (a paired design, using their correlation), per "
        "scorer: the items needed to detect --mde D at --power and --alpha (normal approximation), the minimum "
        "detectable difference with the items at hand, the gain from --epochs K (within-item variance from the "
        "pilot's epochs) and the cost of clustering (--cluster-by: the design effect). Exit status: 0, 2 bad input.",
    )
    parser.add_argument("results", metavar="RESULTS", help="the pilot's results file (scored)")
    parser.add_argument("results2", metavar="RESULTS2", nargs="?", default=None, help="a second run on the same items: a paired design")
    parser.add_argument("--mde", type=float, default=None, metavar="D", help="the difference of means to detect (e.g. 0.05)")
    parser.add_argument("--power", type=float, default=0.8, metavar="P", help="the power to detect it (default 0.8)")
    parser.add_argument("--alpha", type=float, default=0.05, metavar="A", help="the two-sided test's level (default 0.05)")
    parser.add_argument("--epochs", type=int, default=None, metavar="K", help="plan for K epochs per item (needs a pilot with epochs)")
    parser.add_argument("--cluster-by", default=None, metavar="FIELD", help="a metadata key clustering the items: the design effect")
    parser.add_argument("--score", action="append", default=None, metavar="NAME", help="plan for this scorer (repeatable; default: all)")
    parser.add_argument("--epoch-reducer", default="mean", metavar="R", help="how an item's epochs become one value (default mean)")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON document")
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """The inputs, by flag."""
    return {"RESULTS": args.results, "RESULTS2": args.results2}, {}, {}


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if math.isfinite(value) else str(value)
    return str(value)


def render_text(doc: dict[str, Any]) -> str:
    """The plan as plain text."""
    out = [f"design: {doc['design']}   alpha {doc['alpha']:g}   power {doc['power']:g}"
           + (f"   epochs {doc['epochs']}" if doc["epochs"] else "") + (f"   clusters by {doc['cluster_by']}" if doc["cluster_by"] else "")]
    for name, s in doc["scorers"].items():
        if s is None:
            out.append(f"{name}: fewer than 2 items with a value")
            continue
        line = (f"{name}: sd {_fmt(s['sd'])}   items at hand {s['n_at_hand']}   detectable difference at hand "
                f"{_fmt(s['mde_at_hand'])}")
        if s["n_needed"] is not None:
            line += f"   items needed for {_fmt(s['mde'])}: {s['n_needed']}" + (" per run" if doc["design"] == "two-sample" else "")
        if "correlation" in s:
            line += f"   correlation {_fmt(s['correlation'], 3)}"
        if doc["cluster_by"]:
            line += f"   design effect {_fmt(s['design_effect'], 3)}"
        out.append(line)
        if "epochs" in s:
            e = s["epochs"]
            out.append(f"  epochs: within-item variance {_fmt(e['within_var'])}   between-item {_fmt(e['between_var'])}   "
                       f"{e['k']} epochs cut the per-item variance by {100 * e['gain']:.1f}%")
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    """Plan; returns the exit status."""
    try:
        if args.epochs is not None and args.epochs < 1:
            raise UsageError(f"--epochs must be an integer >= 1, not {args.epochs}")
        pilot = load_result_lines(args.results, "results file", strict=True)
        second = load_result_lines(args.results2, "second results file", strict=True) if args.results2 else None
        if args.cluster_by is not None:
            lines_clusters(args.cluster_by, [*pilot, *(second or [])], args.results)
        doc = plan_runs(pilot, second, mde=args.mde, power=args.power, alpha=args.alpha, epochs=args.epochs,
                        cluster_by=args.cluster_by, reducer=args.epoch_reducer, scorers=args.score)
    except PlanInputError as exc:
        text = str(exc)
        if text.endswith("score it first"):
            text += " (dsh-orchestra score RESULTS --dataset DATASET --score SPEC --out SCORED)"
        if text.startswith("planning for epochs"):
            text = "--epochs" + text.removeprefix("planning for epochs") + " (batch --epochs K)"
        return fail(f"{args.results}: {text}")
    except (ReportInputError, UsageError, ValueError) as exc:
        text = message(exc)
        for name in ("mde", "power", "alpha", "epochs"):
            text = text.replace(f"({name})", f"(--{name})")
        return fail(text)
    if args.json:
        print(orjson.dumps(doc).decode())
    else:
        print(render_text(doc))
    return 0

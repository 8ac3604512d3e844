"""``dsh-orchestra export``: a results file as a table (parquet or CSV), the rows of ``eval.load_results``."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

from ..eval import RescoreError, load_results
from ..results import replaced_atomically
from ._common import fail
from ._paths import Paths


def register(sub: Any) -> None:
    """Add the ``export`` subcommand."""
    parser = sub.add_parser(
        "export",
        help="write a results file as a table (parquet or CSV): one row per item and epoch",
        description="Flatten RESULTS (a batch's results) into a table, one row per (id, epoch): status, error, "
        "usage, cost, duration, score.<name> and score.<name>.answer per scorer, metadata.<key> per metadata "
        "key (as dsh_orchestra.eval.load_results). parquet needs the data extra (pip install "
        "'dsh-orchestra[data]'); CSV needs nothing. Exit status: 0 written, 2 bad arguments or input.",
    )
    parser.add_argument("results", metavar="RESULTS", help="a batch results file (JSON Lines)")
    parser.add_argument("--format", required=True, choices=("parquet", "csv"), help="the table's file format")
    parser.add_argument("--out", required=True, metavar="FILE", help="where to write the table (replaced atomically)")
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """The input and the output, by flag (an output that is an input is refused: exit 2)."""
    return {"RESULTS": args.results}, {"--out": args.out}, {}


def main(args: argparse.Namespace) -> int:
    """Export; returns the exit status."""
    out = Path(args.out)
    if not out.parent.is_dir():
        return fail(f"--out {args.out!r}: directory {str(out.parent)!r} does not exist; create it first")
    try:
        frame = load_results(args.results)
        if args.format == "parquet":
            data = io.BytesIO()
            frame.to_parquet(data)  # (in memory first: a missing extra leaves no file behind)
            encoded = data.getvalue()
        else:
            encoded = frame.to_csv().encode()
    except RescoreError as exc:
        return fail(exc)
    except ImportError as exc:
        return fail(exc)
    except OSError as exc:
        return fail(f"{exc.filename or args.results}: {exc.strerror or exc}")
    with replaced_atomically(out) as handle:
        handle.write(encoded)
    print(f"wrote {len(frame)} rows x {len(frame.names)} columns to {args.out}")
    return 0

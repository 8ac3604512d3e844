"""``dsh-orchestra view``: a local web app over results files (live while a batch writes them)."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path
from typing import Any

from ._common import fail
from ._paths import Paths

VIEW_EXTRA = "the viewer needs its web stack: pip install 'dsh-orchestra[view]' (Starlette and Hypercorn)"


def register(sub: Any) -> None:
    """Add the ``view`` subcommand."""
    from ..view import DEFAULT_HOST, DEFAULT_PORT

    parser = sub.add_parser(
        "view",
        help="browse results files in a local web app, live while a batch writes them",
        description="Serve a local web app over results files of `dsh-orchestra batch` (a PATH is a results file or a "
        "folder searched for them; default the current directory): the runs, each run's summary and items (server-side "
        "paging, sorting and filtering), each item's whole conversation from its transcript, and the comparison of two "
        "runs. Pages follow a results file as it grows. Every request needs the access token of the printed URL. "
        "Exit status: 130 stopped by Ctrl-C, 143 by SIGTERM, 2 bad arguments or input.",
    )
    parser.add_argument("inputs", nargs="*", metavar="PATH", help="results file (.jsonl) or folder holding them")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N", help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--open", action="store_true", help="open the URL in a web browser")
    parser.set_defaults(func=main, paths=paths)


def paths(args: argparse.Namespace) -> Paths:
    """Nothing is written; the inputs are checked by the viewer (a folder is a valid PATH)."""
    return {}, {}, {}


def main(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns the exit status."""
    try:
        import hypercorn  # noqa: F401 - only to say which extra is missing
        import starlette  # noqa: F401
    except ImportError:
        return fail(VIEW_EXTRA)
    import trio

    from ..view import ViewInputError, ViewServeError, bind, check_paths, serve

    if not 0 <= args.port <= 65535:
        return fail(f"--port must be between 0 and 65535, not {args.port}")
    try:
        chosen = check_paths([Path(p) for p in args.inputs])
        sock = bind(args.host, args.port)
    except (ViewInputError, ViewServeError) as exc:
        return fail(exc)

    def ready(url: str) -> None:
        print(f"dsh-orchestra view: {url}", flush=True)
        if args.host not in ("127.0.0.1", "::1", "localhost"):
            print(f"dsh-orchestra: listening on {args.host}: anyone who can reach it and has the URL can read these results",
                  file=sys.stderr)
        if args.open:
            webbrowser.open(url)

    try:
        trio.run(lambda: serve(chosen, sock, on_ready=ready))  # Ctrl-C and SIGTERM: dsh-orchestra's main
    finally:
        sock.close()
    return 0

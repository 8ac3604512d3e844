"""``python -m dsh_orchestra.testing sim [...]`` and ``... fake-model [--port P] [--script FILE]``."""

from __future__ import annotations

import argparse
import sys

USAGE = "usage: python -m dsh_orchestra.testing {sim,fake-model} [options]"


def main(argv: list[str]) -> int:
    """Dispatch to the simulated runtime or the scripted model server; returns the exit status."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    command, rest = argv[0], argv[1:]
    if command == "sim":
        from ._sim_main import sim_main

        return sim_main(rest)
    if command == "fake-model":
        from ._fake_model import fake_model_main

        parser = argparse.ArgumentParser(prog="python -m dsh_orchestra.testing fake-model")
        parser.add_argument("--port", type=int, default=0)
        parser.add_argument("--script", default=None)
        parser.add_argument("--rate-limit", default=None)
        parser.add_argument("--concurrency-limit", type=int, default=None)
        parser.add_argument("--stats", default=None)
        try:
            args = parser.parse_args(rest)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 2
        return fake_model_main(args.port, args.script, args.rate_limit, concurrency_limit=args.concurrency_limit,
                               stats=args.stats)
    print(f"unknown command {command!r}; {USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

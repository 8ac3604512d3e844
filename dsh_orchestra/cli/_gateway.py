"""The model gateway's flags (``batch`` and ``run``) and ``dsh-orchestra cache stats|prune DIR``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .._params import ParamError
from ..gateway import CACHE_EPOCHS, parse_rate, CACHE_FILE_NAME, CACHE_MODES, CacheError, GatewayOptions, ResponseCache
from ._common import UsageError
from ._errors import message


def add_gateway_options(parser: argparse.ArgumentParser) -> None:
    """--no-gateway, --upstream, --api-key-env, --model-concurrency, --model-rate, --cache, --cache-mode, --cache-epochs."""
    group = parser.add_argument_group("model gateway (--runtime dsh; docs/gateway.md)")
    group.add_argument("--no-gateway", action="store_true", help="let each runtime call the provider itself, with the real key")
    group.add_argument("--upstream", default=None, metavar="URL", help="the provider's base URL (default: DEEPSEEK_BASE_URL, else the provider's)")
    group.add_argument("--api-key-env", default="DEEPSEEK_API_KEY", metavar="NAME", help="the variable holding the real API key (default DEEPSEEK_API_KEY)")
    group.add_argument("--model-concurrency", default="auto", metavar="N|auto", help="model calls in flight for the whole run (default auto: adaptive)")
    group.add_argument("--model-rate", default=None, metavar="R/s|R/min",
                       help="model calls started a second at most, for the whole run (paced evenly; default: no pacing)")
    group.add_argument("--cache", default=None, metavar="DIR", help="a response cache directory")
    group.add_argument("--cache-mode", choices=CACHE_MODES, default=None, help="use (default: read and write), record (write only), replay (read only; a miss fails the item)")
    group.add_argument("--cache-epochs", choices=CACHE_EPOCHS, default="independent", help="independent (default): each epoch has its own answers; shared: epochs reuse one answer (then dependent)")


def check_gateway_flags(args: argparse.Namespace) -> None:
    """Refuse gateway flags that contradict each other (checked first: they are wrong whatever
    the runtime, its credentials or the files).

    Raises:
        UsageError: naming the flag.
    """
    gateway_flags = [f for f, v in (("--upstream", args.upstream), ("--model-rate", args.model_rate), ("--cache", args.cache),
                                    ("--cache-mode", args.cache_mode)) if v is not None]
    if args.cache_mode is not None and args.cache is None:
        raise UsageError(f"--cache-mode {args.cache_mode} needs --cache DIR (the cache directory)")
    if args.no_gateway and gateway_flags:
        raise UsageError(f"{gateway_flags[0]} needs the gateway: drop --no-gateway")


def gateway_options(args: argparse.Namespace) -> GatewayOptions | None:
    """The GatewayOptions the flags describe (None with --no-gateway).

    Raises:
        UsageError: contradictory or bad values, naming the flag.
    """
    check_gateway_flags(args)
    if args.no_gateway:
        return None
    concurrency: Any = args.model_concurrency
    if concurrency != "auto":
        try:
            concurrency = int(concurrency)
        except ValueError:
            raise UsageError(f"--model-concurrency must be an integer >= 1 or auto, not {args.model_concurrency!r}") from None
    try:
        rate = parse_rate(args.model_rate)
    except ParamError:
        raise UsageError(f"--model-rate must be a positive rate like 20/s or 600/min, not {args.model_rate!r}") from None
    if args.cache is not None and not args.cache.strip():
        raise UsageError(f"--cache needs a directory path, not {args.cache!r}")
    if args.cache is not None:
        _check_cache(args.cache, replay=args.cache_mode == "replay")
    try:
        return GatewayOptions(upstream=args.upstream, api_key_env=args.api_key_env, model_concurrency=concurrency,
                              model_rate=rate, cache=args.cache, cache_mode=args.cache_mode or "use", cache_epochs=args.cache_epochs)
    except (ParamError, ValueError) as exc:
        raise UsageError(message(exc)) from exc


def _check_cache(directory: str, *, replay: bool) -> None:
    if replay and not os.path.isfile(os.path.join(directory, CACHE_FILE_NAME)):
        raise UsageError(f"--cache {directory!r} holds no recorded answers ({CACHE_FILE_NAME}) to replay; "
                         "record them first (--cache-mode record or use)")
    try:
        ResponseCache(directory).close()
    except CacheError as exc:
        raise UsageError(f"--cache: {exc}") from None


def register(sub: Any) -> None:
    """Add the ``cache`` subcommand (stats, prune)."""
    parser = sub.add_parser("cache", help="report on or prune a model response cache (--cache DIR)",
                            description="Report on (stats) or prune a model gateway response cache directory. "
                            "Exit status: 0 done, 2 bad arguments or not a cache.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    stats = actions.add_parser("stats", help="entries, size, hits and misses, hit rate (JSON)")
    stats.add_argument("dir", metavar="DIR")
    prune = actions.add_parser("prune", help="remove entries (all, or those older than --older-than / never hit)")
    prune.add_argument("dir", metavar="DIR")
    prune.add_argument("--older-than", type=float, default=None, metavar="DAYS", help="only entries stored more than DAYS ago")
    prune.add_argument("--unused", action="store_true", help="only entries never replayed")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """``cache stats|prune DIR``."""
    if not os.path.isfile(os.path.join(args.dir, CACHE_FILE_NAME)):
        print(f"dsh-orchestra: {args.dir!r} holds no response cache ({CACHE_FILE_NAME}); give the --cache DIR of a run",
              file=sys.stderr)
        return 2
    try:
        cache = ResponseCache(args.dir)
    except CacheError as exc:
        print(f"dsh-orchestra: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "prune":
            older = None if args.older_than is None else args.older_than * 86400
            removed = cache.prune(older_than=older, unused=args.unused)
            print(json.dumps({"removed": removed, **cache.stats()}, indent=2))
        else:
            print(json.dumps(cache.stats(), indent=2))
    finally:
        cache.close()
    return 0

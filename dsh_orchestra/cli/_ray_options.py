"""The ``--ray`` options of ``dsh-orchestra batch`` and their translation to ``RayExecutor``
arguments. Imports no Ray (nor ``dsh_orchestra.scale``: parsing must work without the extra).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import orjson

from ..runtime import RuntimeSpec


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``, ``--ray-actors N``, ``--runtimes-per-actor M``, ``--ray-runtime-env JSON``,
    ``--ray-actor-resources JSON``."""
    group = parser.add_argument_group("scale-out on Ray (docs/scale-out.md; needs the ray extra)")
    group.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="run the items on Ray actors: no value starts a local Ray instance for the run; "
        "ADDRESS (auto, HOST:PORT, ray://HOST:PORT) connects to a cluster. Put it after DATASET",
    )
    group.add_argument("--ray-actors", type=int, default=2, metavar="N", help="Ray actors, each with its own runtime pool (default 2)")
    group.add_argument("--runtimes-per-actor", type=int, default=None, metavar="M",
                       help="runtime processes per actor (default: --runtimes)")
    group.add_argument("--ray-runtime-env", default=None, metavar="JSON|FILE",
                       help="a Ray runtime_env for the actors (pip, working_dir, env_vars, ...), as JSON or a JSON file")
    group.add_argument("--ray-actor-resources", default=None, metavar="JSON|FILE",
                       help='custom Ray resources each actor asks for, as JSON or a JSON file: an object for every '
                       'actor ({"gpu_box": 1}), or a list of objects that actor i takes in turn '
                       '([{"node_a": 1}, {"node_b": 1}])')


def ray_options(args: argparse.Namespace, spec: RuntimeSpec, temp_home: str | None) -> dict[str, Any]:
    """Keyword arguments of ``dsh_orchestra.scale.RayExecutor`` from the parsed options.

    Raises:
        ValueError: a bad value (the message names the option).
    """
    if args.ray_actors < 1:
        raise ValueError(f"--ray-actors must be an integer >= 1, not {args.ray_actors!r}")
    if args.runtimes_per_actor is not None and args.runtimes_per_actor < 1:
        raise ValueError(f"--runtimes-per-actor must be an integer >= 1, not {args.runtimes_per_actor!r}")
    runtime_env: Any = None
    if args.ray_runtime_env is not None:
        runtime_env = _json_value("--ray-runtime-env", args.ray_runtime_env)
        if not isinstance(runtime_env, dict):
            raise ValueError(f"--ray-runtime-env must be a JSON object, not {type(runtime_env).__name__}")
    resources: Any = None
    if args.ray_actor_resources is not None:
        resources = _json_value("--ray-actor-resources", args.ray_actor_resources)
        entries = resources if isinstance(resources, list) else [resources]
        if not entries or not all(isinstance(e, dict) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in e.values()) for e in entries):
            raise ValueError(f"--ray-actor-resources {args.ray_actor_resources!r}: give a JSON object of resource "
                             'names and positive amounts, or a non-empty list of them, e.g. [{"node_a": 1}, {"node_b": 1}]')
    # the simulator in the CLI's temporary DSH_HOME: each actor makes its own instead
    private_home = temp_home is not None and spec.dsh_home is not None and Path(temp_home).absolute() == spec.dsh_home
    return {
        "address": args.ray,
        "actors": args.ray_actors,
        "runtimes_per_actor": args.runtimes_per_actor,
        "temp_home": private_home,
        "runtime_env": runtime_env,
        "actor_resources": resources,
    }


def _json_value(flag: str, text: str) -> Any:
    """The JSON ``text`` of ``flag``, or the JSON file it names."""
    try:
        if not text.lstrip().startswith(("{", "[")) and os.path.exists(text):
            return orjson.loads(Path(text).read_text(encoding="utf-8"))
        return orjson.loads(text)
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"{flag} {text!r}: not JSON nor a JSON file ({exc})") from exc

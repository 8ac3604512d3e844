"""Every command's input and output paths, checked before anything is written or started.

Each subcommand sets ``paths`` (``parser.set_defaults(paths=...)``): a function of the parsed
arguments returning its inputs, outputs and output directories keyed by flag; ``main`` adds
``--log-file`` and calls ``check_command_paths`` before logging is configured.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable

from .._paths import PathConflictError, check_paths, existing_file
from ._errors import flag

Paths = tuple[dict[str, Any], dict[str, Any], dict[str, tuple[Any, Callable[[str], bool]]]]


def flag_of(parameter: str) -> str:
    """The flag (or positional name) that sets a library parameter."""
    return flag(parameter)


def describe_flag(name: str, path: str) -> str:
    """A path in a CLI message: ``--out 'r.jsonl'`` (``name`` is a flag or a parameter)."""
    return f"{name if name.startswith('-') or name.isupper() else flag_of(name)} {path!r}"


def file_option(value: Any) -> str | None:
    """An option that takes FILE or something else (``module:attr``, ``first-option``): its
    path when it names an existing file, the empty string as given (refused), else None."""
    return value if value == "" else existing_file(value)


def check_command_paths(args: argparse.Namespace) -> str | None:
    """The problem with the command's paths (None when there is none): an empty path, an output
    that is a directory, an output directory that is a file, or two paths that collide."""
    paths: Callable[[argparse.Namespace], Paths] | None = getattr(args, "paths", None)
    inputs, outputs, dirs = paths(args) if paths is not None else ({}, {}, {})
    outputs = {**outputs, "--log-file": getattr(args, "log_file", None)}
    for name, value in [*inputs.items(), *outputs.items(), *((n, v[0]) for n, v in dirs.items())]:
        if isinstance(value, str) and not value.strip():
            return f"{name} needs a path, not {value!r}"
    for name, value in outputs.items():
        if value is not None and os.path.isdir(value):
            return f"{name} {value!r} is a directory; give a file path"
    for name, (value, _) in dirs.items():
        if value is not None and os.path.exists(value) and not os.path.isdir(value):
            return f"{name} {value!r} is a file, not a directory; give a directory"
    try:
        check_paths(inputs, outputs, output_dirs=dirs, describe=describe_flag)
    except PathConflictError as exc:
        return str(exc)
    return None

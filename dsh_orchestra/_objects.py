"""``module:attr`` loading, shared by the loaders of policies and answerers.

Imports nothing from dsh_orchestra but ``_params`` (every layer may use it).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from ._params import Param, ParamError


def import_object(spec: str, *, param: str, error: type[ParamError]) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted; the current directory is
    importable).

    Raises:
        error: not of that form, or the module cannot be imported (it is missing, has a
            syntax error, or raised while importing), or it has no such attribute (the
            message names ``param`` and ``spec``).
    """
    named = Param(param, spec)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise error(named, ": no such file, and not of the form module:attr")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 (ImportError, SyntaxError, or whatever the module raised)
        raise error(named, f": cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError as exc:
            raise error(named, f": module {module_name!r} has no attribute {attr!r}") from exc
        except Exception as exc:  # noqa: BLE001 (a module __getattr__ that raised)
            raise error(named, f": getting {attr!r} raised {type(exc).__name__}: {exc}") from exc
    return value


def load_attr(spec: str, *, param: str, error: type[ParamError], what: str) -> Any:
    """``import_object``, which must be callable (else ``error`` saying ``what`` was expected)."""
    value = import_object(spec, param=param, error=error)
    if not callable(value):
        raise error(Param(param, spec), f": {type(value).__name__} is not {what}")
    return value

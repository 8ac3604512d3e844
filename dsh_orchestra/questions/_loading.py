"""``load_answerer``: an answerer by name, from an answerer file (TOML), or ``module:attr``.

The answerer file::

    default = "first-option"        # or "dismiss": questions without an answer below
    [answers]
    env = "staging"                 # question id -> the option label to select

Imports only the protocol layer (and the shared ``module:attr`` loader).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn

from .._objects import load_attr
from .._params import Param, ParamError
from ._answerers import DISMISS, Answerer, QuestionsRequest, by_rule, first_option

BUILT_IN = {"first-option": first_option}
"""Answerers known by name."""


class AnswererFileError(ParamError, ValueError):
    """An answerer value or file is wrong; the message says what to fix (``.param``, ``.value``)."""


@attrs.frozen(kw_only=True)
class AnswererFile:
    """What an answerer file holds."""

    default: Literal["first-option", "dismiss"] = "first-option"
    answers: dict[str, str] = attrs.field(factory=dict)


_CONVERTER = cattrs.Converter()
_CONVERTER.register_structure_hook(str, lambda value, _: _string(value))
_CONVERTER.register_structure_hook(
    AnswererFile, make_dict_structure_fn(AnswererFile, _CONVERTER, _cattrs_forbid_extra_keys=True)
)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {type(value).__name__}")
    return value


def _dismiss(request: QuestionsRequest) -> Any:
    return DISMISS


def answerer_of(file: AnswererFile) -> Answerer:
    """The answerer an answerer file describes."""
    if file.default == "dismiss" and not file.answers:
        return _dismiss
    return by_rule(file.answers, fallback=first_option if file.default == "first-option" else None)


def load_answerer_file(path: str | os.PathLike[str], *, param: str = "answerer") -> Answerer:
    """Read an answerer file (TOML, see the module docstring).

    Raises:
        AnswererFileError: it cannot be read, is not TOML, or is not an answerer file (the
            message names the file and the key).
    """
    named = Param(param, str(path))
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise AnswererFileError(named, f": cannot read it: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise AnswererFileError(named, f": the file is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise AnswererFileError(named, f": cannot read it as TOML: {exc}") from exc
    try:
        file = _CONVERTER.structure(data, AnswererFile)
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(cattrs.transform_error(exc, path="file", format_exception=_problem))
        raise AnswererFileError(named, f": {problems} (expected default = \"first-option\" or \"dismiss\", and an "
                                       "[answers] table mapping question ids to option labels)") from exc
    return answerer_of(file)


def _problem(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown key(s) {sorted(exc.extra_fields)}"
    if type_ is not None and getattr(type_, "__origin__", None) is Literal:
        return f"must be one of {', '.join(map(repr, type_.__args__))}"
    if isinstance(exc, KeyError):
        return "required"
    return str(exc) if isinstance(exc, (TypeError, ValueError)) and str(exc) else f"invalid value ({type(exc).__name__})"


def load_answerer(value: str, *, param: str = "answerer") -> Answerer:
    """An answerer from ``value``: a built-in name (``first-option``), an answerer FILE
    (``.toml``, see the module docstring), or ``module:attr`` (any callable).

    ``param`` is the name of the parameter ``value`` came in (errors name it).

    Raises:
        AnswererFileError: none of these, or it cannot be loaded (the message says why).
    """
    if not isinstance(value, str) or not value:
        raise AnswererFileError(Param(param, value, spelled=param), f" must be first-option, a TOML FILE or module:attr, not {value!r}")
    if value in BUILT_IN:
        return BUILT_IN[value]
    if os.path.exists(value) or value.endswith(".toml"):
        return load_answerer_file(value, param=param)
    if ":" not in value:
        raise AnswererFileError(Param(param, value, spelled=param), f" must be first-option, a TOML FILE or module:attr, not {value!r}")
    answerer: Answerer = load_attr(value, param=param, error=AnswererFileError, what="a callable answerer")
    return answerer

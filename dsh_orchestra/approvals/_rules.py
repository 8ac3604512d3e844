"""Policy rules files (TOML) and ``load_policy`` for ``policy=FILE`` or ``policy="module:attr"``.

A rules file holds a default outcome and an ordered list of rules; the first rule that applies
decides. Imports only the protocol layer.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, override

from .._objects import import_object as _import_object
from .._params import Param, ParamError
from ._model import OUTCOMES, REJECTED, Policy
from ._policies import Rule, budget, first_match

_TOP_KEYS = {"default", "deadline", "rules"}
_RULE_KEYS = {"name", "outcome", "tools", "sessions", "reason", "budget", "note"}


class PolicyFileError(ParamError, ValueError):
    """A rules file or a ``policy=`` value is wrong; the message says what to fix.

    ``.param``/``.parameter`` names what was given (``policy``, or ``answerer`` for a
    ``module:attr`` answerer) and ``.value`` the value, when the problem is with the value as
    a whole (None for a problem inside a rules file, whose message names the file).
    """

    def __init__(self, *parts: str | Param, value: str | None = None, parameter: str = "policy") -> None:
        if value is not None:
            parts = (Param(parameter, value), ": ", *parts)
        named = next((part for part in parts if isinstance(part, Param)), None)
        self.parameter = named.name if named is not None else parameter
        self.problem = "".join(part for part in parts if isinstance(part, str)).removeprefix(": ")
        super().__init__(*parts)

    def format(self, name: str | None = None) -> str:
        """The message, naming the parameter as ``name`` (a CLI flag; default ``policy=``)."""
        if name is None:
            return str(self)
        return self.render(lambda param: f"{name} {param.value!r}" if param.shows_value else name)


@attrs.frozen
class LoadedPolicy:
    """A policy plus the settings that came with it (its deadline in seconds, if any)."""

    policy: Policy
    deadline: float | None = None
    source: str = ""

    def __call__(self, request: Any) -> Any:
        return self.policy(request)


def valid_deadline(value: Any) -> bool:
    """True for a positive number of seconds (finite) (not a bool, nan or inf)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _strings(value: Any, _: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"must be a non-empty string or list of non-empty strings, not {value!r}")
    return value


def _outcome(value: Any, _: Any) -> str:
    if value not in OUTCOMES:
        raise ValueError(f"must be one of {', '.join(OUTCOMES)}, not {value!r}")
    return value  # type: ignore[no-any-return]


def _deadline(value: Any, _: Any) -> float | None:
    if value is not None and not valid_deadline(value):
        raise ValueError(f"must be a positive number of seconds (finite), not {value!r}")
    return None if value is None else float(value)


def _kind(check: Any, expected: str) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if not check(value):
            raise ValueError(expected.format(value=value))
        return value

    return hook


@attrs.frozen(kw_only=True)
class RuleTable:
    """One ``[[rules]]`` table of a rules file."""

    outcome: str
    name: str | None = None
    tools: list[str] | None = None
    sessions: list[str] | None = None
    reason: str | None = None
    budget: int | None = None
    note: str = ""


@attrs.frozen(kw_only=True)
class RulesFile:
    """What a rules file holds."""

    default: str = REJECTED
    deadline: float | None = None
    rules: list[Any] = attrs.field(factory=list)  # each a RuleTable, structured one by one (names in messages)


_CONVERTER = cattrs.Converter(detailed_validation=True)
_CONVERTER.register_structure_hook(RulesFile, make_dict_structure_fn(
    RulesFile, _CONVERTER, _cattrs_forbid_extra_keys=True,
    default=override(struct_hook=_outcome), deadline=override(struct_hook=_deadline),
    rules=override(struct_hook=_kind(lambda v: isinstance(v, list), "must be an array of tables ([[rules]])")),
))
_CONVERTER.register_structure_hook(RuleTable, make_dict_structure_fn(
    RuleTable, _CONVERTER, _cattrs_forbid_extra_keys=True,
    outcome=override(struct_hook=_outcome),
    name=override(struct_hook=_kind(lambda v: isinstance(v, str) and v, "must be a non-empty string, not {value!r}")),
    tools=override(struct_hook=_strings), sessions=override(struct_hook=_strings),
    reason=override(struct_hook=_kind(lambda v: isinstance(v, str), "must be a regular expression string")),
    budget=override(struct_hook=_kind(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                                      "must be an integer >= 0, not {value!r}")),
    note=override(struct_hook=_kind(lambda v: isinstance(v, str), "must be a string")),
))
"""Rules files -> ``RulesFile`` / ``RuleTable``: every problem of a table at once."""


def _problems(exc: cattrs.ClassValidationError, expected_keys: set[str]) -> list[str]:
    """``key must be ...`` per failed key of one table, unknown keys last (a rule's order)."""
    out, extra = [], []
    failed, other = exc.group_exceptions()
    for error, note in failed:
        if isinstance(error, KeyError):
            out.append(f"{note.name} is required (one of {', '.join(OUTCOMES)})")
        else:
            out.append(f"{note.name} {error}")
    for error in other:
        if isinstance(error, cattrs.ForbiddenExtraKeysError):
            extra.append(f"unknown key(s) {sorted(error.extra_fields)}; expected {sorted(expected_keys)}")
        else:
            out.append(str(error))
    return extra + out


def _structured(data: Any, cls: type[Any], where: str, keys: set[str]) -> Any:
    try:
        return _CONVERTER.structure(data, cls)
    except cattrs.ClassValidationError as exc:
        raise PolicyFileError(f"{where}: " + "; ".join(_problems(exc, keys))) from None


def parse_rules(data: dict[str, Any], *, source: str = "<rules>") -> LoadedPolicy:
    """Build a first-match policy from parsed TOML ``data``.

    Raises:
        PolicyFileError: an unknown key, a wrong type or an unknown outcome (named in the
            message with the file and the rule; every problem of the first bad table).
    """
    try:
        file: RulesFile = _CONVERTER.structure(data, RulesFile)
    except cattrs.ClassValidationError as exc:
        problems = [p.replace("unknown key(s)", "unknown top-level key(s)") for p in _problems(exc, _TOP_KEYS)]
        raise PolicyFileError(f"{source}: " + "; ".join(problems)) from None
    rules: list[Policy] = []
    for index, raw in enumerate(file.rules):
        if not isinstance(raw, dict):
            raise PolicyFileError(f"{source}: rules[{index}] must be a table")
        name = raw.get("name", f"rule-{index + 1}")
        where = f"{source}: rule {name!r}" if isinstance(name, str) and name else f"{source}: rules[{index}]"
        table: RuleTable = _structured(raw, RuleTable, where, _RULE_KEYS)
        name = table.name or f"rule-{index + 1}"
        try:
            rule: Policy = Rule(name, table.outcome, tools=table.tools, sessions=table.sessions, reason=table.reason,
                                note=table.note)
        except Exception as exc:  # a bad regular expression
            raise PolicyFileError(f"{where}: {exc}") from exc
        if table.budget is not None:
            rule = _budgeted(rule, table.budget, table.tools or ["*"], name)
        rules.append(rule)
    policy = first_match(*rules, default=file.default)
    return LoadedPolicy(policy=policy, deadline=file.deadline, source=source)


def _budgeted(rule: Policy, limit: int, tools: list[str], name: str) -> Policy:
    return budget(rule, limit, tools=tools, name=f"{name} (budget)")


def load_rules_file(path: str | os.PathLike[str]) -> LoadedPolicy:
    """Read a TOML rules file.

    Raises:
        PolicyFileError: the file is missing, not TOML, or not a valid rules file.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyFileError(f"cannot read policy file {str(path)!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise PolicyFileError(f"policy file {str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyFileError(f"policy file {str(path)!r} is not valid TOML: {exc}") from exc
    return parse_rules(data, source=str(path))


def load_policy(spec: str, *, param: str = "policy") -> LoadedPolicy:
    """``FILE`` (a TOML rules file) or ``module:attr`` (a policy object or callable).

    ``param`` is the name of the parameter ``spec`` came in (errors name it).

    Raises:
        PolicyFileError: the file or object cannot be loaded; the message says why.
    """
    if not isinstance(spec, str) or not spec:
        raise PolicyFileError("needs a FILE or module:attr", value=spec if isinstance(spec, str) else repr(spec), parameter=param)
    if os.path.exists(spec) or spec.endswith(".toml"):
        return load_rules_file(spec)
    value = import_object(spec, parameter=param)
    if not callable(value):
        raise PolicyFileError(f"{type(value).__name__} is not a callable policy", value=spec, parameter=param)
    if isinstance(value, LoadedPolicy):
        return value
    deadline = getattr(value, "deadline", None)  # honoured as a rules file's deadline is
    if deadline is not None and not valid_deadline(deadline):
        raise PolicyFileError(f"its deadline attribute must be a positive number of seconds (finite), not {deadline!r}", value=spec, parameter=param)
    return LoadedPolicy(policy=value, deadline=float(deadline) if deadline is not None else None, source=spec)


def import_object(spec: str, *, parameter: str = "policy") -> Any:
    """The object ``module:attr`` names (the current directory is importable).

    Raises:
        PolicyFileError: not of that form, or the module cannot be imported (it is missing,
            has a syntax error, or raised while importing), or it has no such attribute.
    """
    return _import_object(spec, param=parameter, error=PolicyFileError)

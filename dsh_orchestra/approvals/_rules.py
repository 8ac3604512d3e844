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


def _strings(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise PolicyFileError(f"{where} must be a non-empty string or list of non-empty strings, not {value!r}")
    return value


def parse_rules(data: dict[str, Any], *, source: str = "<rules>") -> LoadedPolicy:
    """Build a first-match policy from parsed TOML ``data``.

    Raises:
        PolicyFileError: an unknown key, a wrong type or an unknown outcome (named in the message).
    """
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise PolicyFileError(f"{source}: unknown top-level key(s) {sorted(unknown)}; expected {sorted(_TOP_KEYS)}")
    default = data.get("default", REJECTED)
    if default not in OUTCOMES:
        raise PolicyFileError(f"{source}: default must be one of {', '.join(OUTCOMES)}, not {default!r}")
    deadline = data.get("deadline")
    if deadline is not None and not valid_deadline(deadline):
        raise PolicyFileError(f"{source}: deadline must be a positive number of seconds (finite), not {deadline!r}")
    raw_rules = data.get("rules", [])
    if not isinstance(raw_rules, list):
        raise PolicyFileError(f"{source}: rules must be an array of tables ([[rules]])")
    rules: list[Policy] = []
    for index, raw in enumerate(raw_rules):
        where = f"{source}: rules[{index}]"
        if not isinstance(raw, dict):
            raise PolicyFileError(f"{where} must be a table")
        name = raw.get("name", f"rule-{index + 1}")
        if not isinstance(name, str) or not name:
            raise PolicyFileError(f"{where}: name must be a non-empty string, not {name!r}")
        where = f"{source}: rule {name!r}"
        unknown = set(raw) - _RULE_KEYS
        if unknown:
            raise PolicyFileError(f"{where}: unknown key(s) {sorted(unknown)}; expected {sorted(_RULE_KEYS)}")
        if "outcome" not in raw:
            raise PolicyFileError(f"{where}: outcome is required (one of {', '.join(OUTCOMES)})")
        outcome = raw["outcome"]
        if outcome not in OUTCOMES:
            raise PolicyFileError(f"{where}: outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        note = raw.get("note", "")
        if not isinstance(note, str):
            raise PolicyFileError(f"{where}: note must be a string")
        tools = _strings(raw["tools"], f"{where}: tools") if "tools" in raw else None
        sessions = _strings(raw["sessions"], f"{where}: sessions") if "sessions" in raw else None
        reason = raw.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise PolicyFileError(f"{where}: reason must be a regular expression string")
        try:
            rule: Policy = Rule(name, outcome, tools=tools, sessions=sessions, reason=reason, note=note)
        except Exception as exc:  # a bad regular expression
            raise PolicyFileError(f"{where}: {exc}") from exc
        if "budget" in raw:
            limit = raw["budget"]
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                raise PolicyFileError(f"{where}: budget must be an integer >= 0, not {limit!r}")
            rule = _budgeted(rule, limit, tools or ["*"], name)
        rules.append(rule)
    policy = first_match(*rules, default=default)
    return LoadedPolicy(policy=policy, deadline=float(deadline) if deadline is not None else None, source=source)


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

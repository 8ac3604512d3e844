"""The scoring file (TOML) and scorer SPEC resolution into picklable ``ScorerSpec``s.

A scoring file holds ``[scorers.NAME]`` tables (``kind`` plus the kind's settings), the
built-ins' defaults (``[numeric] rel_tol``, ``[judge] rubric``/``runtime``/...) and named
patterns for ``regex:NAME`` (``[regex.NAME] pattern``/``fullmatch``, or ``[regex] NAME =
"pattern"``). Pure apart from ``load_scoring`` reading one file; imports no scorer module.
"""

from __future__ import annotations

import hashlib
import math
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping, Sequence

import attrs
import regex

from .._params import Param, ParamError
from ._prompt import TemplateError, check_template

BUILTIN = ("exact", "includes", "choice", "numeric", "f1", "judge")
KINDS = (*BUILTIN, "regex", "python")
_SETTINGS: dict[str, frozenset[str]] = {
    "exact": frozenset(), "includes": frozenset(), "choice": frozenset(), "f1": frozenset(),
    "numeric": frozenset({"rel_tol"}),
    "regex": frozenset({"pattern", "fullmatch", "timeout"}),
    "judge": frozenset({"rubric", "runtime", "provider", "model", "script", "dsh_home", "parse_attempts", "timeout"}),
    "python": frozenset({"function", "timeout"}),
}
_TOP = ("scorers", "numeric", "judge", "regex", "prompt")


class ScoringError(ParamError, ValueError):
    """A scoring file or a scorer SPEC (``score=``) is wrong; the message says what to fix."""


def _a_name(_: Any, __: Any, value: Any) -> None:
    if not isinstance(value, str):  # (1 and "1" would be one key of the JSON line, written twice)
        raise ScoringError(f"a scorer's name is the key of a line's scores: a string, not {value!r}")


@attrs.frozen
class ScorerSpec:
    """One scorer of a run, by value (it crosses process boundaries, e.g. to Ray actors):
    its ``name`` (the key of ``scores``: a str), its ``kind`` and the kind's ``settings``.

    Raises:
        ScoringError: ``name`` is not a str.
    """

    name: str = attrs.field(validator=_a_name)
    kind: str
    settings: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ScoringFile:
    """A parsed scoring file."""

    scorers: Mapping[str, ScorerSpec] = attrs.field(factory=dict)
    defaults: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)  # "numeric", "judge"
    patterns: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)  # regex:NAME
    source: str | None = None
    sha256: str | None = None
    prompt_template: str | None = None  # [prompt] template (None: the default; "none": off)


def _check_settings(kind: str, table: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(table) - _SETTINGS[kind])
    if unknown:
        allowed = ", ".join(sorted(_SETTINGS[kind])) or "no settings"
        raise ScoringError(f"{where}: unknown key(s) {unknown} for kind {kind!r} (it takes: {allowed})")
    settings = dict(table)
    if "rel_tol" in settings:
        value = settings["rel_tol"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ScoringError(f"{where}: rel_tol must be a number >= 0, not {value!r}")
        settings["rel_tol"] = float(value)
    if "timeout" in settings:
        value = settings["timeout"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ScoringError(f"{where}: timeout must be a positive number of seconds, not {value!r}")
        settings["timeout"] = float(value)
    if kind == "regex":
        pattern = settings.get("pattern")
        if not isinstance(pattern, str):
            raise ScoringError(f"{where}: needs pattern = \"<a Python regular expression>\"")
        try:
            regex.compile(pattern)
        except regex.error as exc:
            raise ScoringError(f"{where}: pattern {pattern!r} is not a valid regular expression: {exc}") from exc
        if not isinstance(settings.get("fullmatch", False), bool):
            raise ScoringError(f"{where}: fullmatch must be true or false, not {settings['fullmatch']!r}")
    if kind == "python":
        function = settings.get("function")
        if not isinstance(function, str) or ":" not in function:
            raise ScoringError(f'{where}: needs function = "module:attr"')
    if kind == "judge":
        for key in ("rubric", "runtime", "provider", "model", "script", "dsh_home"):
            if key in settings and (not isinstance(settings[key], str) or not settings[key]):
                raise ScoringError(f"{where}: {key} must be a non-empty string, not {settings[key]!r}")
        attempts = settings.get("parse_attempts", 2)
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise ScoringError(f"{where}: parse_attempts must be an integer >= 0, not {attempts!r}")
    return settings


def parse_scoring(data: Mapping[str, Any], *, source: str = "<scoring>", sha256: str | None = None) -> ScoringFile:
    """Check a parsed scoring document.

    Raises:
        ScoringError: an unknown table, kind or key, or a bad value (named in the message).
    """
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise ScoringError(f"scoring file {source!r}: unknown table(s) {unknown}; expected [scorers.NAME], [numeric], [judge], [regex.NAME], [prompt]")
    scorers: dict[str, ScorerSpec] = {}
    tables = data.get("scorers", {})
    if not isinstance(tables, dict):
        raise ScoringError(f"scoring file {source!r}: scorers must be tables [scorers.NAME]")
    for name, table in tables.items():
        where = f"scoring file {source!r}: [scorers.{name}]"
        if not isinstance(table, dict):
            raise ScoringError(f"{where}: must be a table with a kind")
        kind = table.get("kind")
        if kind not in KINDS:
            raise ScoringError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
        settings = _check_settings(kind, {k: v for k, v in table.items() if k != "kind"}, where)
        scorers[name] = ScorerSpec(name, kind, settings)
    defaults: dict[str, Mapping[str, Any]] = {}
    for kind in ("numeric", "judge"):
        table = data.get(kind, {})
        if not isinstance(table, dict):
            raise ScoringError(f"scoring file {source!r}: [{kind}] must be a table")
        defaults[kind] = _check_settings(kind, table, f"scoring file {source!r}: [{kind}]")
    patterns: dict[str, Mapping[str, Any]] = {}
    regex = data.get("regex", {})
    if not isinstance(regex, dict):
        raise ScoringError(f"scoring file {source!r}: [regex] must be a table of named patterns")
    for name, value in regex.items():
        table = {"pattern": value} if isinstance(value, str) else value
        if not isinstance(table, dict):
            raise ScoringError(f"scoring file {source!r}: [regex.{name}] must be a pattern string or a table with pattern")
        patterns[name] = _check_settings("regex", table, f"scoring file {source!r}: [regex.{name}]")
    return ScoringFile(scorers=scorers, defaults=defaults, patterns=patterns, source=source, sha256=sha256,
                       prompt_template=_prompt_template(data.get("prompt"), source))


def _prompt_template(table: Any, source: str) -> str | None:
    if table is None:
        return None
    where = f"scoring file {source!r}: [prompt]"
    if not isinstance(table, dict):
        raise ScoringError(f"{where} must be a table: [prompt] template = \"...\"")
    unknown = sorted(set(table) - {"template"})
    if unknown:
        raise ScoringError(f"{where}: unknown key(s) {unknown} (it takes: template)")
    if "template" not in table:
        return None
    try:
        return check_template(table["template"], f"{where} template")
    except TemplateError as exc:
        raise ScoringError(str(exc)) from None


def load_scoring(path: str | os.PathLike[str]) -> ScoringFile:
    """Read and check a scoring file (see ``parse_scoring``).

    Raises:
        ScoringError: unreadable, not TOML, or malformed.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise ScoringError(f"cannot read scoring file {str(path)!r}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScoringError(f"scoring file {str(path)!r} is not valid TOML: {exc}") from exc
    return parse_scoring(data, source=str(path), sha256=hashlib.sha256(raw).hexdigest())


def resolve_scorers(specs: Sequence[str], scoring: ScoringFile | None = None) -> tuple[ScorerSpec, ...]:
    """The scorers the SPECs name, in order (every ``[scorers.NAME]`` of the file
    when ``specs`` is empty). A SPEC is a name of the scoring file, a built-in (``exact``,
    ``includes``, ``choice``, ``numeric``, ``f1``, ``judge``), ``regex:NAME`` or ``module:attr``.

    Raises:
        ScoringError: an unknown or repeated SPEC, or a ``regex:NAME`` the file does not define.
    """
    scoring = scoring or ScoringFile()
    if not specs:
        return tuple(scoring.scorers.values())
    out: list[ScorerSpec] = []
    for spec in specs:
        if not isinstance(spec, str) or not spec:
            raise ScoringError(Param("score", spec, spelled="score"), f" needs a SPEC, not {spec!r}")
        if any(s.name == spec for s in out):
            raise ScoringError(Param("score", spec), " is given twice; each scorer once")
        out.append(_resolve(spec, scoring))
    return tuple(out)


def _resolve(spec: str, scoring: ScoringFile) -> ScorerSpec:
    if spec in scoring.scorers:
        return scoring.scorers[spec]
    if spec in BUILTIN:
        return ScorerSpec(spec, spec, dict(scoring.defaults.get(spec, {})))
    if spec.startswith("regex:"):
        name = spec[len("regex:"):]
        if name in scoring.patterns:
            return ScorerSpec(spec, "regex", dict(scoring.patterns[name]))
        named = scoring.scorers.get(name)
        if named is not None and named.kind == "regex":
            return ScorerSpec(spec, "regex", dict(named.settings))
        where = f"scoring file {scoring.source!r}" if scoring.source else "no scoring file was given"
        raise ScoringError(Param("score", spec), f": no pattern named {name!r} ({where}); define [regex.{name}] pattern = \"...\" in a scoring file (",
                           Param("scoring"), ")")
    module, sep, attr = spec.partition(":")
    if sep and module and attr:
        return ScorerSpec(spec, "python", {"function": spec})
    raise ScoringError(
        Param("score", spec), " is not a scorer: use exact, includes, choice, numeric, f1, judge, regex:NAME, "
        "module:attr, or a [scorers.NAME] of the scoring file (", Param("scoring"), ")"
    )

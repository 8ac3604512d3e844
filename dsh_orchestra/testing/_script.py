"""Declarative scenario scripts: one TOML file drives the simulated runtime and the fake model.

Owns the script classes, their strict parser and the reply placeholders. Pure: no trio and no
I/O except :func:`load_script` reading one file. Imports nothing from dsh_orchestra.
The format is documented in ``docs/scenarios.md``.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias, cast

import attrs

FailMode: TypeAlias = Literal["http-500", "http-400", "overloaded", "malformed", "stream-cut"]
FAIL_MODES: Final[tuple[FailMode, ...]] = (
    "http-500", "http-400", "overloaded", "malformed", "stream-cut")
DEFAULT_REPLY: Final = "Hello from the fake model"
DEFAULT_AFTER_SUBAGENTS: Final = "Subagents finished."

_CHILD_KEYS: Final = ("reply", "thinking", "delay", "fail", "max_tokens")
_BEHAVIOUR_KEYS: Final = (*_CHILD_KEYS, "after_subagents", "spawn", "tools", "events", "approval",
                          "question", "crash", "hang", "malformed_frames")
_TOP_KEYS: Final = ("default_reply", "crash_after_prompts", "rules")
_RULE_KEYS: Final = ("name", "match", "regex", *_BEHAVIOUR_KEYS)
_SPAWN_KEYS: Final = ("description", "prompt", *_CHILD_KEYS)
_MISSING: Final[Any] = object()


class ScriptError(ValueError):
    """A scenario script is malformed; the message names the file, the place and the key."""

    def __init__(self, source: str, where: str, key: str | None, problem: str) -> None:
        self.source = source
        self.where = where
        self.key = key
        self.problem = problem
        place = where if key is None else f"{where}: key {key!r}"
        super().__init__(f"{source}: {place}: {problem}")


@attrs.frozen(kw_only=True)
class EventsSpec:
    """Simulator only: emit ``count`` extra session events of about ``size`` bytes each."""

    count: int
    size: int = 200


@attrs.frozen(kw_only=True)
class ApprovalSpec:
    """Simulator only: ask the client to approve ``tool``; the reply may state ``{outcome}``.

    ``timeout``: seconds after which the simulator stops waiting (outcome ``cancelled``).
    """

    tool: str
    reason: str = ""
    timeout: float | None = None


@attrs.frozen(kw_only=True)
class QuestionSpec:
    """Simulator only: ask the client one question; the reply may use ``{answer}``.

    ``timeout``: seconds after which the simulator stops waiting and sends
    ``user-question.cancelled`` (the tool then fails ``ASK_TIMED_OUT``).
    """

    id: str = "q1"
    question: str
    options: tuple[str, ...] = ()
    header: str | None = None
    multi_select: bool = False
    detail: str | None = None
    timeout: float | None = None


@attrs.frozen(kw_only=True)
class ToolCallSpec:
    """One generic tool call (``read``, ``bash``, ...) issued in a turn's first step."""

    name: str
    input: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class SpawnSpec:
    """One subagent started through the ``subagent`` tool.

    ``behaviour`` is the child's inline behaviour; ``None`` means the child's prompt is matched
    against the script's rules like any prompt.
    """

    description: str
    prompt: str
    behaviour: Behaviour | None = None


@attrs.frozen(kw_only=True)
class Behaviour:
    """What the model (or the simulator) does for one prompt."""

    reply: str = DEFAULT_REPLY
    thinking: str | None = None
    delay: float = 0.0
    fail: FailMode | None = None
    max_tokens: bool = False
    after_subagents: str = DEFAULT_AFTER_SUBAGENTS
    spawn: tuple[SpawnSpec, ...] = ()
    tools: tuple[ToolCallSpec, ...] = ()
    # simulator only:
    events: EventsSpec | None = None
    approval: ApprovalSpec | None = None
    question: QuestionSpec | None = None
    crash: bool = False
    hang: bool = False
    malformed_frames: int = 0


@attrs.frozen(kw_only=True)
class Rule:
    """A behaviour chosen by a prompt; ``name`` is the given name or ``rules[<index>]``."""

    name: str
    match: str | None = None
    regex: re.Pattern[str] | None = None
    behaviour: Behaviour = Behaviour()

    def matches(self, prompt_text: str) -> bool:
        """Substring ``match``, ``re.search`` of ``regex``, or everything when neither is set."""
        if self.match is not None:
            return self.match in prompt_text
        if self.regex is not None:
            return self.regex.search(prompt_text) is not None
        return True


@attrs.frozen(kw_only=True)
class Script:
    """A parsed scenario: rules tried in order, then the default reply."""

    default_reply: str = DEFAULT_REPLY
    crash_after_prompts: int | None = None  # simulator only
    rules: tuple[Rule, ...] = ()

    def rule_for(self, prompt_text: str) -> Rule | None:
        """The first rule matching ``prompt_text``, or ``None``."""
        return next((rule for rule in self.rules if rule.matches(prompt_text)), None)

    def behaviour_for(self, prompt_text: str) -> Behaviour:
        """The first matching rule's behaviour, else a plain ``default_reply``."""
        rule = self.rule_for(prompt_text)
        return rule.behaviour if rule is not None else Behaviour(reply=self.default_reply)


DEFAULT_SCRIPT: Final = Script()


def render(template: str, *, prompt: str, outcome: str | None = None,
           answer: str | None = None) -> str:
    """Fill ``{prompt}``, and ``{outcome}`` / ``{answer}`` when given; other braces stay."""
    text = template.replace("{prompt}", prompt)
    if outcome is not None:
        text = text.replace("{outcome}", outcome)
    if answer is not None:
        text = text.replace("{answer}", answer)
    return text


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read and parse a TOML scenario file.

    Raises:
        OSError: the file cannot be read.
        ScriptError: it is not valid TOML or not a valid scenario.
    """
    source = os.fspath(path)
    with open(source, "rb") as file:
        raw = file.read()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScriptError(source, "file", None, f"is not valid TOML: {exc}") from exc
    return parse_script(data, source=source)


def parse_script(data: Mapping[str, Any], *, source: str = "<script>") -> Script:
    """Validate an already decoded TOML document and build the :class:`Script`."""
    top = _Table(data, source, "top level", _TOP_KEYS)
    default_reply = top.text("default_reply", DEFAULT_REPLY)
    crash_after = top.integer("crash_after_prompts", None, minimum=1)
    _check_placeholders(top, "default_reply", default_reply, Behaviour())
    rules: list[Rule] = []
    for index, raw in enumerate(top.tables("rules", "rules")):
        rule = _parse_rule(raw, source, index, default_reply)
        if any(other.name == rule.name for other in rules):
            raise ScriptError(source, f"rules[{index}]", "name",
                              f"repeats the rule name {rule.name!r}")
        rules.append(rule)
    return Script(default_reply=default_reply, crash_after_prompts=crash_after, rules=tuple(rules))


def _parse_rule(data: Mapping[str, Any], source: str, index: int, default_reply: str) -> Rule:
    where = f"rules[{index}]"
    name = data.get("name", where)
    if not isinstance(name, str) or not name:
        raise ScriptError(source, where, "name",
                          f"must be a non-empty string, not {_describe(name)}")
    table = _Table(data, source, where if name == where else f"{where} {name!r}", _RULE_KEYS)
    match = table.text("match", None)
    pattern = table.text("regex", None)
    if match is not None and pattern is not None:
        raise table.error("regex", "cannot be combined with 'match'; give one of them, "
                          "or neither to match every prompt")
    regex = None
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise table.error("regex", f"is not a valid regular expression: {exc}") from None
    behaviour = _parse_behaviour(table, default_reply, child=False)
    return Rule(name=name, match=match, regex=regex, behaviour=behaviour)


def _parse_behaviour(table: _Table, default_reply: str, *, child: bool) -> Behaviour:
    fail = table.text("fail", None)
    if fail is not None and fail not in FAIL_MODES:
        raise table.error("fail", f"must be one of {', '.join(FAIL_MODES)}, not {fail!r}")
    values: dict[str, Any] = dict(
        reply=table.text("reply", default_reply), thinking=table.text("thinking", None),
        delay=table.number("delay", 0.0), fail=cast("FailMode | None", fail),
        max_tokens=table.boolean("max_tokens", False))
    if not child:
        values.update(
            after_subagents=table.text("after_subagents", DEFAULT_AFTER_SUBAGENTS),
            spawn=tuple(_parse_spawn(table.sub("spawn", i, raw, _SPAWN_KEYS), default_reply)
                        for i, raw in enumerate(table.tables("spawn", "rules.spawn"))),
            tools=tuple(_parse_tool(table.sub("tools", i, raw, ("name", "input")))
                        for i, raw in enumerate(table.tables("tools", "rules.tools"))),
            events=_parse_events(table), approval=_parse_approval(table),
            question=_parse_question(table),
            crash=table.boolean("crash", False), hang=table.boolean("hang", False),
            malformed_frames=table.integer("malformed_frames", 0, minimum=0))
    behaviour = Behaviour(**values)
    _check_combinations(table, behaviour)
    return behaviour


def _check_combinations(table: _Table, b: Behaviour) -> None:
    endings = [key for key in ("fail", "max_tokens", "crash", "hang") if getattr(b, key)]
    if len(endings) > 1:
        raise table.error(endings[1], f"cannot be combined with {endings[0]!r}: "
                          "a turn ends only one way")
    calls = [key for key in ("spawn", "tools") if getattr(b, key)]
    if calls and (b.fail is not None or b.max_tokens):
        raise table.error(endings[0], f"cannot be combined with {calls[0]!r}: "
                          "a failed or truncated step issues no tool calls")
    spawns = b.spawn or any(tool.name == "subagent" for tool in b.tools)
    if table.given("after_subagents") and not spawns:
        raise table.error("after_subagents",
                          "needs 'spawn' (or a 'subagent' tool call) in the same rule")
    for key in ("reply", "after_subagents"):
        if table.given(key):
            _check_placeholders(table, key, getattr(b, key), b)


def _check_placeholders(table: _Table, key: str, text: str, b: Behaviour) -> None:
    if "{outcome}" in text and b.approval is None:
        raise table.error(key, "uses {outcome} but there is no 'approval' here to give an outcome")
    if "{answer}" in text and b.question is None:
        raise table.error(key, "uses {answer} but there is no 'question' here to answer")


def _parse_spawn(table: _Table, default_reply: str) -> SpawnSpec:
    description, prompt = table.text("description", _MISSING), table.text("prompt", _MISSING)
    inline = any(table.given(key) for key in _CHILD_KEYS)
    behaviour = _parse_behaviour(table, default_reply, child=True) if inline else None
    return SpawnSpec(description=description, prompt=prompt, behaviour=behaviour)


def _parse_tool(table: _Table) -> ToolCallSpec:
    name = table.text("name", _MISSING)
    raw = table.get("input", {})
    if not isinstance(raw, dict):
        raise table.error("input", f"must be a table of tool arguments, not {_describe(raw)}")
    _check_json(table, raw)
    return ToolCallSpec(name=name, input=raw)


def _parse_events(parent: _Table) -> EventsSpec | None:
    table = parent.child("events", ("count", "size"))
    if table is None:
        return None
    return EventsSpec(count=table.integer("count", _MISSING, minimum=0),
                      size=table.integer("size", 200, minimum=1))


def _parse_approval(parent: _Table) -> ApprovalSpec | None:
    table = parent.child("approval", ("tool", "reason", "timeout"))
    if table is None:
        return None
    return ApprovalSpec(tool=table.text("tool", _MISSING),
                        reason=table.text("reason", "", empty=True), timeout=table.timeout())


def _parse_question(parent: _Table) -> QuestionSpec | None:
    table = parent.child("question",
                         ("id", "question", "options", "header", "multi_select", "detail",
                          "timeout"))
    if table is None:
        return None
    options = table.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) and o for o in options):
        raise table.error("options",
                          f"must be an array of non-empty strings, not {_describe(options)}")
    return QuestionSpec(id=table.text("id", "q1"), question=table.text("question", _MISSING),
                        options=tuple(options), header=table.text("header", None),
                        multi_select=table.boolean("multi_select", False),
                        detail=table.text("detail", None), timeout=table.timeout())


def _check_json(table: _Table, value: Any) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _check_json(table, item)
    elif isinstance(value, list):
        for item in value:
            _check_json(table, item)
    elif isinstance(value, float) and not math.isfinite(value):
        raise table.error("input", f"holds {value!r}, which JSON cannot carry")
    elif not isinstance(value, (str, int, float, bool)):
        raise table.error("input", f"holds {_describe(value)}, which JSON cannot carry; "
                          "quote it as a string")


_TOML_TYPES: Final = {str: "string", bool: "boolean", int: "integer", float: "float",
                      dict: "table", list: "array"}


def _describe(value: Any) -> str:
    shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{shown} ({_TOML_TYPES.get(type(value), type(value).__name__)})"


class _Table:
    """One TOML table being read: rejects unknown keys up front, then reads typed values."""

    def __init__(self, data: Mapping[str, Any], source: str, where: str,
                 allowed: tuple[str, ...]) -> None:
        self.source, self.where, self._data = source, where, data
        for key in data:
            if key not in allowed:
                raise self.error(key, "is not a known key here; expected one of: "
                                 + ", ".join(allowed))

    def error(self, key: str | None, problem: str) -> ScriptError:
        return ScriptError(self.source, self.where, key, problem)

    def given(self, key: str) -> bool:
        return key in self._data

    def get(self, key: str, default: Any) -> Any:
        if key in self._data:
            return self._data[key]
        if default is _MISSING:
            raise self.error(key, "is required")
        return default

    def text(self, key: str, default: Any, *, empty: bool = False) -> Any:
        value = self.get(key, default)
        if key in self._data and (not isinstance(value, str) or not (value or empty)):
            kind = "string" if empty else "non-empty string"
            raise self.error(key, f"must be a {kind}, not {_describe(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, not {_describe(value)}")
        return value

    def integer(self, key: str, default: Any, *, minimum: int) -> Any:
        value = self.get(key, default)
        if key in self._data and (type(value) is not int or value < minimum):
            raise self.error(key, f"must be an integer >= {minimum}, not {_describe(value)}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.get(key, default)
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise self.error(key,
                             f"must be a non-negative number of seconds, not {_describe(value)}")
        return float(value)

    def timeout(self) -> float | None:
        """The optional ``timeout`` key: a positive, finite number of seconds."""
        value = self.get("timeout", None)
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value) or value <= 0):
            raise self.error("timeout", f"must be a positive number of seconds, not {_describe(value)}")
        return None if value is None else float(value)

    def tables(self, key: str, section: str) -> list[Mapping[str, Any]]:
        value = self.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self.error(key, f"must be an array of tables ([[{section}]] sections), "
                             f"not {_describe(value)}")
        return value

    def sub(self, key: str, index: int, data: Mapping[str, Any],
            allowed: tuple[str, ...]) -> _Table:
        return _Table(data, self.source, f"{self.where} {key}[{index}]", allowed)

    def child(self, key: str, allowed: tuple[str, ...]) -> _Table | None:
        value = self.get(key, None)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, f"must be a table, not {_describe(value)}")
        return _Table(value, self.source, f"{self.where} {key}", allowed)

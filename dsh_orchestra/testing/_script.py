"""Declarative scenario scripts: one TOML file drives the simulated runtime and the fake model.

Owns the script classes, their strict parser (cattrs structuring of each table, a problem named
by file, table and key) and the reply placeholders. Pure: no trio and no
I/O except :func:`load_script` reading one file. Imports nothing from dsh_orchestra.
The format is documented in ``docs/scenarios.md``.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any, Callable, Final, Literal, TypeAlias, TypeVar, cast

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, override

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
T = TypeVar("T")


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
    """Validate an already decoded TOML document and build the :class:`Script`.

    Each table is structured by cattrs (``_CONVERTER``, into the script classes themselves); a
    problem becomes a ScriptError naming the file, the table and the key (the table's first).
    """
    place = _Place(source, "top level", data)
    script = _structure(Script, place, _TOP_KEYS)
    _check_placeholders(place, "default_reply", script.default_reply, Behaviour())
    rules: list[Rule] = []
    for index, raw in enumerate(script.rules):
        rule = _parse_rule(cast(Mapping[str, Any], raw), source, index, script.default_reply)
        if any(other.name == rule.name for other in rules):
            raise ScriptError(source, f"rules[{index}]", "name",
                              f"repeats the rule name {rule.name!r}")
        rules.append(rule)
    return attrs.evolve(script, rules=tuple(rules))


def _parse_rule(data: Mapping[str, Any], source: str, index: int, default_reply: str) -> Rule:
    where = f"rules[{index}]"
    name = data.get("name", where)
    if not isinstance(name, str) or not name:
        raise ScriptError(source, where, "name",
                          f"must be a non-empty string, not {_describe(name)}")
    place = _Place(source, where if name == where else f"{where} {name!r}", data)
    keys = _structure(_RuleKeys, place, _RULE_KEYS)
    if keys.match is not None and keys.regex is not None:
        raise place.error("regex", "cannot be combined with 'match'; give one of them, "
                          "or neither to match every prompt")
    regex = None
    if keys.regex is not None:
        try:
            regex = re.compile(keys.regex)
        except re.error as exc:
            raise place.error("regex", f"is not a valid regular expression: {exc}") from None
    raw = _structure(Behaviour, place, _RULE_KEYS)
    behaviour = attrs.evolve(
        raw, reply=raw.reply if place.given("reply") else default_reply,
        spawn=tuple(_parse_spawn(place.sub("spawn", i, table), default_reply) for i, table in enumerate(cast(Any, raw.spawn))),
        tools=tuple(_parse_tool(place.sub("tools", i, table)) for i, table in enumerate(cast(Any, raw.tools))),
        events=_child(EventsSpec, place, "events", ("count", "size")),
        approval=_child(ApprovalSpec, place, "approval", ("tool", "reason", "timeout")),
        question=_child(QuestionSpec, place, "question", _QUESTION_KEYS),
    )
    _check_combinations(place, behaviour)
    return Rule(name=name, match=keys.match, regex=regex, behaviour=behaviour)


def _check_combinations(table: _Place, b: Behaviour) -> None:
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


def _check_placeholders(table: _Place, key: str, text: str, b: Behaviour) -> None:
    if "{outcome}" in text and b.approval is None:
        raise table.error(key, "uses {outcome} but there is no 'approval' here to give an outcome")
    if "{answer}" in text and b.question is None:
        raise table.error(key, "uses {answer} but there is no 'question' here to answer")


def _parse_spawn(place: _Place, default_reply: str) -> SpawnSpec:
    keys = _structure(_SpawnKeys, place, _SPAWN_KEYS)
    behaviour = None
    if any(place.given(key) for key in _CHILD_KEYS):  # an inline behaviour for the child
        child = _structure(Behaviour, place, _SPAWN_KEYS)
        behaviour = attrs.evolve(child, reply=child.reply if place.given("reply") else default_reply)
        _check_combinations(place, behaviour)
    return SpawnSpec(description=keys.description, prompt=keys.prompt, behaviour=behaviour)


def _parse_tool(place: _Place) -> ToolCallSpec:
    tool = _structure(ToolCallSpec, place, ("name", "input"))
    _check_json(place, tool.input)
    return tool


def _child(cls: type[T], parent: _Place, key: str, allowed: tuple[str, ...]) -> T | None:
    """The optional sub-table ``key`` of ``parent`` (already known to be a table) as ``cls``."""
    data = parent.data.get(key)
    if data is None:
        return None
    return _structure(cls, _Place(parent.source, f"{parent.where} {key}", data), allowed)


def _check_json(table: _Place, value: Any) -> None:
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


@attrs.frozen
class _Place:
    """A table being read: where it is in the file (for messages), and what it holds."""

    source: str
    where: str
    data: Mapping[str, Any]

    def error(self, key: str | None, problem: str) -> ScriptError:
        return ScriptError(self.source, self.where, key, problem)

    def given(self, key: str) -> bool:
        return key in self.data

    def sub(self, key: str, index: int, data: Mapping[str, Any]) -> _Place:
        return _Place(self.source, f"{self.where} {key}[{index}]", data)


# ---- the value checks: cattrs structure hooks that say what is wrong ----------------------

def _text(*, empty: bool = False) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, str) or not (value or empty):
            raise ValueError(f"must be a {'string' if empty else 'non-empty string'}, not {_describe(value)}")
        return value

    return hook


def _fail(value: Any, _: Any) -> Any:
    value = _text()(value, _)
    if value not in FAIL_MODES:
        raise ValueError(f"must be one of {', '.join(FAIL_MODES)}, not {value!r}")
    return value


def _boolean(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {_describe(value)}")
    return value


def _integer(minimum: int) -> Callable[[Any, Any], int]:
    def hook(value: Any, _: Any) -> int:
        if type(value) is not int or value < minimum:
            raise ValueError(f"must be an integer >= {minimum}, not {_describe(value)}")
        return value

    return hook


def _delay(value: Any, _: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a non-negative number of seconds, not {_describe(value)}")
    return float(value)


def _timeout(value: Any, _: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive number of seconds, not {_describe(value)}")
    return float(value)


def _tables(section: str) -> Callable[[Any, Any], list[Any]]:
    def hook(value: Any, _: Any) -> list[Any]:
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise ValueError(f"must be an array of tables ([[{section}]] sections), not {_describe(value)}")
        return value

    return hook


def _table(value: Any, _: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"must be a table, not {_describe(value)}")
    # read as its own table by _child


def _options(value: Any, _: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(o, str) and o for o in value):
        raise ValueError(f"must be an array of non-empty strings, not {_describe(value)}")
    return tuple(value)


def _arguments(value: Any, _: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a table of tool arguments, not {_describe(value)}")
    return value


@attrs.frozen(kw_only=True)
class _RuleKeys:
    """A rule's own keys (the rest of its table is a Behaviour)."""

    name: Any = None  # checked first, by _parse_rule
    match: str | None = None
    regex: str | None = None


@attrs.frozen(kw_only=True)
class _SpawnKeys:
    """A spawn's own keys (the rest of its table is the child's Behaviour)."""

    description: str
    prompt: str


_QUESTION_KEYS: Final = ("id", "question", "options", "header", "multi_select", "detail", "timeout")
_HOOKS: Final[dict[type, dict[str, Callable[[Any, Any], Any]]]] = {
    Script: dict(default_reply=_text(), crash_after_prompts=_integer(1), rules=_tables("rules")),
    _RuleKeys: dict(name=lambda value, _: value, match=_text(), regex=_text()),
    Behaviour: dict(
        reply=_text(), thinking=_text(), delay=_delay, fail=_fail, max_tokens=_boolean, after_subagents=_text(),
        spawn=_tables("rules.spawn"), tools=_tables("rules.tools"), events=_table, approval=_table,
        question=_table, crash=_boolean, hang=_boolean, malformed_frames=_integer(0),
    ),
    _SpawnKeys: dict(description=_text(), prompt=_text()),
    ToolCallSpec: dict(name=_text(), input=_arguments),
    EventsSpec: dict(count=_integer(0), size=_integer(1)),
    ApprovalSpec: dict(tool=_text(), reason=_text(empty=True), timeout=_timeout),
    QuestionSpec: dict(id=_text(), question=_text(), options=_options, header=_text(), multi_select=_boolean,
                       detail=_text(), timeout=_timeout),
}
_CONVERTER: Final = cattrs.Converter(detailed_validation=True)
for _cls, _hooks in _HOOKS.items():
    _overrides: dict[str, Any] = {name: override(struct_hook=hook) for name, hook in _hooks.items()}
    _CONVERTER.register_structure_hook(_cls, make_dict_structure_fn(_cls, _CONVERTER, **_overrides))


def _structure(cls: type[T], place: _Place, allowed: tuple[str, ...]) -> T:
    """The keys of ``place`` that are ``cls``'s fields, as ``cls``; the table's first problem
    (an unknown key, then the fields in order) as a ScriptError."""
    unknown = next((key for key in place.data if key not in allowed), None)
    if unknown is not None:
        raise place.error(unknown, "is not a known key here; expected one of: " + ", ".join(allowed))
    names = [field.name for field in attrs.fields(cast(Any, cls))]
    try:
        return _CONVERTER.structure({k: v for k, v in place.data.items() if k in names}, cls)
    except cattrs.ClassValidationError as exc:
        error, note = min(exc.group_exceptions()[0], key=lambda pair: names.index(pair[1].name))
        raise place.error(note.name, "is required" if isinstance(error, KeyError) else str(error)) from None

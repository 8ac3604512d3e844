"""The scenario script format: parsing, strict validation, rule matching and placeholders."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.testing._script import (
    DEFAULT_AFTER_SUBAGENTS,
    DEFAULT_REPLY,
    DEFAULT_SCRIPT,
    ApprovalSpec,
    Behaviour,
    EventsSpec,
    QuestionSpec,
    Rule,
    Script,
    ScriptError,
    SpawnSpec,
    ToolCallSpec,
    load_script,
    parse_script,
    render,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"

FULL = """
default_reply = "Nothing matched"
crash_after_prompts = 3

[[rules]]
name = "spawn-reviewers"
match = "SPAWN"
reply = "Spawned the reviewers for {prompt}."
thinking = "two files"
delay = 0.2
after_subagents = "All reviewers finished."
[[rules.spawn]]
description = "review a.py"
prompt = "CHILD: review a.py"
reply = "a.py looks fine"
[[rules.spawn]]
description = "review b.py"
prompt = "CHILD: review b.py"
[[rules.tools]]
name = "read"
input = { file_path = "hello.txt", limit = 10 }

[[rules]]
regex = "^CHILD:"
reply = "child default"
max_tokens = true

[[rules]]
name = "sim"
match = "SIM"
reply = "approval {outcome}, answer {answer}"
events = { count = 10, size = 800 }
approval = { tool = "bash", reason = "needs network" }
question = { id = "q7", question = "Which one?", options = ["a", "b"], header = "Pick", \
  multi_select = true, detail = "more" }
hang = true
malformed_frames = 2

[[rules]]
name = "broken"
match = "BROKEN"
fail = "stream-cut"
"""


def parse(text: str) -> Script:
    return parse_script(tomllib.loads(text), source="scenario.toml")


def test_full_script_parses_into_the_classes() -> None:
    """Every key lands in its attribute, with defaults filled in."""
    script = parse(FULL)
    assert script.default_reply == "Nothing matched"
    assert script.crash_after_prompts == 3
    spawn, child, sim, broken = script.rules
    assert spawn == Rule(
        name="spawn-reviewers",
        match="SPAWN",
        behaviour=Behaviour(
            reply="Spawned the reviewers for {prompt}.",
            thinking="two files",
            delay=0.2,
            after_subagents="All reviewers finished.",
            spawn=(
                SpawnSpec(
                    description="review a.py",
                    prompt="CHILD: review a.py",
                    behaviour=Behaviour(reply="a.py looks fine"),
                ),
                SpawnSpec(description="review b.py", prompt="CHILD: review b.py"),
            ),
            tools=(ToolCallSpec(name="read", input={"file_path": "hello.txt", "limit": 10}),),
        ),
    )
    assert child.name == "rules[1]" and child.regex == re.compile("^CHILD:") and child.match is None
    assert child.behaviour == Behaviour(reply="child default", max_tokens=True)
    assert sim.behaviour == Behaviour(
        reply="approval {outcome}, answer {answer}",
        events=EventsSpec(count=10, size=800),
        approval=ApprovalSpec(tool="bash", reason="needs network"),
        question=QuestionSpec(
            id="q7",
            question="Which one?",
            options=("a", "b"),
            header="Pick",
            multi_select=True,
            detail="more",
        ),
        hang=True,
        malformed_frames=2,
    )
    assert broken.behaviour == Behaviour(reply="Nothing matched", fail="stream-cut")


def test_timeouts_of_approval_and_question() -> None:
    """``timeout`` (simulator only) is a positive number of seconds, read as a float."""
    rule = parse(
        '[[rules]]\napproval = { tool = "bash", timeout = 2 }\n'
        'question = { question = "Q?", timeout = 0.5 }\n'
    ).rules[0]
    assert rule.behaviour.approval == ApprovalSpec(tool="bash", timeout=2.0)
    assert rule.behaviour.question == QuestionSpec(question="Q?", timeout=0.5)
    assert isinstance(rule.behaviour.approval.timeout, float)


def test_defaults() -> None:
    """An empty document is the default script; optional sub-keys have defaults."""
    assert parse("") == DEFAULT_SCRIPT == Script()
    assert DEFAULT_SCRIPT.behaviour_for("anything") == Behaviour(reply=DEFAULT_REPLY)
    rule = parse(
        '[[rules]]\nevents = { count = 1 }\napproval = { tool = "bash" }\n'
        'question = { question = "Q?" }\n'
        '[[rules.spawn]]\ndescription = "d"\nprompt = "p"\ndelay = 1\n'
    ).rules[0]
    assert rule.behaviour.events == EventsSpec(count=1, size=200)
    assert rule.behaviour.approval == ApprovalSpec(tool="bash", reason="")
    assert rule.behaviour.question == QuestionSpec(id="q1", question="Q?")
    assert rule.behaviour.approval.timeout is None and rule.behaviour.question.timeout is None
    assert rule.behaviour.after_subagents == DEFAULT_AFTER_SUBAGENTS
    child = rule.behaviour.spawn[0].behaviour
    assert child == Behaviour(delay=1.0) and isinstance(child.delay, float)


def test_behaviour_for_takes_the_first_matching_rule() -> None:
    """Rules are tried in order: substring, regex search, catch-all; then the default reply."""
    script = parse(
        'default_reply = "dflt"\n'
        '[[rules]]\nmatch = "SPAWN"\nreply = "one"\n'
        '[[rules]]\nregex = "b+c$"\nreply = "two"\n'
        '[[rules]]\nmatch = "SPAWN"\nreply = "never"\n'
    )
    assert script.behaviour_for("please SPAWN abbc").reply == "one"
    assert script.behaviour_for("xabbbc").reply == "two"
    assert script.behaviour_for("abcx").reply == "dflt"
    assert script.rule_for("abcx") is None
    catch_all = parse('[[rules]]\nmatch = "A"\nreply = "a"\n[[rules]]\nreply = "all"\n')
    assert catch_all.behaviour_for("zzz").reply == "all"
    assert catch_all.rule_for("zzz") == catch_all.rules[1]


def test_render_fills_only_known_placeholders() -> None:
    """{prompt} always; {outcome}/{answer} only when given; other braces stay literal."""
    text = "{prompt}|{outcome}|{answer}|{other}|{}"
    assert render(text, prompt="P") == "P|{outcome}|{answer}|{other}|{}"
    assert (
        render(text, prompt="P", outcome="allowed-once", answer="a")
        == "P|allowed-once|a|{other}|{}"
    )


def test_load_script_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('default_reply = "from file"\n', encoding="utf-8")
    assert load_script(path) == Script(default_reply="from file")
    assert load_script(str(path)) == Script(default_reply="from file")


def test_load_script_names_the_file_on_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("rules = [\n", encoding="utf-8")
    with pytest.raises(ScriptError, match=r"broken\.toml: file: is not valid TOML") as info:
        load_script(path)
    assert info.value.source == str(path)
    with pytest.raises(OSError):
        load_script(tmp_path / "missing.toml")


BAD: list[tuple[str, str]] = [
    # top level
    (
        'defualt_reply = "x"',
        "top level: key 'defualt_reply': is not a known key here; expected one of: default_reply",
    ),
    (
        "default_reply = 3",
        "top level: key 'default_reply': must be a non-empty string, not 3 (integer)",
    ),
    ('default_reply = ""', "top level: key 'default_reply': must be a non-empty string"),
    (
        'default_reply = "{outcome}"',
        "top level: key 'default_reply': uses {outcome} but there is no 'approval'",
    ),
    (
        "crash_after_prompts = 0",
        "top level: key 'crash_after_prompts': must be an integer >= 1, not 0",
    ),
    (
        "crash_after_prompts = true",
        "key 'crash_after_prompts': must be an integer >= 1, not true (boolean)",
    ),
    (
        "crash_after_prompts = 1.5",
        "key 'crash_after_prompts': must be an integer >= 1, not 1.5 (float)",
    ),
    (
        "rules = 3",
        "top level: key 'rules': must be an array of tables ([[rules]] sections), not 3 (integer)",
    ),
    ("rules = [1]", "key 'rules': must be an array of tables"),
    ("[rules]", "key 'rules': must be an array of tables"),
    # rule keys
    (
        "[[rules]]\ndealy = 1",
        "rules[0]: key 'dealy': is not a known key here; expected one of: name, match, regex",
    ),
    ('[[rules]]\nname = "x"\ndealy = 1', "rules[0] 'x': key 'dealy': is not a known key here"),
    ("[[rules]]\nname = 1", "rules[0]: key 'name': must be a non-empty string, not 1 (integer)"),
    ('[[rules]]\nname = ""', "rules[0]: key 'name': must be a non-empty string"),
    (
        '[[rules]]\nname = "a"\n[[rules]]\nname = "a"',
        "rules[1]: key 'name': repeats the rule name 'a'",
    ),
    ('[[rules]]\nmatch = ""', "rules[0]: key 'match': must be a non-empty string"),
    ("[[rules]]\nmatch = 5", "rules[0]: key 'match': must be a non-empty string, not 5 (integer)"),
    (
        '[[rules]]\nmatch = "a"\nregex = "b"',
        "rules[0]: key 'regex': cannot be combined with 'match'",
    ),
    ('[[rules]]\nregex = "("', "rules[0]: key 'regex': is not a valid regular expression"),
    ('[[rules]]\nreply = ""', "rules[0]: key 'reply': must be a non-empty string"),
    (
        "[[rules]]\nreply = ['a']",
        "rules[0]: key 'reply': must be a non-empty string, not ['a'] (array)",
    ),
    (
        "[[rules]]\nthinking = true",
        "rules[0]: key 'thinking': must be a non-empty string, not true (boolean)",
    ),
    (
        "[[rules]]\ndelay = -1",
        "rules[0]: key 'delay': must be a non-negative number of seconds, not -1 (integer)",
    ),
    (
        "[[rules]]\ndelay = -0.5",
        "key 'delay': must be a non-negative number of seconds, not -0.5 (float)",
    ),
    (
        "[[rules]]\ndelay = true",
        "key 'delay': must be a non-negative number of seconds, not true (boolean)",
    ),
    (
        '[[rules]]\ndelay = "1"',
        "key 'delay': must be a non-negative number of seconds, not '1' (string)",
    ),
    (
        "[[rules]]\ndelay = inf",
        "key 'delay': must be a non-negative number of seconds, not inf (float)",
    ),
    (
        "[[rules]]\ndelay = nan",
        "key 'delay': must be a non-negative number of seconds, not nan (float)",
    ),
    (
        '[[rules]]\nfail = "http-501"',
        "rules[0]: key 'fail': must be one of http-500, http-400, overloaded, malformed, "
        "stream-cut, not 'http-501'",
    ),
    (
        "[[rules]]\nfail = 500",
        "rules[0]: key 'fail': must be a non-empty string, not 500 (integer)",
    ),
    (
        "[[rules]]\nmax_tokens = 1",
        "rules[0]: key 'max_tokens': must be true or false, not 1 (integer)",
    ),
    (
        '[[rules]]\ncrash = "yes"',
        "rules[0]: key 'crash': must be true or false, not 'yes' (string)",
    ),
    ("[[rules]]\nhang = 0", "rules[0]: key 'hang': must be true or false, not 0 (integer)"),
    (
        "[[rules]]\nmalformed_frames = -1",
        "rules[0]: key 'malformed_frames': must be an integer >= 0, not -1",
    ),
    (
        "[[rules]]\nmalformed_frames = false",
        "key 'malformed_frames': must be an integer >= 0, not false (boolean)",
    ),
    (
        '[[rules]]\nafter_subagents = ""',
        "rules[0]: key 'after_subagents': must be a non-empty string",
    ),
    # combinations
    (
        '[[rules]]\nfail = "http-400"\nmax_tokens = true',
        "rules[0]: key 'max_tokens': cannot be combined with 'fail'",
    ),
    (
        "[[rules]]\ncrash = true\nhang = true",
        "rules[0]: key 'hang': cannot be combined with 'crash'",
    ),
    (
        '[[rules]]\nmax_tokens = true\n[[rules.tools]]\nname = "read"',
        "rules[0]: key 'max_tokens': cannot be combined with 'tools': "
        "a failed or truncated step issues no tool calls",
    ),
    (
        '[[rules]]\nfail = "malformed"\n[[rules.spawn]]\ndescription = "d"\nprompt = "p"',
        "rules[0]: key 'fail': cannot be combined with 'spawn'",
    ),
    (
        '[[rules]]\nafter_subagents = "x"',
        "rules[0]: key 'after_subagents': needs 'spawn' (or a 'subagent' tool call)",
    ),
    (
        '[[rules]]\nreply = "{outcome}"',
        "rules[0]: key 'reply': uses {outcome} but there is no 'approval' here",
    ),
    (
        '[[rules]]\nreply = "{answer}"',
        "rules[0]: key 'reply': uses {answer} but there is no 'question' here",
    ),
    (
        '[[rules]]\nreply = "x"\nafter_subagents = "{answer}"\n'
        '[[rules.spawn]]\ndescription = "d"\nprompt = "p"',
        "rules[0]: key 'after_subagents': uses {answer}",
    ),
    # spawn
    (
        "[[rules]]\nspawn = 1",
        "rules[0]: key 'spawn': must be an array of tables ([[rules.spawn]] sections), not 1",
    ),
    (
        '[[rules]]\nname = "r"\n[[rules.spawn]]\nprompt = "p"',
        "rules[0] 'r' spawn[0]: key 'description': is required",
    ),
    (
        '[[rules]]\n[[rules.spawn]]\ndescription = "d"',
        "rules[0] spawn[0]: key 'prompt': is required",
    ),
    (
        '[[rules]]\n[[rules.spawn]]\ndescription = "d"\nprompt = ""',
        "rules[0] spawn[0]: key 'prompt': must be a non-empty",
    ),
    (
        '[[rules]]\n[[rules.spawn]]\ndescription = "d"\nprompt = "p"\ncrash = true',
        "rules[0] spawn[0]: key 'crash': is not a known key here; "
        "expected one of: description, prompt, reply, thinking, "
        "delay, fail, max_tokens",
    ),
    (
        '[[rules]]\n[[rules.spawn]]\ndescription = "d"\nprompt = "p"\ndelay = -2',
        "rules[0] spawn[0]: key 'delay': must be a non-negative number",
    ),
    (
        '[[rules]]\n[[rules.spawn]]\ndescription = "d"\nprompt = "p"\nreply = "{outcome}"',
        "rules[0] spawn[0]: key 'reply': uses {outcome}",
    ),
    (
        '[[rules]]\n[[rules.spawn]]\ndescription = "d"\nprompt = "p"\n'
        'fail = "overloaded"\nmax_tokens = true',
        "rules[0] spawn[0]: key 'max_tokens': cannot be combined with 'fail'",
    ),
    # tools
    ("[[rules]]\n[[rules.tools]]\ninput = {}", "rules[0] tools[0]: key 'name': is required"),
    (
        '[[rules]]\n[[rules.tools]]\nname = "read"\nargs = {}',
        "rules[0] tools[0]: key 'args': is not a known key here; expected one of: name, input",
    ),
    (
        '[[rules]]\n[[rules.tools]]\nname = "read"\ninput = "x"',
        "rules[0] tools[0]: key 'input': must be a table of tool arguments, not 'x' (string)",
    ),
    (
        '[[rules]]\n[[rules.tools]]\nname = "read"\ninput = { when = 1979-05-27 }',
        "rules[0] tools[0]: key 'input': holds datetime.date(1979, 5, 27) (date), "
        "which JSON cannot carry",
    ),
    (
        '[[rules]]\n[[rules.tools]]\nname = "read"\ninput = { a = [nan] }',
        "rules[0] tools[0]: key 'input': holds nan",
    ),
    # simulator-only tables
    ("[[rules]]\nevents = 3", "rules[0]: key 'events': must be a table, not 3 (integer)"),
    ("[[rules]]\nevents = {}", "rules[0] events: key 'count': is required"),
    (
        "[[rules]]\nevents = { count = -1 }",
        "rules[0] events: key 'count': must be an integer >= 0, not -1",
    ),
    (
        "[[rules]]\nevents = { count = 1, size = 0 }",
        "rules[0] events: key 'size': must be an integer >= 1, not 0",
    ),
    (
        "[[rules]]\nevents = { count = 1, bytes = 3 }",
        "rules[0] events: key 'bytes': is not a known key here",
    ),
    ("[[rules]]\napproval = {}", "rules[0] approval: key 'tool': is required"),
    (
        '[[rules]]\napproval = { tool = "bash", reason = 1 }',
        "rules[0] approval: key 'reason': must be a string, not 1",
    ),
    ('[[rules]]\nquestion = { id = "q" }', "rules[0] question: key 'question': is required"),
    (
        '[[rules]]\nquestion = { question = "q", options = "a" }',
        "rules[0] question: key 'options': must be an array of non-empty strings, not 'a' (string)",
    ),
    (
        '[[rules]]\nquestion = { question = "q", options = [""] }',
        "rules[0] question: key 'options': must be an array",
    ),
    (
        '[[rules]]\nquestion = { question = "q", multi_select = "no" }',
        "rules[0] question: key 'multi_select': must be true or false",
    ),
    (
        '[[rules]]\nquestion = { question = "q", header = 2 }',
        "rules[0] question: key 'header': must be a non-empty string",
    ),
    (
        '[[rules]]\nquestion = { question = "q", detail = "" }',
        "rules[0] question: key 'detail': must be a non-empty",
    ),
    (
        '[[rules]]\nquestion = { question = "q", kind = "x" }',
        "rules[0] question: key 'kind': is not a known key here",
    ),
    (
        '[[rules]]\napproval = { tool = "bash", timeout = 0 }',
        "rules[0] approval: key 'timeout': must be a positive number of seconds, not 0 (integer)",
    ),
    (
        '[[rules]]\nquestion = { question = "q", timeout = "1" }',
        "rules[0] question: key 'timeout': must be a positive number of seconds, not '1' (string)",
    ),
    (
        '[[rules]]\nquestion = { question = "q", timeout = inf }',
        "rules[0] question: key 'timeout': must be a positive number of seconds, not inf (float)",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[message[:60] for _, message in BAD])
def test_invalid_scripts_are_rejected_with_a_clear_message(text: str, message: str) -> None:
    """Each rule of the format has an error naming the file, the place and the key."""
    with pytest.raises(ScriptError) as info:
        parse(text)
    assert str(info.value).startswith("scenario.toml: ")
    assert message in str(info.value)


def test_script_error_keeps_its_parts() -> None:
    with pytest.raises(ScriptError) as info:
        parse('[[rules]]\nname = "r"\ndelay = -1')
    error = info.value
    assert (error.source, error.where, error.key) == ("scenario.toml", "rules[0] 'r'", "delay")
    assert isinstance(error, ValueError)


def test_parse_script_default_source_name() -> None:
    with pytest.raises(ScriptError, match=r"^<script>: top level: key 'x'"):
        parse_script({"x": 1})


def test_false_flags_do_not_count_as_a_second_ending() -> None:
    """``max_tokens = false`` next to ``fail`` is allowed: it is the default."""
    rule = parse('[[rules]]\nmax_tokens = false\nfail = "malformed"\ncrash = false').rules[0]
    assert rule.behaviour.fail == "malformed" and not rule.behaviour.max_tokens


def test_after_subagents_with_a_subagent_tool_call() -> None:
    """A generic ``subagent`` tool call counts as a spawn for ``after_subagents``."""
    text = (
        '[[rules]]\nafter_subagents = "done"\n[[rules.tools]]\nname = "subagent"\n'
        'input = { description = "d", prompt = "p" }'
    )
    assert parse(text).rules[0].behaviour.after_subagents == "done"


def test_every_toml_example_in_the_docs_parses() -> None:
    """docs/scenarios.md stays true: each ```toml block parses (unless marked invalid)."""
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 3
    for block in blocks:
        if block.startswith("# invalid"):
            with pytest.raises(ScriptError):
                parse(block)
        else:
            parse(block)


def test_structures_are_frozen() -> None:
    import attrs

    behaviour = Behaviour()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        behaviour.reply = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Behaviour("positional")  # type: ignore[call-arg]
    value: Any = Rule(name="r")
    assert value.matches("anything")

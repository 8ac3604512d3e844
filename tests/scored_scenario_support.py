"""The scored batch scenario shared by tests/eval/test_batch_eval.py and the golden batch
(tests/results/golden_support.py): one scripted model (answers, a judge, an HTTP 400, a spawn),
one price table, and the in-process simulator spec on them."""

from __future__ import annotations

import tomllib

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import parse_script
from dsh_orchestra.testing._simulator import open_simulator_stream

SCRIPT = r'''
default_reply = "I do not know"

[[rules]]
name = "judge-yes"
regex = "\\[Response\\]\\n<<<RESPONSE-[0-9a-f]+>>>\\nParis"
reply = '{"grade": "correct", "explanation": "right"}'

[[rules]]
name = "judge-no"
match = "You are grading"
reply = '{"grade": "incorrect", "explanation": "wrong"}'

[[rules]]
name = "paris"
match = "France"
reply = "Paris"

[[rules]]
name = "number"
match = "6 x 7"
reply = "It is 42."

[[rules]]
name = "broken"
match = "E400"
fail = "http-400"

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned 42"
after_subagents = "children done"

[[rules.spawn]]
description = "child task"
prompt = "CHILD: review"
reply = "child says hi"
'''

PRICES = '["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 2.0\noutput_per_mtok = 10.0\n'


def scenario_spec(source: str) -> RuntimeSpec:
    """The in-process simulator running SCRIPT (``source`` names it in script errors)."""
    script = parse_script(tomllib.loads(SCRIPT), source=source)
    return RuntimeSpec(connect=lambda: open_simulator_stream(script), name="sim")

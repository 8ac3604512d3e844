"""Usage summed over a turn's session tree (subagents included), prices and cost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from dsh_orchestra.eval import Price, PricesError, Usage, events_usage, load_prices, step_usage, turn_usage
from dsh_orchestra.protocol import SESSION_EVENT
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script, parse_script
from dsh_orchestra.testing._simulator import open_simulator_stream

SPAWN_SCRIPT = """
default_reply = "plain"

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children done"

[[rules.spawn]]
description = "first child"
prompt = "CHILD: one"
reply = "child one done"

[[rules.spawn]]
description = "second child"
prompt = "CHILD: two"
reply = "child two done"
"""


def script() -> Script:
    import tomllib

    return parse_script(tomllib.loads(SPAWN_SCRIPT), source="<test>")


def assistant(usage: dict[str, int] | None) -> dict[str, object]:
    data: dict[str, object] = {"turn": 1, "step": 1, "message": {}}
    if usage is not None:
        data["usage"] = usage
    return {"type": "assistant/message", "seq": 1, "time": 0, "data": data}


def test_step_usage_forms() -> None:
    assert step_usage(assistant({"inputTokens": 10, "outputTokens": 5})) == Usage(10, 5, 15)
    assert step_usage(assistant({"inputTokens": 10, "outputTokens": 5, "totalTokens": 18})) == Usage(10, 5, 18)
    assert step_usage(assistant(None)) == Usage()
    assert step_usage(assistant({"inputTokens": "x", "outputTokens": -3})) == Usage()
    other = {"type": "tool/call", "data": {"usage": {"inputTokens": 99}}}
    assert events_usage([assistant({"inputTokens": 1, "outputTokens": 2}), other]) == Usage(1, 2, 3)
    assert Usage(1, 2, 3) + Usage(10, 20, 30) == Usage(11, 22, 33)
    assert Usage.from_json({"input_tokens": 4, "output_tokens": 1, "total_tokens": 5}) == Usage(4, 1, 5)
    assert Usage.from_json(None) == Usage()


async def test_usage_includes_subagents_on_the_simulator() -> None:
    spec = RuntimeSpec(connect=lambda: open_simulator_stream(script()), name="sim")
    with trio.fail_after(20):
        async with open_runtime(spec) as runtime:
            turn = await runtime.session("u1").run("SPAWN two")
    root = events_usage(turn.events)
    children = events_usage(
        n.params["event"] for n in turn.notifications if n.method == SESSION_EVENT and n.params.get("sessionId") != "u1"
    )
    assert len(turn.subagents) == 2 and root.total_tokens > 0 and children.total_tokens > 0
    assert turn_usage(turn) == root + children


@pytest.fixture
def model_script() -> Script:
    return script()


@pytest.mark.integration
async def test_usage_includes_subagents_on_the_real_runtime(
    fake_model: FakeModelServer, dsh_spec: Callable[..., RuntimeSpec]
) -> None:
    """Every model request the scripted model answered is one step: 10 input and 5 output tokens."""
    with trio.fail_after(240):  # a dsh start took 37-60+ s under disk contention
        async with open_runtime(dsh_spec()) as runtime:
            turn = await runtime.session().run("SPAWN two")
    assert turn.final_response == "children done" and len(turn.subagents) == 2
    usage = turn_usage(turn)
    steps = len(fake_model.requests)
    child_steps = sum(
        1 for n in turn.notifications
        if n.method == SESSION_EVENT and n.params["event"].get("type") == "assistant/message"
    )
    assert child_steps >= 2  # each child made at least one model step
    assert usage.input_tokens == 10 * steps and usage.output_tokens == 5 * steps
    assert usage.total_tokens >= usage.input_tokens + usage.output_tokens
    assert turn_usage(turn).total_tokens > events_usage(turn.events).total_tokens  # the children count


@pytest.mark.integration
async def test_a_batch_line_counts_the_whole_tree_on_the_real_runtime(
    tmp_path: Path, fake_model: FakeModelServer, dsh_spec: Callable[..., RuntimeSpec]
) -> None:
    """A result line's usage is 10 and 5 tokens times the model requests its tree made."""
    from dsh_orchestra.batch import BatchOptions, run_batch

    from eval_support import lines_of, write_jsonl

    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": "tree", "prompt": "SPAWN two", "target": "children done"}])
    out = tmp_path / "results.jsonl"
    with trio.fail_after(120):
        summary = await run_batch(dataset, out, dsh_spec(), BatchOptions(progress="none", timeout=90, scorers=["exact"]))
    [line] = lines_of(out)
    steps = len(fake_model.requests)
    assert line["status"] == "ok" and len(line["subagents"]) == 2 and steps >= 4
    assert line["usage"]["input_tokens"] == 10 * steps and line["usage"]["output_tokens"] == 5 * steps
    assert summary.usage == line["usage"] and line["scores"]["exact"]["value"] == 1.0


def test_prices(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text('["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 0.27\noutput_per_mtok = 1.1\n')
    prices = load_prices(path)
    price = prices.price("deepseek-official", "deepseek-v4-flash")
    assert price == Price(0.27, 1.1)
    assert price.cost(Usage(1_000_000, 2_000_000, 3_000_000)) == pytest.approx(0.27 + 2.2)
    assert price.cost(Usage(120, 45, 165)) == (120 * 0.27 + 45 * 1.1) / 1e6
    with pytest.raises(PricesError, match="no table for route 'x/y'"):
        prices.price("x", "y")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[plain]\ninput_per_mtok = 1\noutput_per_mtok = 1\n', '"provider/model"'),
        ('["a/b"]\ninput_per_mtok = 1\n', "output_per_mtok must be a number"),
        ('["a/b"]\ninput_per_mtok = -1\noutput_per_mtok = 1\n', "input_per_mtok must be a number >= 0"),
        ('["a/b"]\ninput_per_mtok = 1\noutput_per_mtok = 1\ncache = 2\n', "unknown key"),
        ('["a/b"\n', "not valid TOML"),
        ('["a/b"]\ninput_per_mtok = 1e308\noutput_per_mtok = 1\n', "at most 1e\\+12 USD"),  # the cost would overflow
    ],
)
def test_bad_prices(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    with pytest.raises(PricesError, match=message):
        load_prices(path)


def test_turn_usage_decodes_exactly_the_model_steps_of_raw_events() -> None:
    """The raw scan picks lines by their head (another type's payload quoting the type is not a
    step; a line whose "type" is not first is searched); the sum is that of every event decoded."""
    from types import SimpleNamespace

    from dsh_orchestra.session import EventLog

    events = [
        {"type": "assistant/message", "seq": 1, "data": {"usage": {"inputTokens": 3, "outputTokens": 4}}},
        {"type": "user/message", "seq": 2, "data": {"text": '"assistant/message"', "usage": {"inputTokens": 50}}},
        {"seq": 3, "type": "assistant/message", "data": {"usage": {"inputTokens": 7, "outputTokens": 1, "totalTokens": 9}}},
        {"seq": 4, "type": "tool/call", "data": {"note": "assistant/message", "usage": {"inputTokens": 90}}},
        {"type": "assistant/messages", "seq": 5, "data": {"usage": {"inputTokens": 200}}},
        {"type": "turn/end", "seq": 6},
    ]
    turn = SimpleNamespace(events=EventLog(events), notifications=())
    assert turn_usage(turn) == events_usage(events) == Usage(10, 5, 16)

"""The judge scorer on the simulator: typed verdicts, re-prompting, failures, usage counted apart."""

from __future__ import annotations

import tomllib

import pytest
import trio

from dsh_orchestra.eval import (
    EvalItem, EvalResult, ScorerSpec, Usage, bind_scorers, judge_prompt, open_judges, score_attempt,
)
from dsh_orchestra.pool import open_pool
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import parse_script
from dsh_orchestra.testing._simulator import open_simulator_stream

JUDGE_SCRIPT = r'''
default_reply = "not json at all"

[[rules]]
name = "repaired"
match = "Your previous answer could not be used"
reply = '{"grade": "partial", "explanation": "fixed on the second try"}'

[[rules]]
name = "right"
regex = "\\[Response\\]\\n<<<RESPONSE-[0-9a-f]+>>>\\nParis"
reply = "```json\n{\"grade\": \"correct\", \"explanation\": \"names Paris\"}\n```"

[[rules]]
name = "wrong"
regex = "\\[Response\\]\\n<<<RESPONSE-[0-9a-f]+>>>\\nLyon"
reply = '{"grade": "incorrect", "explanation": "Lyon is not the capital"}'

[[rules]]
name = "bad-grade"
regex = "\\[Response\\]\\n<<<RESPONSE-[0-9a-f]+>>>\\nMaybe"
reply = '{"grade": "great", "explanation": "?"}'
'''


def judge_spec() -> RuntimeSpec:
    script = parse_script(tomllib.loads(JUDGE_SCRIPT), source="<judge>")
    return RuntimeSpec(connect=lambda: open_simulator_stream(script), name="judge-sim")


ITEM = EvalItem(id="q", prompt="What is the capital of France?", target="Paris")


def test_judge_prompt_holds_task_reference_and_response() -> None:
    text = judge_prompt(EvalItem(id="q", prompt=[{"type": "text", "text": "Pick one"}], target=["A", "B"], choices=["x", "y"]), "B")
    assert "[Task]\nPick one\nA. x\nB. y" in text
    assert "[Reference answer]\nany of:\n- A\n- B" in text
    assert "[Response]\n<<<RESPONSE-" in text and "\nB\n<<<END-RESPONSE-" in text and '"grade"' in text


@pytest.mark.parametrize(
    ("response", "value", "grade", "explanation"),
    [
        ("Paris", 1.0, "correct", "names Paris"),
        ("Lyon", 0.0, "incorrect", "Lyon is not the capital"),
        ("Nice", 0.5, "partial", "fixed on the second try"),  # bad JSON first, then the repair prompt
        ("Maybe", 0.5, "partial", "fixed on the second try"),  # a grade outside the three
    ],
)
async def test_judge_grades(response: str, value: float, grade: str, explanation: str) -> None:
    spec = ScorerSpec("judge", "judge", {})
    with trio.fail_after(20):
        async with open_pool(judge_spec(), 1) as pool:
            async with open_judges([spec], lease=pool.lease) as leases:
                scored = await score_attempt(bind_scorers([spec], judges=leases), ITEM, EvalResult(final_response=response))
    assert scored.scores["judge"] == {"value": value, "answer": grade, "explanation": explanation}
    assert scored.judge_usage.total_tokens > 0


async def test_judge_that_never_answers_a_verdict_is_null_and_its_usage_kept() -> None:
    spec = ScorerSpec("strict-judge", "judge", {"parse_attempts": 0})
    with trio.fail_after(20):
        async with open_pool(judge_spec(), 1) as pool:
            scored = await score_attempt(
                bind_scorers([spec], judges={"strict-judge": pool.lease}), ITEM, EvalResult(final_response="Nice")
            )
    record = scored.scores["strict-judge"]
    assert record["value"] is None and record["explanation"].startswith("JudgeError: the judge gave no valid verdict")
    assert scored.judge_usage != Usage()


async def test_judge_on_its_own_runtime_opens_and_closes_a_pool(tmp_path: object) -> None:
    """``[judge] runtime = "sim"``: a pool of one simulator process, closed on exit (no leak)."""
    spec = ScorerSpec("judge", "judge", {"runtime": "sim"})
    with trio.fail_after(30):
        async with open_judges([spec]) as leases:
            scored = await score_attempt(bind_scorers([spec], judges=leases), ITEM, EvalResult(final_response="Paris"))
    # the default simulator answers its default reply, which is no verdict: null, with the reason
    assert scored.scores["judge"]["value"] is None
    assert "no valid verdict" in scored.scores["judge"]["explanation"]


async def test_open_judges_without_judges_opens_nothing() -> None:
    async with open_judges([ScorerSpec("exact", "exact")]) as leases:
        assert leases == {}


async def test_a_judge_runtime_opened_here_is_recycled() -> None:
    """A judge pool recycles its runtime as the batch's does: 5 verdicts, 2 sessions a runtime."""
    starts = 0
    script = parse_script(tomllib.loads(JUDGE_SCRIPT), source="<judge>")

    def connect():  # type: ignore[no-untyped-def]
        nonlocal starts
        starts += 1
        return open_simulator_stream(script)

    spec = ScorerSpec("judge", "judge", {})
    with trio.fail_after(30):
        async with open_judges([spec], fallback=RuntimeSpec(connect=connect, name="judge-sim"),
                               max_sessions_per_runtime=2) as leases:
            scorers = bind_scorers([spec], judges=leases)
            values = [(await score_attempt(scorers, ITEM, EvalResult(final_response="Paris"))).scores["judge"]["value"]
                      for _ in range(5)]
    assert values == [1.0] * 5
    assert starts == 4  # sessions 1-2, 3-4, 5, and the successor started one session ahead of the third's quota

"""The scoring file, SPEC resolution, Python scorers (sync, async, failing) and score_attempt."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.testing

from dsh_orchestra.eval import (
    EvalItem, EvalResult, Score, ScorerSpec, ScoringError, Usage, bind_scorers, check_scorers, load_scoring,
    make_plan, parse_scoring, resolve_scorers, score_attempt,
)

SCORING = """
[numeric]
rel_tol = 0.01

[regex.yes]
pattern = "(?i)yes"

[regex.whole]
pattern = "[0-9]+"
fullmatch = true

[regex]
short = "ok"

[scorers.strict]
kind = "exact"

[scorers.close]
kind = "numeric"
rel_tol = 0.5

[scorers.digits]
kind = "regex"
pattern = "[0-9]"

[scorers.length]
kind = "python"
function = "evalmod:length"
"""


@pytest.fixture
def scorer_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "evalmod.py").write_text(textwrap.dedent("""
        import trio
        from dsh_orchestra.eval import Score

        def length(item, result):
            return len(result.final_response)

        def says_target(item, result):
            return item.target in result.final_response

        async def slow(item, result):
            await trio.sleep(0)
            return Score(0.5, answer="half", explanation="async", metadata={"k": 1})

        def broken(item, result):
            raise ZeroDivisionError("no")

        def nothing(item, result):
            return None

        def text(item, result):
            return "1"

        def sees(item, result):
            return Score(1, explanation=f"{item.id}|{item.metadata}|{item.choices}|{result.workspace}|{result.usage.total_tokens}")

        class Callable:
            def __call__(self, item, result):
                return 1

        instance = Callable()
        not_callable = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("evalmod", None)


def scoring_file(tmp_path: Path, text: str = SCORING) -> Path:
    path = tmp_path / "scoring.toml"
    path.write_text(text)
    return path


def test_resolution_of_every_spec_form(tmp_path: Path) -> None:
    scoring = load_scoring(scoring_file(tmp_path))
    specs = resolve_scorers(["exact", "numeric", "strict", "close", "regex:yes", "regex:whole", "regex:short", "regex:digits", "mod:fn", "judge"], scoring)
    assert [s.name for s in specs] == ["exact", "numeric", "strict", "close", "regex:yes", "regex:whole", "regex:short", "regex:digits", "mod:fn", "judge"]
    assert specs[1] == ScorerSpec("numeric", "numeric", {"rel_tol": 0.01})
    assert specs[3].settings == {"rel_tol": 0.5}
    assert specs[5].settings == {"pattern": "[0-9]+", "fullmatch": True}
    assert specs[6].settings == {"pattern": "ok"}
    assert specs[8] == ScorerSpec("mod:fn", "python", {"function": "mod:fn"})
    assert scoring.sha256 is not None and len(scoring.sha256) == 64
    assert [s.name for s in resolve_scorers([], scoring)] == ["strict", "close", "digits", "length"]


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["nope"], "is not a scorer"),
        (["regex:missing"], "no pattern named 'missing'"),
        (["exact", "exact"], "given twice"),
        ([""], "needs a SPEC"),
    ],
)
def test_bad_specs(tmp_path: Path, specs: list[str], message: str) -> None:
    with pytest.raises(ScoringError, match=message):
        resolve_scorers(specs, load_scoring(scoring_file(tmp_path)))


def test_regex_without_a_scoring_file() -> None:
    with pytest.raises(ScoringError, match="no scoring file was given"):
        resolve_scorers(["regex:x"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[scorers.a]\nkind = 'fuzzy'\n", "kind must be one of"),
        ("[scorers.a]\nkind = 'exact'\npattern = 'x'\n", r"unknown key\(s\) \['pattern'\]"),
        ("[scorers.a]\nkind = 'regex'\n", "needs pattern"),
        ("[scorers.a]\nkind = 'regex'\npattern = '('\n", "not a valid regular expression"),
        ("[scorers.a]\nkind = 'python'\n", "needs function"),
        ("[numeric]\nrel_tol = -1\n", "rel_tol must be a number >= 0"),
        ("[numeric]\nrel_tol = 'x'\n", "rel_tol must be a number >= 0"),
        ("[extra]\nx = 1\n", r"unknown table\(s\) \['extra'\]"),
        ("[judge]\nruntime = 3\n", "runtime must be a non-empty string"),
        ("[regex.a]\nfullmatch = 'yes'\npattern = 'x'\n", "fullmatch must be true or false"),
        ("scorers = 3\n", "must be tables"),
    ],
)
def test_bad_scoring_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ScoringError, match=message):
        load_scoring(scoring_file(tmp_path, text))


def test_unreadable_scoring_files(tmp_path: Path) -> None:
    with pytest.raises(ScoringError, match="cannot read scoring file"):
        load_scoring(tmp_path / "absent.toml")
    with pytest.raises(ScoringError, match="not valid TOML"):
        load_scoring(scoring_file(tmp_path, "[scorers\n"))


async def score(specs: list[str], item: EvalItem, result: EvalResult, scoring: str = SCORING) -> dict[str, object]:
    parsed = parse_scoring(__import__("tomllib").loads(scoring))
    bound = bind_scorers(resolve_scorers(specs, parsed))
    return (await score_attempt(bound, item, result)).scores


async def test_python_scorers_sync_async_bool_and_failures(scorer_module: Path) -> None:
    item = EvalItem(id="q1", prompt="p", target="abc", metadata={"level": 2}, choices=["x"])
    result = EvalResult(final_response="xabcx", usage=Usage(3, 4, 7), workspace=scorer_module)
    scores = await score(
        ["evalmod:length", "evalmod:says_target", "evalmod:slow", "evalmod:broken", "evalmod:nothing", "evalmod:text", "evalmod:sees", "evalmod:instance", "length"],
        item, result,
    )
    assert scores["evalmod:length"] == {"value": 5.0, "answer": None, "explanation": None}
    assert scores["evalmod:says_target"] == {"value": 1.0, "answer": None, "explanation": None}
    assert scores["evalmod:slow"] == {"value": 0.5, "answer": "half", "explanation": "async", "metadata": {"k": 1}}
    assert scores["evalmod:broken"] == {"value": None, "answer": None, "explanation": "ZeroDivisionError: no", "error": True}
    assert scores["evalmod:nothing"]["value"] is None and "returned NoneType" in scores["evalmod:nothing"]["explanation"]
    assert scores["evalmod:text"]["value"] is None and "returned str" in scores["evalmod:text"]["explanation"]
    assert scores["evalmod:sees"]["explanation"] == f"q1|{{'level': 2}}|['x']|{scorer_module}|7"
    assert scores["evalmod:instance"]["value"] == 1.0
    assert scores["length"]["value"] == 5.0  # [scorers.length] kind = "python"


async def test_builtins_through_score_attempt() -> None:
    item = EvalItem(id="q", target="42")
    scores = await score(["exact", "includes", "numeric", "close", "regex:yes", "regex:whole", "f1"], item, EvalResult(final_response="42"))
    assert {k: v["value"] for k, v in scores.items()} == {
        "exact": 1.0, "includes": 1.0, "numeric": 1.0, "close": 1.0, "regex:yes": 0.0, "regex:whole": 1.0, "f1": 1.0,
    }


async def test_an_item_that_ended_in_error_keeps_every_key_null() -> None:
    scores = await score(["exact", "f1", "regex:yes"], EvalItem(id="q", target="x"), EvalResult(final_response="x", status="error"))
    assert scores == {name: {"value": None, "answer": None, "explanation": "the item ended in error", "error": True} for name in ("exact", "f1", "regex:yes")}


def test_check_scorers_fails_early(scorer_module: Path) -> None:
    check_scorers(resolve_scorers(["evalmod:length"]))
    for spec, message in [("evalmod:absent", "has no attribute 'absent'"), ("nomodule_xyz:f", "cannot import module"), ("evalmod:not_callable", "not a callable")]:
        with pytest.raises(ScoringError, match=message):
            check_scorers(resolve_scorers([spec]))


async def test_python_callables_as_scorers() -> None:
    def shouty(item: object, result: EvalResult) -> Score:
        return Score(result.final_response.isupper(), answer=result.final_response)

    plan = make_plan(["exact", shouty])
    assert plan.names == ["exact", "shouty"]
    scores = (await score_attempt(bind_scorers(plan.scorers), EvalItem(id="q", target="HI"), EvalResult(final_response="HI"))).scores
    assert scores["shouty"] == {"value": 1.0, "answer": "HI", "explanation": None}


def test_plan_checks() -> None:
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        make_plan(["exact"], epochs=0)
    with pytest.raises(ValueError, match="k <= the epochs"):
        make_plan(["exact"], epochs=2, reducer="pass@3")
    assert make_plan(["exact"], epochs=3, reducer="pass@3").reducer.k == 3


async def test_a_sync_scorer_does_not_block_the_loop(scorer_module: Path) -> None:
    """Sync Python scorers run in a worker thread: other tasks keep running meanwhile."""
    (scorer_module / "blocking.py").write_text(
        "import threading\nrelease = threading.Event()\n"
        "def wait(item, result):\n    assert release.wait(10)\n    return 1\n"
    )
    import importlib

    blocking = importlib.import_module("blocking")
    bound = bind_scorers(resolve_scorers(["blocking:wait"]))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(score_attempt, bound, EvalItem(id="q"), EvalResult())
            await trio.testing.wait_all_tasks_blocked()  # reached only if the loop is free
            blocking.release.set()
    finally:
        sys.modules.pop("blocking", None)

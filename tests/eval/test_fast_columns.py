"""The columnar paths give what the line-by-line (typed) paths gave: on a generated run with
errored lines, scorers that failed (``"error": true``), values that do not apply (null), several
epochs (some items short of epochs), a repeated (id, epoch), and groups of mixed JSON types.

* ``reduce_items_strict`` (now ``reduce_run`` on ``RunColumns``) against the dict-based
  reduction it replaced (kept here, verbatim, as the reference);
* ``ScoreTally`` (columns) against metrics computed from that reference;
* ``EvalTally`` fed ``ResultLine``s against fed ``TallyLine``s (what ``--resume`` reads);
* ``compare_runs`` of decoded lines against ``compare_runs`` of ``read_run`` columns.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import orjson
import pytest

from dsh_orchestra.eval import EvalTally, Reduced, Reducer, ScoreTally, compare_runs, make_plan, parse_reducer, read_run
from dsh_orchestra.eval._compare import reduce_items_strict
from dsh_orchestra.eval._metrics import _metrics_of
from dsh_orchestra.results import ResultLine, TallyLine

NAMES = ["a", "b"]


def run_lines(seed: int, items: int = 80, epochs: int = 3) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []
    groups: list[Any] = [7, "7", None, "x", True]
    for i in range(items):
        metadata: dict[str, Any] = {} if i % 9 == 0 else {"level": groups[i % len(groups)]}
        for epoch in range(1, rnd.randint(1, epochs) + 1):
            status = "error" if rnd.random() < 0.1 else "ok"
            scores: dict[str, Any] = {}
            if status == "ok":
                draw = rnd.random()
                if draw < 0.1:
                    scores["a"] = {"value": None, "answer": None, "explanation": "boom", "error": True}
                elif draw < 0.2:
                    scores["a"] = {"value": None, "answer": None, "explanation": "no target"}
                else:
                    scores["a"] = {"value": float(rnd.random() < 0.6), "answer": None, "explanation": None}
                scores["b"] = {"value": round(rnd.random(), 3), "answer": None, "explanation": None}
            line = {"id": f"i{i:03d}", "status": status, "session_id": f"s{i}", "final_response": "x",
                    "finish_reason": "completed" if status == "ok" else None, "subagents": [], "approvals": [],
                    "questions": [], "attempts": 1, "duration_s": rnd.uniform(0.1, 2.0),
                    "error": {"type": "E", "message": "m"} if status == "error" else None, "metadata": metadata,
                    "epoch": epoch, "scores": scores,
                    "usage": {"input_tokens": rnd.randint(1, 99), "output_tokens": 5, "total_tokens": 120},
                    "cost_usd": 0.001}
            out.append(line)
    out.append({**out[3], "scores": {"a": {"value": 1.0}, "b": {"value": 0.5}}})  # a repeated (id, epoch): the first counts
    return out


# ---- the reference: the dict-based reduction the columns replaced ---------------------------


def _value(record: Any) -> float | None:
    value = record.get("value") if isinstance(record, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _failed(line: Mapping[str, Any], record: Any) -> bool:
    return line.get("status") == "error" or (isinstance(record, dict) and record.get("error") is True)


def reference(lines: Iterable[Mapping[str, Any]], names: Sequence[str], reducer: Reducer) -> tuple[Any, Any, Any]:
    epochs: dict[str, dict[int, Mapping[str, Any]]] = {}
    for line in lines:
        epoch = line.get("epoch", 1)
        key = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 1
        epochs.setdefault(str(line.get("id")), {}).setdefault(key, line)
    values: dict[str, dict[str, float | None]] = {}
    status: dict[str, str] = {}
    strict: dict[str, dict[str, float | None]] = {}
    for item_id, by_epoch in epochs.items():
        ordered = [by_epoch[e] for e in sorted(by_epoch)]
        values[item_id] = {}
        for name in names:
            per_epoch, failed = [], []
            for line in ordered:
                scores = line.get("scores")
                record = scores.get(name) if isinstance(scores, dict) else None
                value = _value(record)
                per_epoch.append(value)
                failed.append(value is None and _failed(line, record))
            values[item_id][name] = reducer(per_epoch)
            if any(failed):
                strict.setdefault(item_id, {})[name] = reducer([0.0 if f else v for v, f in zip(per_epoch, failed, strict=True)])
        statuses = [str(line.get("status")) for line in ordered]
        status[item_id] = next((s for s in statuses if s != "ok"), "ok")
    return values, status, strict


REDUCERS = ["mean", "max", "min", "mode", "pass@1", "pass^1"]


@pytest.mark.parametrize("reducer", REDUCERS)
@pytest.mark.parametrize("epochs", [1, 3])
def test_reduce_matches_the_dict_based_reduction(reducer: str, epochs: int) -> None:
    lines = run_lines(seed=epochs, epochs=epochs)
    chosen = parse_reducer(reducer)
    assert reduce_items_strict(lines, [*NAMES, "absent"], chosen) == reference(lines, [*NAMES, "absent"], chosen)


@pytest.mark.parametrize("reducer", ["mean", "max", "pass@1"])
@pytest.mark.parametrize("epochs", [1, 3])
def test_score_tally_matches_metrics_of_the_reference(reducer: str, epochs: int) -> None:
    lines = run_lines(seed=10 + epochs, epochs=epochs)
    chosen = parse_reducer(reducer)
    tally = ScoreTally(NAMES, reducer=chosen, group_by="level", seed=3)
    for line in lines:
        tally.add(ResultLine.from_json(line))
    values, _, strict = reference(lines, NAMES, chosen)
    expected = Reduced({name: [values[i][name] for i in values] for name in NAMES})
    expected.failed = {name: [values[i][name] is None and name in strict.get(i, {}) for i in values] for name in NAMES}
    expected.strict = {name: [strict[i][name] if name in strict.get(i, {}) else values[i][name] for i in values]
                       for name in NAMES}
    reduced = tally.reduced()
    assert dict(reduced) == dict(expected) and reduced.failed == expected.failed and reduced.strict == expected.strict
    every = range(len(values))
    for name in NAMES:
        own = {k: v for k, v in tally.scores(reduced)[name].items() if k != "epochs"}
        assert own == _metrics_of(expected, name, every, 3)
    groups = tally.groups(reduced)
    assert groups is not None and set(groups) == {"7", '"7"', "null", "x", "true", "(missing)"}


def test_resume_tally_lines_count_as_result_lines() -> None:
    """What --resume feeds the tally (``TallyLine``, no ResultLine built) gives the same summary."""
    lines = run_lines(seed=5)
    plan = make_plan(["exact"], epochs=3, reducer="mean", group_by="level", seed=2)
    typed, light = EvalTally(plan), EvalTally(plan)
    for line in lines:
        renamed = {**line, "scores": {"exact": line["scores"].get("a")} if line["scores"].get("a") else {}}
        typed.add(ResultLine.from_json(renamed))
        light.add(TallyLine(renamed))
    assert typed.to_json() == light.to_json()
    assert typed.warnings(typed.to_json()) == light.warnings(light.to_json())
    assert (typed.ok, typed.error, list(typed.durations), typed.finish_reasons) == \
        (light.ok, light.error, list(light.durations), light.finish_reasons)


@pytest.mark.parametrize("reducer", ["mean", "pass@1"])
def test_compare_of_columns_read_from_files_equals_compare_of_lines(tmp_path: Path, reducer: str) -> None:
    base, candidate = run_lines(seed=21), run_lines(seed=22, items=70)
    paths = []
    for name, lines in (("base", base), ("candidate", candidate)):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        paths.append(path)
    of_lines = compare_runs(base, candidate, reducer=reducer, seed=4)
    of_columns = compare_runs(read_run(paths[0]), read_run(paths[1]), reducer=reducer, seed=4)
    assert orjson.dumps(of_lines) == orjson.dumps(of_columns)
    assert of_lines["only_in_base"] == [f"i{i:03d}" for i in range(70, 80)]
    assert of_lines["status_changes"] and of_lines["scorers"]["a"]["strict"]["n"] > of_lines["scorers"]["a"]["n"]

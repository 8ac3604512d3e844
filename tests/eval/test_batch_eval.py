"""Scoring inside the batch engine: result lines, epochs, resume, shards, budgets, workspaces, judge."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.batch import BatchOptions, BatchUsageError, in_shard, run_batch
from dsh_orchestra.eval import pass_at_k
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import parse_script
from dsh_orchestra.testing._simulator import open_simulator_stream

from eval_support import lines_of, write_jsonl
from scored_scenario_support import PRICES, scenario_spec


DATASET = [
    {"id": "fr", "prompt": "Capital of France?", "target": "Paris", "metadata": {"kind": "geo"}},
    {"id": "num", "prompt": "6 x 7?", "target": "42", "metadata": {"kind": "math"}},
    {"id": "miss", "prompt": "Capital of Peru?", "target": "Lima", "metadata": {"kind": "geo"}},
    {"id": "bad", "prompt": "E400 please", "target": "x", "metadata": {"kind": "math"}},
]


def spec() -> RuntimeSpec:
    return scenario_spec("<eval>")


async def batch(tmp_path: Path, rows: list[dict[str, Any]] = DATASET, out: str = "results.jsonl", **options: Any) -> Any:
    dataset = tmp_path / "ds.jsonl"
    if not dataset.exists():
        write_jsonl(dataset, rows)
    options.setdefault("progress", "none")
    options.setdefault("retries", 0)
    with trio.fail_after(60):
        return await run_batch(dataset, tmp_path / out, spec(), BatchOptions(**options))


async def test_result_lines_gain_scores_usage_cost_and_the_summary_metrics(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    summary = await batch(tmp_path, scorers=["exact", "numeric"], prices=prices, group_by="kind",
                          summary=tmp_path / "summary.json")
    lines = {line["id"]: line for line in lines_of(tmp_path / "results.jsonl")}
    assert len(lines) == 4 and all("epoch" not in line for line in lines.values())
    fr = lines["fr"]
    assert fr["scores"] == {"exact": {"value": 1.0, "answer": None, "explanation": None},
                            "numeric": {"value": None, "answer": None, "explanation": "target 'Paris' holds no number"}}
    assert lines["num"]["scores"]["numeric"] == {"value": 1.0, "answer": "42", "explanation": None}
    assert lines["bad"]["status"] == "error"
    assert lines["bad"]["scores"] == {name: {"value": None, "answer": None, "explanation": "the item ended in error", "error": True}
                                      for name in ("exact", "numeric")}
    for line in lines.values():
        usage = line["usage"]
        assert set(usage) == {"input_tokens", "output_tokens", "total_tokens"}
        assert line["cost_usd"] == (usage["input_tokens"] * 2.0 + usage["output_tokens"] * 10.0) / 1e6
    assert fr["usage"]["input_tokens"] > 0 and lines["bad"]["usage"] == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == summary.to_json()
    assert written["scores"]["exact"]["mean"] == pytest.approx(1 / 3) and written["scores"]["exact"]["n"] == 3
    assert written["scores"]["exact"]["n_error"] == 1
    assert written["groups"]["geo"]["exact"]["mean"] == 0.5 and written["groups"]["math"]["exact"]["n_error"] == 1
    assert written["usage"] == {k: sum(line["usage"][k] for line in lines.values()) for k in written["usage"]}
    assert written["cost_usd"] == pytest.approx(sum(line["cost_usd"] for line in lines.values()))
    assert written["stopped"] is None
    run = written["run"]
    assert run["dataset"]["items"] == 4 and len(run["dataset"]["sha256"]) == 64
    assert run["dataset"]["path"] == str(tmp_path / "ds.jsonl")
    assert run["scorers"] == ["exact", "numeric"] and run["epochs"] == 1 and run["reducer"] == "mean" and run["seed"] == 0
    assert run["runtime"]["kind"] == "in-process" and run["provider"] == "deepseek-official"
    assert run["start_time"] <= run["end_time"]


async def test_without_scorers_lines_still_carry_usage(tmp_path: Path) -> None:
    summary = await batch(tmp_path)
    for line in lines_of(tmp_path / "results.jsonl"):
        assert "scores" not in line and "cost_usd" not in line and "epoch" not in line
        assert set(line["usage"]) == {"input_tokens", "output_tokens", "total_tokens"}
    assert "scores" not in summary.to_json() and summary.to_json()["usage"]["total_tokens"] > 0


async def test_usage_includes_the_subagents(tmp_path: Path) -> None:
    await batch(tmp_path, [{"id": "s", "prompt": "SPAWN"}, {"id": "p", "prompt": "plain"}])
    lines = {line["id"]: line for line in lines_of(tmp_path / "results.jsonl")}
    assert lines["s"]["subagents"] and lines["s"]["usage"]["total_tokens"] > 2 * lines["p"]["usage"]["total_tokens"]


async def test_epochs_one_line_and_one_session_per_epoch(tmp_path: Path) -> None:
    summary = await batch(tmp_path, scorers=["exact"], epochs=3, epoch_reducer="pass@2")
    lines = lines_of(tmp_path / "results.jsonl")
    assert sorted((line["id"], line["epoch"]) for line in lines) == sorted((d["id"], e) for d in DATASET for e in (1, 2, 3))
    assert len({line["session_id"] for line in lines}) == 12
    assert summary.total == 12 and summary.ok == 9
    exact = summary.scores["exact"]
    assert exact["n"] == 3 and exact["n_error"] == 1
    assert exact["mean"] == pytest.approx((pass_at_k(3, 3, 2) + 0 + 0) / 3)  # fr right, num and miss wrong
    assert summary.run is not None and summary.run["epochs"] == 3 and summary.run["reducer"] == "pass@2"


async def test_each_epoch_keeps_its_transcript(tmp_path: Path) -> None:
    from dsh_orchestra.batch._transcripts import transcript_name

    await batch(tmp_path, DATASET[:2], epochs=2, transcripts=tmp_path / "transcripts")
    names = sorted(p.name for p in (tmp_path / "transcripts").iterdir())
    assert names == sorted(transcript_name(f"{i}#{e}") for i in ("fr", "num") for e in (1, 2))
    assert sorted(line["id"] for line in lines_of(tmp_path / "results.jsonl")) == ["fr", "fr", "num", "num"]


async def test_epochs_refuse_a_dataset_session_id(tmp_path: Path) -> None:
    rows = [*DATASET, {"id": "own", "prompt": "p", "session_id": "my-session"}]
    with pytest.raises(BatchUsageError, match="session_id"):
        await batch(tmp_path, rows, epochs=2)
    assert not (tmp_path / "results.jsonl").exists()  # refused before the results file is made


async def test_resume_skips_done_item_epochs(tmp_path: Path) -> None:
    await batch(tmp_path, scorers=["exact"], epochs=3)
    out = tmp_path / "results.jsonl"
    full = out.read_bytes().splitlines(keepends=True)
    kept = full[:5] + [full[5][:17]]  # five whole lines and a torn one: a crash while writing
    out.write_bytes(b"".join(kept))
    summary = await batch(tmp_path, scorers=["exact"], epochs=3, resume=True)
    lines = lines_of(out)
    assert [json.dumps(x) for x in lines[:5]] == [json.dumps(json.loads(x)) for x in full[:5]]  # kept as they were
    pairs = [(line["id"], line["epoch"]) for line in lines]
    assert len(pairs) == len(set(pairs)) == 12
    assert summary.resumed == 5 and summary.processed == 7 and summary.total == 12
    assert summary.scores["exact"]["n"] == 3  # the resumed lines count in the metrics
    again = await batch(tmp_path, scorers=["exact"], epochs=4, resume=True)  # one more epoch: only epoch 4 runs
    assert again.resumed == 12 and again.processed == 4
    assert sorted(line["epoch"] for line in lines_of(out) if line["id"] == "fr") == [1, 2, 3, 4]


async def test_a_shard_holds_every_epoch_of_its_ids(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "prompt": "Capital of France?", "target": "Paris"} for i in range(12)]
    for index in range(2):
        await batch(tmp_path, rows, out=f"shard{index}.jsonl", scorers=["exact"], epochs=2, shard=(index, 2))
    seen: list[tuple[str, int]] = []
    for index in range(2):
        lines = lines_of(tmp_path / f"shard{index}.jsonl")
        assert all(in_shard(line["id"], (index, 2)) for line in lines)
        ids = {line["id"] for line in lines}
        assert sorted((line["id"], line["epoch"]) for line in lines) == sorted((i, e) for i in ids for e in (1, 2))
        seen += [(line["id"], line["epoch"]) for line in lines]
    assert sorted(seen) == sorted((f"q{i}", e) for i in range(12) for e in (1, 2))


async def test_budget_stops_scheduling_then_resume_continues(tmp_path: Path) -> None:
    rows = [{"id": f"q{i:02d}", "prompt": "Capital of France?", "target": "Paris"} for i in range(10)]
    first = await batch(tmp_path, rows, scorers=["exact"], concurrency=1, max_total_tokens=30)
    lines = lines_of(tmp_path / "results.jsonl")
    per_item = lines[0]["usage"]["total_tokens"]
    assert per_item > 0
    assert first.stopped == "budget" and first.to_json()["stopped"] == "budget"
    assert len(lines) == -(-30 // per_item)  # items started until the total reached 30, none after
    assert first.processed == len(lines)
    second = await batch(tmp_path, rows, scorers=["exact"], concurrency=1, max_total_tokens=30, resume=True)
    assert second.stopped == "budget" and len(lines_of(tmp_path / "results.jsonl")) == 2 * len(lines)  # this run's budget
    done = await batch(tmp_path, rows, scorers=["exact"], resume=True)
    assert done.stopped is None and done.total == 10 and done.ok == 10
    assert sorted(line["id"] for line in lines_of(tmp_path / "results.jsonl")) == [r["id"] for r in rows]


async def test_cost_budget_needs_prices(tmp_path: Path) -> None:
    with pytest.raises(BatchUsageError, match="max_total_cost= needs prices="):
        await batch(tmp_path, max_total_cost=1.0)
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    rows = [{"id": f"q{i}", "prompt": "p"} for i in range(6)]
    summary = await batch(tmp_path, rows, prices=prices, max_total_cost=1e-9, concurrency=1)
    assert summary.stopped == "budget" and len(lines_of(tmp_path / "results.jsonl")) == 1


async def test_judge_runs_on_the_batch_pool_and_its_usage_is_apart(tmp_path: Path) -> None:
    summary = await batch(tmp_path, DATASET[:3], scorers=["judge", "exact"])
    lines = {line["id"]: line for line in lines_of(tmp_path / "results.jsonl")}
    assert lines["fr"]["scores"]["judge"] == {"value": 1.0, "answer": "correct", "explanation": "right"}
    assert lines["miss"]["scores"]["judge"] == {"value": 0.0, "answer": "incorrect", "explanation": "wrong"}
    for line in lines.values():
        assert line["judge_usage"]["total_tokens"] > 0
    totals = summary.to_json()
    assert totals["judge_usage"]["total_tokens"] == sum(line["judge_usage"]["total_tokens"] for line in lines.values())
    assert totals["usage"]["total_tokens"] == sum(line["usage"]["total_tokens"] for line in lines.values())


async def test_bad_scoring_options_refused_before_anything_runs(tmp_path: Path) -> None:
    for options, message in [
        ({"scorers": ["nope"]}, "is not a scorer"),
        ({"scorers": ["exact"], "epochs": 2, "epoch_reducer": "pass@3"}, "k <= the epochs"),
        ({"scorers": ["exact"], "epoch_reducer": "median"}, "epoch_reducer must be"),
        ({"prices": tmp_path / "absent.toml"}, "cannot read prices file"),
        ({"workspace_template": tmp_path / "absent"}, "is not a directory"),
        ({"keep_workspaces": True}, "keep_workspaces=True needs workspace_template="),
    ]:
        with pytest.raises(BatchUsageError, match=message):
            await batch(tmp_path, **options)
        assert not (tmp_path / "results.jsonl").exists()  # refused before the results file is made


@pytest.fixture
def workspace_scorer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "wscorer.py").write_text(
        "import os\nfrom pathlib import Path\nfrom dsh_orchestra.eval import Score\n"
        "SEEN = []\n"
        "def check(item, result):\n"
        "    ws = result.workspace\n"
        "    SEEN.append(str(ws))\n"
        "    fresh = (ws / 'data.txt').read_text() == 'template' and not (ws / 'touched').exists()\n"
        "    (ws / 'touched').write_text(item.id)  # a later item must not see it\n"
        "    return Score(fresh, answer=ws.name)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    template = tmp_path / "template"
    template.mkdir()
    (template / "data.txt").write_text("template")
    yield template
    import sys

    sys.modules.pop("wscorer", None)


async def test_each_item_gets_a_fresh_workspace_removed_after_scoring(tmp_path: Path, workspace_scorer: Path) -> None:
    rows = [{"id": f"w{i}", "prompt": "plain"} for i in range(4)]
    await batch(tmp_path, rows, scorers=["wscorer:check"], epochs=2, workspace_template=workspace_scorer,
                scorer_workers=0)  # the scorer records what it saw in this process
    import wscorer  # type: ignore[import-not-found]

    lines = lines_of(tmp_path / "results.jsonl")
    assert len(lines) == 8 and all(line["scores"]["wscorer:check"]["value"] == 1.0 for line in lines)
    assert len(set(wscorer.SEEN)) == 8 and not [p for p in wscorer.SEEN if await trio.Path(p).exists()]  # removed
    assert not await trio.Path(wscorer.SEEN[0]).parent.exists()  # and their temporary root
    assert not (workspace_scorer / "touched").exists()  # the template itself is never touched
    assert all("workspace" not in line for line in lines)


async def test_kept_workspaces_are_next_to_the_results(tmp_path: Path, workspace_scorer: Path) -> None:
    rows = [{"id": "a/b", "prompt": "plain"}, {"id": "c", "prompt": "plain"}]
    await batch(tmp_path, rows, scorers=["wscorer:check"], workspace_template=workspace_scorer, keep_workspaces=True)
    lines = {line["id"]: line for line in lines_of(tmp_path / "results.jsonl")}
    for item_id, line in lines.items():
        kept = Path(line["workspace"])
        assert kept.parent == tmp_path / "results.jsonl.workspaces"
        assert (kept / "touched").read_text() == item_id and (kept / "data.txt").read_text() == "template"


async def test_the_session_works_in_its_workspace(tmp_path: Path) -> None:
    """The session's working directory is the item's copy (the simulator's working_directory tool says so)."""
    template = tmp_path / "template"
    template.mkdir()
    (template / "f.txt").write_text("x")
    script = parse_script(tomllib.loads(
        'default_reply = "cwd checked"\n[[rules]]\nname = "pwd"\nmatch = "PWD"\nreply = "done"\n'
        '[[rules.tools]]\nname = "working_directory"\n'), source="<pwd>")
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": "p1", "prompt": "PWD"}])
    with trio.fail_after(30):
        await run_batch(dataset, tmp_path / "r.jsonl", RuntimeSpec(connect=lambda: open_simulator_stream(script), name="sim"),
                        BatchOptions(progress="none", workspace_template=template, keep_workspaces=True,
                                     transcripts=tmp_path / "transcripts"))
    [line] = lines_of(tmp_path / "r.jsonl")
    import gzip

    [transcript] = list((tmp_path / "transcripts").iterdir())
    text = gzip.decompress(transcript.read_bytes()).decode()
    assert line["status"] == "ok" and line["workspace"] in text  # working-directory/change and the tool's answer

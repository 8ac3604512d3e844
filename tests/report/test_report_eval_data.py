"""Evaluation report data without a browser: the conversation from a transcript (nesting,
approvals, bounds), the evaluation payload (summary or computed, pass@k, groups), and the
`compare` command's exits and outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_orchestra.batch._transcripts import read_transcript, transcript_name
from dsh_orchestra.eval import pass_at_k
from dsh_orchestra.report import build_payload, render_html
from dsh_orchestra.report._conversation import line_entries, transcript_entries
from dsh_orchestra.report._evaluation import evaluation_payload
from report_support import cli
from scored_runs import HOSTILE_RESPONSE, EvalRuns


def scored(item_id: str, values: dict[str, float | None], **fields: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "id": item_id, "status": "ok", "session_id": f"s-{item_id}", "final_response": f"answer {item_id}", "finish_reason": "completed",
        "subagents": [], "approvals": [], "attempts": 1, "duration_s": 0.5, "error": None, "metadata": {},
        "scores": {name: {"value": v, "answer": None, "explanation": None} for name, v in values.items()},
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    }
    line.update(fields)
    return line


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def kinds(entries: list[dict[str, Any]]) -> list[str]:
    out = []
    for entry in entries:
        out.append(entry["k"])
        out += [f"  {k}" for k in kinds(entry.get("children", []) + entry.get("entries", []))]
    return out


def test_conversation_of_a_real_transcript(eval_runs: EvalRuns) -> None:
    records = read_transcript(eval_runs.candidate.transcripts / transcript_name("agent-1"))
    line = next(line for line in eval_runs.candidate.lines() if line["id"] == "agent-1")
    conversation = transcript_entries(records, line)
    assert conversation["cut"] is False and conversation["truncated"] is None
    shape = kinds(conversation["entries"])
    assert shape[0] == "user"
    spawn = next(e for e in conversation["entries"] if e["k"] == "tool" and e["name"] == "subagent")
    assert [c["k"] for c in spawn["children"]] == ["subagent"]
    child = spawn["children"][0]
    assert child["label"] == "check the facts" and child["status"] == "ok" and child["stop_reason"] == "completed"
    assert [e["k"] for e in child["entries"]] == ["user", "text"] and child["entries"][1]["text"] == "helper says yes"
    bash = next(e for e in conversation["entries"] if e["k"] == "tool" and e["name"] == "bash")
    assert bash["approvals"] == [{"k": "approval", "id": bash["approvals"][0]["id"], "tool": "bash", "call_id": bash["id"],
                                  "reason": "escalate sandbox to danger-full-access: needs wider access", "outcome": "allowed-once",
                                  "rule": "allow-bash"}]
    assert bash["result"].startswith("[simulated bash]") and bash["is_error"] is False
    assert any(e["k"] == "reasoning" for e in conversation["entries"])
    assert conversation["entries"][-1] == {"k": "text", "text": "the helper says yes"}


def test_conversation_is_bounded(eval_runs: EvalRuns) -> None:
    records = read_transcript(eval_runs.candidate.transcripts / transcript_name("agent-1"))
    small = transcript_entries(records, None, max_chars=30)
    assert small["cut"] is True
    assert sum(len(e.get("text") or "") for e in small["entries"]) <= 60
    # a transcript that was itself cut when written says so
    note = {"truncated": {"omitted_lines": 3, "omitted_bytes": 900, "limit_bytes": 1024}}
    assert transcript_entries([*records, note], None)["truncated"] == note["truncated"]


def test_report_embeds_bounded_conversations_and_links_the_file(eval_runs: EvalRuns, tmp_path: Path) -> None:
    payload = build_payload(results=eval_runs.candidate.results, transcripts=eval_runs.candidate.transcripts,
                            out=tmp_path / "r.html", max_transcript=40)
    details = {row[0]: d for row, d in zip(payload["batch"]["rows"], payload["batch"]["details"], strict=True)}
    assert details["agent-1"]["conversation"]["cut"] is True
    assert details["agent-1"]["transcript"].endswith(transcript_name("agent-1"))
    full = build_payload(results=eval_runs.candidate.results, transcripts=eval_runs.candidate.transcripts, out=tmp_path / "r.html")
    assert {row[0]: d for row, d in zip(full["batch"]["rows"], full["batch"]["details"], strict=True)}["agent-1"]["conversation"]["cut"] is False
    with pytest.raises(ValueError, match="max_transcript"):
        build_payload(results=eval_runs.candidate.results, max_transcript=0)


def test_conversation_without_a_transcript() -> None:
    line = scored("a", {}, approvals=[{"tool_name": "bash", "call_id": "c1", "outcome": "rejected", "rule": "default"}],
                  subagents=[{"child_session_id": "k", "status": "ok", "stop_reason": "completed", "text": "child text"}])
    conversation = line_entries(line, "the prompt")
    assert [e["k"] for e in conversation["entries"]] == ["user", "approval", "subagent", "text"]
    assert conversation["source"] == "results" and conversation["entries"][2]["entries"][0]["text"] == "child text"


def test_evaluation_computed_when_the_summary_has_none() -> None:
    lines = [scored(f"i{k}", {"exact": float(k % 2), "f1": k / 10}, metadata={"topic": "ab"[k % 2]}) for k in range(10)]
    ev = evaluation_payload(lines, None, group_by="topic")
    assert ev is not None
    assert ev["scores"]["exact"]["mean"] == 0.5 and ev["scores"]["exact"]["source"] == "results"
    assert ev["scores"]["exact"]["n"] == 10 and len(ev["scores"]["exact"]["ci95"]) == 2
    assert set(ev["groups"]) == {"a", "b"} and ev["groups"]["b"]["exact"]["mean"] == 1.0
    assert ev["distributions"]["exact"]["bars"] == [{"label": "0", "count": 5}, {"label": "1", "count": 5}]
    assert ev["usage"]["totals"] == {"input_tokens": 30, "output_tokens": 20, "total_tokens": 50}
    assert ev["pass_at_k"] == {}  # one epoch: no pass@k table
    summary = {"scores": {"exact": {"mean": 0.123, "stderr": 0.1, "ci95": [0.0, 0.3], "n": 10, "n_error": 0}}}
    from_summary = evaluation_payload(lines, summary)
    assert from_summary is not None and from_summary["scores"]["exact"]["mean"] == 0.123
    assert from_summary["scores"]["exact"]["source"] == "summary" and from_summary["scores"]["f1"]["source"] == "results"
    assert evaluation_payload([{"id": "x", "status": "ok"}], None) is None


def test_pass_at_k_per_k_over_epochs() -> None:
    # item a: 1 of 3 epochs correct; item b: 3 of 3; item c: 0 of 2 (only two epochs with a value)
    values = {"a": [1, 0, 0], "b": [1, 1, 1], "c": [0, None, 0]}
    lines = [scored(i, {"exact": v}, epoch=e + 1) for i, vs in values.items() for e, v in enumerate(vs)]
    ev = evaluation_payload(lines, None)
    assert ev is not None and ev["epochs"] == 3
    table = {row["k"]: row for row in ev["pass_at_k"]["exact"]}
    assert table[1]["value"] == pytest.approx((pass_at_k(3, 1, 1) + 1.0 + 0.0) / 3)
    assert table[2]["value"] == pytest.approx((pass_at_k(3, 1, 2) + 1.0 + 0.0) / 3)
    assert table[3]["value"] == pytest.approx((1.0 + 1.0) / 2) and table[3]["n"] == 2  # c has only 2 valued epochs
    # pass^k beside it, and bootstrap intervals over the items for both
    from dsh_orchestra.eval import bootstrap_ci, pass_hat_k

    assert table[2]["pass_hat"] == pytest.approx((pass_hat_k(3, 1, 2) + 1.0 + 0.0) / 3)
    assert table[2]["ci95"] == list(bootstrap_ci([pass_at_k(3, 1, 2), 1.0, 0.0], seed=0))
    assert table[2]["pass_hat_ci95"] == list(bootstrap_ci([pass_hat_k(3, 1, 2), 1.0, 0.0], seed=0))


def test_score_columns_previews_and_hostile_text(tmp_path: Path) -> None:
    long = "x" * 500
    results = write(tmp_path / "r.jsonl", [scored("a", {"exact": 1}, final_response=HOSTILE_RESPONSE), scored("b", {"exact": None}, final_response=long)])
    dataset = write(tmp_path / "d.jsonl", [{"id": "a", "prompt": "</script><b>p</b>"}, {"id": "b", "prompt": long}])
    payload = build_payload(results=results, dataset=dataset)
    batch = payload["batch"]
    assert batch["columns"][:3] == ["id", "status", "score:exact"]
    row = dict(zip(batch["columns"], batch["rows"][1], strict=True))
    assert row["score:exact"] is None and len(row["response"]) == 120 and len(row["prompt"]) == 120 and row["tokens"] == 5
    html = render_html(payload)
    assert "<b>p</b>" not in html and "<script>window.pwned" not in html and 'id="filter-scored"' in html


def test_report_finds_the_dataset_the_summary_names(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "set.jsonl", [{"id": "a", "prompt": "named prompt"}])
    results = write(tmp_path / "r.jsonl", [scored("a", {"exact": 1})])
    summary = tmp_path / "s.json"
    summary.write_bytes(orjson.dumps({"total": 1, "ok": 1, "error": 0, "run": {"dataset": {"path": "data/set.jsonl", "sha256": "x", "items": 1}}}))
    payload = build_payload(results=results, summary=summary)
    assert payload["batch"]["details"][0]["prompt"] == "named prompt"
    assert "named by the summary" in payload["sources"]["dataset"]
    summary.write_bytes(orjson.dumps({"results": 1, "items": 1, "ok": 1, "error": 0, "run": {"dataset": {"path": "data/missing.jsonl"}}}))
    assert build_payload(results=results, summary=summary)["batch"]["has_prompts"] is False


# ---- the compare command ------------------------------------------------------------------


def test_compare_cli_json_and_text(tmp_path: Path) -> None:
    base = write(tmp_path / "base.jsonl", [scored("a", {"exact": 1}), scored("b", {"exact": 0}), scored("c", {"exact": 1})])
    cand = write(tmp_path / "cand.jsonl", [scored("a", {"exact": 0}), scored("b", {"exact": 1}), scored("d", {"exact": 1})])
    done = cli("compare", base, cand, "--json")
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)  # ONE JSON document on stdout
    assert set(doc) == {"pairs", "only_in_base", "only_in_candidate", "status_changes", "scorers", "usage", "latency",
                        "correction", "cluster_by", "leaderboard"}
    assert doc["pairs"] == 2 and doc["only_in_base"] == ["c"] and doc["only_in_candidate"] == ["d"]
    exact = doc["scorers"]["exact"]
    assert set(exact) == {"n", "mean_base", "mean_candidate", "diff", "ci95", "p_value", "regressions", "improvements",
                          "stderr", "test", "p_adjusted", "strict"}
    assert exact["regressions"] == ["a"] and exact["improvements"] == ["b"] and exact["p_value"] == 1.0
    text = cli("compare", base, cand)
    assert text.returncode == 0 and "regressions (1): a" in text.stdout and "improvements (1): b" in text.stdout
    page = cli("compare", base, cand, "--out", tmp_path / "out" / "c.html", "--seed", "3")
    assert page.returncode == 0 and (tmp_path / "out" / "c.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert cli("compare", base, cand, "--json", "--seed", "3").stdout == cli("compare", base, cand, "--json", "--seed", "3").stdout


def test_compare_cli_bad_input(tmp_path: Path) -> None:
    base = write(tmp_path / "base.jsonl", [scored("a", {"exact": 1})])
    other = write(tmp_path / "other.jsonl", [scored("z", {"exact": 1})])
    dataset = write(tmp_path / "dataset.jsonl", [{"id": "a", "prompt": "p"}])
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"not json\n{}\n")
    cases = [
        ((base, other), "no item id in common"),
        ((base, dataset), "not a result line"),
        ((base, garbage), "line 1"),
        ((base, tmp_path / "missing.jsonl"), "does not exist"),
        ((base, base, "--score", "nope"), "'nope' is in neither run"),
        ((base, base, "--epoch-reducer", "median"), "--epoch-reducer"),
    ]
    for args, message in cases:
        done = cli("compare", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert done.stdout == ""
    report = cli("report", base, "--compare", other, "--out", tmp_path / "r.html")
    assert report.returncode == 2 and "no item id in common" in report.stderr
    assert not (tmp_path / "r.html").exists()
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_compare_scores_unscored_runs_with_the_dataset(eval_runs: EvalRuns, tmp_path: Path) -> None:
    """Raw (unscored) results of both real runs, scored by `compare --score ... --dataset` as `score` would."""
    base_raw, candidate_raw = eval_runs.directory / "base-raw.jsonl", eval_runs.directory / "candidate-raw.jsonl"
    before = base_raw.read_bytes()
    done = cli("compare", base_raw, candidate_raw, "--score", "exact", "--score", "includes", "--dataset", eval_runs.dataset, "--json")
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert list(doc["scorers"]) == ["exact", "includes"]
    expected = eval_runs.compare_json["scorers"]  # the scored runs, compared without re-scoring
    for name in ("exact", "includes"):  # p_adjusted: over the scorers compared (two here)
        assert {k: v for k, v in doc["scorers"][name].items() if k != "p_adjusted"} == {
            k: v for k, v in expected[name].items() if k != "p_adjusted"}
    assert base_raw.read_bytes() == before  # the inputs are only read
    missing = cli("compare", base_raw, candidate_raw, "--score", "exact")
    assert missing.returncode == 2 and "give --dataset DATASET" in missing.stderr
    unknown = cli("compare", base_raw, candidate_raw, "--score", "nonsense-scorer", "--dataset", eval_runs.dataset)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr


def test_compare_never_writes_over_an_input(tmp_path: Path) -> None:
    base = write(tmp_path / "base.jsonl", [scored("a", {"exact": 1})])
    cand = write(tmp_path / "cand.jsonl", [scored("a", {"exact": 0})])
    before = cand.read_bytes()
    done = cli("compare", base, cand, "--out", cand)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert cand.read_bytes() == before
    from dsh_orchestra.report import write_compare

    with pytest.raises(ValueError):
        write_compare(base, base=base, candidate=cand)
    assert orjson.loads(base.read_bytes().splitlines()[0])["id"] == "a"

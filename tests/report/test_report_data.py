"""Report data and escaping, without a browser: aggregation, safe embedding, inputs, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from report_support import cli
from dsh_orchestra.batch._transcripts import transcript_name
from dsh_orchestra.report import ReportInputError, build_payload, embed_json, latency_stats, render_html, write_report
from dsh_orchestra.report._data import MAX_ERROR_ITEMS, prompt_text
from dsh_orchestra.report._markup import Markup, join, tag


def line(item_id: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": item_id, "status": "ok", "session_id": f"s-{item_id}", "final_response": f"answer {item_id}",
        "finish_reason": "completed", "subagents": [], "approvals": [], "attempts": 1, "duration_s": 0.5,
        "error": None, "metadata": {},
    }
    base.update(fields)
    return base


def write_lines(path: Path, lines: list[dict[str, Any]], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in lines) + tail)
    return path


@pytest.mark.parametrize("text", ["</script><script>alert(1)</script>", "<!-- x", "a\u2028b\u2029c", "]]> & <b>", "</SCRIPT >"])
def test_embedded_json_cannot_end_the_script_block(text: str) -> None:
    embedded = embed_json({"k": text, text: [text]})
    assert "<" not in embedded and ">" not in embedded and "&" not in embedded
    assert "\u2028" not in embedded and "\u2029" not in embedded
    assert json.loads(embedded) == {"k": text, text: [text]}


def test_markup_escapes_text_and_attributes() -> None:
    built = tag("p", {"title": '"><script>', "data-x": "a&b", "hidden": True, "skip": None}, "<b>", Markup("<i>ok</i>"))
    # markupsafe spells the double quote &#34; (html.escape said &quot;: the same character)
    assert built == '<p title="&#34;&gt;&lt;script&gt;" data-x="a&amp;b" hidden>&lt;b&gt;<i>ok</i></p>'


def test_markup_stays_safe_when_plain_text_is_added() -> None:
    """Adding or formatting a plain str into Markup escapes the str (a str subclass of our own
    returned a plain str there, and the text went out unescaped)."""
    safe = Markup("<b>ok</b>")
    joined = safe + "<script>x</script>"
    assert isinstance(joined, Markup) and joined == "<b>ok</b>&lt;script&gt;x&lt;/script&gt;"
    assert "<img onerror=1>" + safe == "&lt;img onerror=1&gt;<b>ok</b>"
    assert Markup("<p>{}</p>").format("<i>") == "<p>&lt;i&gt;</p>"
    assert join([safe, "<x>", tag("i", None, "&")]) == "<b>ok</b>&lt;x&gt;<i>&amp;</i>"


def test_latency_stats() -> None:
    values = [0.1 * i for i in range(1, 101)] + [50.0]
    stats = latency_stats(values)
    assert stats["count"] == 101 and stats["min"] == pytest.approx(0.1) and stats["max"] == 50.0
    assert stats["p50"] == pytest.approx(5.1)
    assert stats["p50"] <= stats["p90"] <= stats["p95"] <= stats["p99"] <= stats["max"]
    histogram = stats["histogram"]
    assert sum(histogram["counts"]) == 101
    assert len(histogram["edges"]) == len(histogram["counts"]) + 1
    assert histogram["overflow"] is True and histogram["counts"][-1] >= 1  # 50 s falls in the last bar
    assert latency_stats([])["histogram"] is None
    same = latency_stats([2.0, 2.0, 2.0])["histogram"]
    assert sum(same["counts"]) == 3


def test_payload_aggregates(tmp_path: Path) -> None:
    lines = [line(f"ok-{i}", duration_s=0.1 * (i + 1)) for i in range(5)]
    lines += [line(f"bad-{i}", status="error", finish_reason="error", final_response="",
                   error={"type": "TurnFailed", "message": f"boom {i % 2}"}) for i in range(MAX_ERROR_ITEMS + 5)]
    lines.append(line("slow", status="error", finish_reason=None, error={"type": "TimeoutError", "message": "late"}))
    lines.append(line("asks", approvals=[
        {"tool_name": "bash", "call_id": "c1", "outcome": "allowed-once", "rule": "allow-bash"},
        {"tool_name": "write", "call_id": "c2", "outcome": "rejected", "rule": "default"},
    ], subagents=[{"child_session_id": "k1", "status": "ok", "stop_reason": "completed", "text": "x" * 50}]))
    results = write_lines(tmp_path / "results.jsonl", lines)
    payload = build_payload(results=results, max_text=10)
    batch = payload["batch"]
    assert batch["summary_source"] == "results" and batch["summary"]["total"] == len(lines)
    assert batch["status"] == {"error": MAX_ERROR_ITEMS + 6, "ok": 6}
    assert batch["finish_reasons"]["none"] == 1
    turn_failed, timeout = batch["errors"]
    assert turn_failed["type"] == "TurnFailed" and turn_failed["count"] == MAX_ERROR_ITEMS + 5
    assert len(turn_failed["items"]) == MAX_ERROR_ITEMS  # listed up to the cap, all counted
    assert {m["message"] for m in turn_failed["messages"]} == {"boom 0", "boom 1"}
    assert timeout == {"type": "TimeoutError", "count": 1, "items": ["slow"], "messages": [{"message": "late", "count": 1}], "distinct_messages": 1}
    approvals = batch["approvals"]
    assert approvals["source"] == "results" and approvals["total"] == 2
    assert approvals["by_tool"] == {"bash": {"allowed-once": 1}, "write": {"rejected": 1}}
    assert approvals["by_rule"] == {"allow-bash": {"allowed-once": 1}, "default": {"rejected": 1}}
    assert batch["subagents"]["total"] == 1 and batch["subagents"]["items_with"] == 1
    assert len(batch["rows"]) == len(lines) == len(batch["details"])
    asks = batch["details"][-1]
    assert asks["final_response"] == "answer ask" and asks["final_response_cut"] == 1  # max_text=10
    assert asks["subagents"][0]["text"] == "x" * 10
    assert "prompt" not in asks  # no dataset given: no prompt at all


def test_audit_log_and_dataset(tmp_path: Path) -> None:
    results = write_lines(tmp_path / "results.jsonl", [line("a"), line("b")])
    audit = write_lines(tmp_path / "audit.jsonl", [
        {"time": "t", "runtime": "sim#0", "session": "s-a", "tool": "bash", "call_id": "1", "reason": "", "outcome": "allowed-once",
         "rule": "allow-bash", "note": "", "latency_s": 0.002, "error": None},
        {"time": "t", "runtime": "sim#0", "session": "s-b", "tool": "bash", "call_id": "2", "reason": "", "outcome": "rejected",
         "rule": "fail-closed", "note": "", "latency_s": 30.0, "error": "policy took longer than its deadline of 30 s"},
    ], tail=b'{"time": "torn')
    dataset = write_lines(tmp_path / "dataset.jsonl", [
        {"id": "a", "prompt": "plain prompt"},
        {"id": "b", "prompt": [{"type": "text", "text": "look"}, {"type": "image", "data": "xx", "mimeType": "image/png"}]},
    ])
    batch = build_payload(results=results, audit=audit, dataset=dataset)["batch"]
    assert batch["approvals"]["source"] == "audit" and batch["approvals"]["total"] == 2  # torn last line skipped
    assert batch["approvals"]["by_rule"]["fail-closed"] == {"rejected": 1}
    assert batch["approvals"]["errors"] == [{"message": "policy took longer than its deadline of 30 s", "count": 1}]
    assert batch["approvals"]["latency"]["max"] == 30.0
    assert [d["prompt"] for d in batch["details"]] == ["plain prompt", "look\n[image]"]
    assert prompt_text(42) == "42"


def test_transcript_links_are_relative_to_the_report(tmp_path: Path) -> None:
    results = write_lines(tmp_path / "results.jsonl", [line("with/slash"), line("missing")])
    transcripts = tmp_path / "run" / "transcripts"
    transcripts.mkdir(parents=True)
    (transcripts / transcript_name("with/slash")).write_bytes(b"")
    batch = build_payload(results=results, transcripts=transcripts, out=tmp_path / "site" / "deep" / "r.html")["batch"]
    link = batch["details"][0]["transcript"]
    assert link == f"../../run/transcripts/{transcript_name('with/slash')}"
    assert batch["details"][1]["transcript"] is None


def test_inputs_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ReportInputError, match="give a results file"):
        build_payload()
    with pytest.raises(ReportInputError, match="does not exist"):
        build_payload(results=tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(orjson.dumps(line("a")) + b'\nnot json\n' + orjson.dumps(line("b")) + b"\n")
    with pytest.raises(ReportInputError, match="line 2"):
        build_payload(results=bad)
    torn = write_lines(tmp_path / "torn.jsonl", [line("a")], tail=b'{"id": "b", "sta')
    assert [r[0] for r in build_payload(results=torn)["batch"]["rows"]] == ["a"]
    (tmp_path / "wf.json").write_text('{"name": 3}')
    with pytest.raises(ReportInputError, match="wf.json"):
        build_payload(workflow=tmp_path / "wf.json")
    with pytest.raises(ValueError, match="max_text"):
        build_payload(results=torn, max_text=0)


def test_html_has_a_strict_content_security_policy(tmp_path: Path) -> None:
    results = write_lines(tmp_path / "results.jsonl", [line("a", final_response="</script><script>x()</script>")])
    html = render_html(build_payload(results=results))
    assert "script-src 'nonce-" in html and "default-src 'none'" in html
    assert html.count("<script") == 2  # the data block and the one nonce'd script
    assert "</script><script>x()" not in html


def test_cli_report(tmp_path: Path) -> None:
    results = write_lines(tmp_path / "results.jsonl", [line("a")])
    done = cli("report", results, "--out", tmp_path / "out" / "r.html", "--title", "My <run>")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "out" / "r.html").read_text(encoding="utf-8")
    assert "<title>My &lt;run&gt;</title>" in html
    missing = cli("report", tmp_path / "nope.jsonl")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    nothing = cli("report")
    assert nothing.returncode == 2 and "give a results file" in nothing.stderr


def test_write_report_replaces_the_file(tmp_path: Path) -> None:
    results = write_lines(tmp_path / "results.jsonl", [line("a")])
    out = tmp_path / "r.html"
    out.write_text("old")
    assert write_report(out, results=results) == out
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert not list(tmp_path.glob(".*.tmp"))


def test_report_refuses_files_that_are_not_what_they_are_given_as(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A dataset given as results, results with wrong field types, a dataset as the summary, results
    as the audit log or as the dataset, a file as the transcripts directory: exit 2 naming the file,
    the line and the field; no page is written."""
    from dsh_orchestra.cli import main

    results = write_lines(tmp_path / "results.jsonl", [line("a"), line("b")])
    dataset = write_lines(tmp_path / "dataset.jsonl", [{"id": "a", "prompt": "p"}])
    wrong = write_lines(tmp_path / "wrong.jsonl", [line("a"), line("b", duration_s="slow")])
    out = tmp_path / "report.html"
    cases = [
        ([str(dataset)], ["dataset.jsonl", "line 1", "'status'"]),
        ([str(wrong)], ["wrong.jsonl", "line 2", "'duration_s'"]),
        ([str(write_lines(tmp_path / "w2.jsonl", [line("a", subagents=[{"text": 1}])]))], ["line 1", "subagents[0].text"]),
        ([str(results), "--summary", str(dataset)], ["dataset.jsonl", "summary"]),
        ([str(results), "--audit", str(results)], ["results.jsonl", "line 1", "audit log"]),
        ([str(results), "--dataset", str(results)], ["results.jsonl", "line 1", "dataset"]),
        ([str(results), "--transcripts", str(results)], ["results.jsonl", "not a directory"]),
    ]
    for args, needles in cases:
        assert main(["report", *args, "--out", str(out)]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("dsh-orchestra: ") and "Traceback" not in err
        for needle in needles:
            assert needle in err, (needle, err)
        assert not out.exists()
    assert main(["report", str(results), "--out", str(out)]) == 0 and out.is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_secrets_of_the_environment_are_redacted_from_an_older_results_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A results file written without redaction (an older version, another tool) carries the key:
    the page does not (the environment's secret-named values and registered secrets)."""
    key, token = "sk-oldrunkey-1234567890abcdef", "tok-registered-0987654321"
    monkeypatch.setenv("DEEPSEEK_API_KEY", key)
    monkeypatch.setenv("SOME_AUTH", "1")  # too short to be a secret: "1" stays readable
    results = write_lines(tmp_path / "results.jsonl", [
        line("a", final_response=f"the key is {key}", metadata={key: token}),
        line(key, status="error", final_response=None, error={"type": "X", "message": f"{key} and {token}"}),
    ])
    from dsh_orchestra import register_secrets
    from dsh_orchestra._logging import forget_secrets
    register_secrets([token])
    try:
        page = write_report(tmp_path / "report.html", results=results).read_text(encoding="utf-8")
        done = cli("report", str(results), "--out", str(tmp_path / "cli.html"))
    finally:
        forget_secrets()
    assert done.returncode == 0, done.stderr
    for html in (page, (tmp_path / "cli.html").read_text(encoding="utf-8")):
        assert key not in html and "oldrunkey" not in html
        assert "the key is ***" in html
    assert token not in page
    explicit = write_report(tmp_path / "explicit.html", results=results, secrets=[token]).read_text(encoding="utf-8")
    assert token not in explicit and key in explicit  # secrets= replaces the environment's
    from dsh_orchestra.report import write_compare
    base = write_lines(tmp_path / "base.jsonl", [line("a", final_response="plain"), line(key, final_response=key)])
    compared = write_compare(tmp_path / "compare.html", base=base, candidate=results).read_text(encoding="utf-8")
    assert key not in compared and "oldrunkey" not in compared

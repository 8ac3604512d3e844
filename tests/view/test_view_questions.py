"""Questions and answers on the item page (and in the static report): a REAL simulator batch
whose model asks the user a question (``ask_user_question``), answered by ``--answerer
first-option``, with transcripts: the question shows under the tool call that asked it, with
its options, the answer, the outcome and who answered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson

from playwright_browser import Browser
from report_support import cli
from view_support import RunningViewer

from dsh_orchestra.batch import read_transcript, transcript_name
from dsh_orchestra.report import line_entries, transcript_entries

SCENARIO = '''
default_reply = "plain"

[[rules]]
name = "ask"
match = "ASK"
reply = "deploying to {answer}"
question = { id = "env", question = "Which <b>environment</b>?", options = ["staging", "production"] }
'''


def test_question_and_answer_on_the_item_page(browser: Browser, viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    (tmp_path / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    (tmp_path / "dataset.jsonl").write_bytes(orjson.dumps({"id": "ask-1", "prompt": "ASK where to deploy"}) + b"\n")
    done = cli("batch", "dataset.jsonl", "--out", "results.jsonl", "--runtime", "sim", "--script", "scenario.toml",
               "--answerer", "first-option", "--transcripts", "transcripts", "--summary", "summary.json", "--no-progress",
               cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    [line] = [orjson.loads(raw) for raw in (tmp_path / "results.jsonl").read_bytes().splitlines()]
    assert line["final_response"] == "deploying to staging"
    [record] = line["questions"]
    assert (record["question"], record["outcome"], record["selected"]) == ("Which <b>environment</b>?", "answered", ["staging"])

    # the builders: under the question tool's call from the transcript; from the line alone too
    records = read_transcript(tmp_path / "transcripts" / transcript_name("ask-1"))
    entries = transcript_entries(records, line)["entries"]
    [call] = [e for e in entries if e["k"] == "tool" and e["name"] == "ask_user_question"]
    [asked] = call["questions"]
    assert (asked["text"], asked["options"], asked["answer"], asked["outcome"]) == (
        "Which <b>environment</b>?", ["staging", "production"], "staging", "answered")
    assert [e["k"] for e in line_entries(line, "ASK where to deploy")["entries"]] == ["user", "question", "text"]

    v = viewer(tmp_path / "results.jsonl")
    page = browser.new_page(1280, 900)
    page.goto(v.page("/run/0/item", id="ask-1"))
    page.wait_for("document.body.dataset.ready === '1'", timeout=30)
    shown = page.evaluate("Array.from(document.querySelectorAll('.entry.tool .entry.question')).map(q =>"
                          " [q.querySelector('pre.q').textContent, q.querySelector('.options').textContent, q.querySelector('pre.a').textContent,"
                          " q.querySelectorAll('.who')[1].textContent])")
    assert shown == [["Which <b>environment</b>?", "options: staging | production", "staging", "answer · answered · by first-option"]]
    assert page.evaluate("document.querySelectorAll('.entry.question b').length") == 0  # the markup is text
    assert page.problems() == []

    # the static report shows it too
    done = cli("report", "results.jsonl", "--summary", "summary.json", "--transcripts", "transcripts", "--out", "report.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page.goto((tmp_path / "report.html").as_uri())
    page.wait_for("document.body.dataset.ready === '1'")
    page.evaluate("document.querySelector('#items-table tbody tr').click()")
    page.wait_for("!!document.querySelector('.entry.question pre.a')")
    assert page.evaluate("document.querySelector('.entry.question pre.a').textContent") == "staging"

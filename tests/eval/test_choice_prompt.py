"""The model sees the choices: an item with ``choices`` is sent through the multiple-choice
template (replaceable, or ``none``, in the scoring file), which is in the run's fingerprint;
the transcript shows the rendered prompt."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dsh_orchestra.eval import DEFAULT_TEMPLATE, ScoringError, TemplateError, check_template, parse_scoring, render_prompt
from eval_support import lines_of, run_cli, write_jsonl

CHOICES = ["Sydney", "Canberra", "Melbourne"]


def test_the_default_template_letters_the_options_and_asks_for_answer() -> None:
    sent = render_prompt(DEFAULT_TEMPLATE, "What is the capital of Australia?", CHOICES)
    assert sent == (
        'Answer the following multiple choice question. The last line of your response must be of the form '
        '"ANSWER: <letter>" (without quotes), where <letter> is one of A, B, C.\n\n'
        "What is the capital of Australia?\n\nA) Sydney\nB) Canberra\nC) Melbourne"
    )


def test_no_choices_or_none_sends_the_prompt_as_written() -> None:
    assert render_prompt(DEFAULT_TEMPLATE, "2+2?", None) == "2+2?"
    assert render_prompt(DEFAULT_TEMPLATE, "2+2?", []) == "2+2?"
    assert render_prompt("none", "Q?", CHOICES) == "Q?"


def test_a_custom_template_and_content_blocks() -> None:
    template = "{prompt} | {letters} | {choices} | {other braces, 1} stay"
    assert check_template(template) == template
    assert render_prompt(template, "Q?", ["x", "y"]) == "Q? | A, B | A) x\nB) y | {other braces, 1} stay"
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    blocks = render_prompt("{prompt}: {choices}", [image, {"type": "text", "text": "Which?"}], ["x"])
    assert blocks == [image, {"type": "text", "text": "Which?: A) x"}]
    assert render_prompt("{prompt}[{choices}]", [image], ["x"]) == [{"type": "text", "text": "[A) x]"}, image]


@pytest.mark.parametrize(("template", "problem"), [
    ("{prompt} only", "needs {choices}"),
    ("{choices} only", "needs {prompt}"),
    ("{prompt} {choices} {answer}", "unknown placeholder(s) ['{answer}']"),
    ("", "non-empty string"),
    (3, "non-empty string"),
])
def test_bad_templates_are_refused(template: object, problem: str) -> None:
    with pytest.raises(TemplateError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        check_template(template)
    with pytest.raises(ScoringError, match=r"\[prompt\] template"):
        parse_scoring({"prompt": {"template": template}})


def test_the_scoring_file_sets_the_template() -> None:
    assert parse_scoring({}).prompt_template is None
    assert parse_scoring({"prompt": {"template": "none"}}).prompt_template == "none"
    assert parse_scoring({"prompt": {"template": "{prompt}\n{choices}"}}).prompt_template == "{prompt}\n{choices}"
    with pytest.raises(ScoringError, match="unknown key"):
        parse_scoring({"prompt": {"templat": "none"}})


SCENARIO = """default_reply = "I am not sure."
[[rules]]
name = "mc"
match = "B) Canberra"
reply = "ANSWER: B"
"""


@pytest.mark.parametrize("template", [None, "none", "Options:\n{choices}\nQuestion: {prompt}\nOne of {letters}."])
def test_a_batch_sends_the_rendered_prompt_and_records_the_template(tmp_path: Path, template: str | None) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [
        {"id": "q1", "prompt": "What is the capital of Australia?", "choices": CHOICES, "target": "B"},
        {"id": "q2", "prompt": "2+2?", "target": "4"},
    ])
    (tmp_path / "sc.toml").write_text(SCENARIO)
    args = ["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--script", str(tmp_path / "sc.toml"),
            "--score", "choice", "--transcripts", str(tmp_path / "tr"), "--no-progress", "--json"]
    if template is not None:
        (tmp_path / "scoring.toml").write_text(f"[prompt]\ntemplate = {json.dumps(template)}\n")
        args += ["--scoring", str(tmp_path / "scoring.toml")]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["run"]["prompt_template"] == (template or DEFAULT_TEMPLATE)
    lines = {line["id"]: line for line in lines_of(tmp_path / "r.jsonl")}
    transcript = gzip.open(tmp_path / "tr" / "q1.jsonl.gz").read().decode()
    plain = gzip.open(tmp_path / "tr" / "q2.jsonl.gz").read().decode()
    assert '"text":"2+2?"' in plain  # no choices: as written
    if template == "none":
        assert lines["q1"]["scores"]["choice"]["value"] == 0.0
        assert '"text":"What is the capital of Australia?"' in transcript
    else:
        assert lines["q1"]["scores"]["choice"] == {"value": 1.0, "answer": "B", "explanation": None}
        sent = render_prompt(template or DEFAULT_TEMPLATE, "What is the capital of Australia?", CHOICES)
        assert json.dumps(sent)[1:-1] in transcript  # the transcript shows what was sent

"""Two scored simulator runs of one dataset (a baseline and a candidate with another scenario),
for the evaluation report and the comparison page.

The runs are real batches on the simulator. Scoring: the result lines get their ``scores``
(issue 15's contract: ``{"value", "answer", "explanation"}`` per scorer) from ``score_line``
below (the built-in scorers' normalization and token F1), the summary its ``scores``,
``groups`` and ``run`` from ``dsh_orchestra.eval``'s ScoreTally, as ``batch --score`` writes
them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import attrs
import orjson

from dsh_orchestra.eval import ScoreTally, normalize, token_f1
from report_support import POLICY, cli

_COMMON = r'''
[[rules]]
name = "agent"
match = "AGENT"
thinking = "I should ask a helper, then run a command."
reply = "delegated; bash was {outcome}"
after_subagents = "the helper says yes"
approval = {tool = "bash", reason = "needs wider access"}
[[rules.spawn]]
description = "check the facts"
prompt = "helper task"
reply = "helper says yes"

[[rules]]
name = "html"
match = "HTML"
reply = "<img src=x onerror=\"window.pwned=2\"><script>window.pwned=1</script> yes & <b>bold</b>"
'''

BASE_SCENARIO = 'default_reply = "I do not know"\n' + _COMMON + r'''
[[rules]]
name = "facts-known"
regex = "^FACT ([0-6])$"
reply = "yes"

[[rules]]
name = "numbers"
regex = "^NUM [0-2]$"
reply = "It is 42."

[[rules]]
name = "numbers-off"
regex = "^NUM"
reply = "It is 41, I think."

[[rules]]
name = "broken"
match = "FLAKY"
fail = "http-400"
'''

CANDIDATE_SCENARIO = 'default_reply = "I do not know"\n' + _COMMON + r'''
[[rules]]
name = "facts-known"
regex = "^FACT ([0-4]|7|8|9|10)$"
reply = "Yes"

[[rules]]
name = "numbers"
regex = "^NUM [0-4]$"
reply = "42"

[[rules]]
name = "numbers-off"
regex = "^NUM"
reply = "forty-one"

[[rules]]
name = "flaky-fixed"
match = "FLAKY"
reply = "yes"
'''

HOSTILE_PROMPT = "HTML <b>bold</b> </script><script>window.pwned=3</script><!--"
HOSTILE_RESPONSE = '<img src=x onerror="window.pwned=2"><script>window.pwned=1</script> yes & <b>bold</b>'


def dataset_items() -> list[dict[str, Any]]:
    """Facts (target yes), numbers (target 42), an agent item, hostile HTML, a flaky item."""
    items: list[dict[str, Any]] = [
        {"id": f"fact-{i:02d}", "prompt": f"FACT {i}", "target": "yes", "metadata": {"topic": "fact"}} for i in range(12)
    ]
    items += [{"id": f"num-{i}", "prompt": f"NUM {i}", "target": "42", "metadata": {"topic": "number"}} for i in range(6)]
    items += [
        {"id": "agent-1", "prompt": "AGENT please check", "target": "yes", "metadata": {"topic": "agent"}},
        {"id": "html-1", "prompt": HOSTILE_PROMPT, "target": "yes", "metadata": {"topic": "agent"}},
        {"id": "flaky-1", "prompt": "FLAKY one", "target": "yes", "metadata": {"topic": "fact"}},
    ]
    return items


# ---- scoring with the built-in scorers' functions (normalized exact, includes, SQuAD token F1) ----


def score_line(line: dict[str, Any], target: str) -> dict[str, Any]:
    """``scores`` of one result line: exact, includes, f1 (all null for an item in error)."""
    response = line.get("final_response")
    if line["status"] != "ok" or not isinstance(response, str):
        return {name: {"value": None, "answer": None, "explanation": "the item ended in error"} for name in ("exact", "includes", "f1")}
    return {
        "exact": {"value": int(normalize(response) == normalize(target)), "answer": None, "explanation": None},
        "includes": {"value": int(normalize(target) in normalize(response)), "answer": None, "explanation": None},
        "f1": {"value": token_f1(response, target), "answer": None, "explanation": f"token F1 against {target!r}"},
    }


@attrs.frozen
class EvalRun:
    results: Path
    summary: Path
    transcripts: Path

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.results.read_bytes().splitlines() if line.strip()]

    def summary_data(self) -> dict[str, Any]:
        data: dict[str, Any] = orjson.loads(self.summary.read_bytes())
        return data


def run_scored(directory: Path, name: str, scenario: str, dataset: Path) -> EvalRun:
    """One real simulator batch of ``dataset``, scored; files ``<name>.jsonl``, ``<name>-summary.json``."""
    (directory / f"{name}.toml").write_text(scenario, encoding="utf-8")
    (directory / "policy.toml").write_text(POLICY, encoding="utf-8")
    raw = directory / f"{name}-raw.jsonl"
    run = cli(
        "batch", dataset, "--out", raw, "--runtime", "sim", "--script", f"{name}.toml", "--policy", "policy.toml",
        "--summary", f"{name}-raw-summary.json", "--transcripts", f"{name}-transcripts", "--timeout", "5", "--retries", "0",
        "--no-progress", cwd=directory,
    )
    assert run.returncode in (0, 1), run.stderr
    targets = {item["id"]: item["target"] for item in dataset_items()}
    lines = [orjson.loads(line) for line in raw.read_bytes().splitlines() if line.strip()]
    tally = ScoreTally(["exact", "includes", "f1"], seed=0)
    groups = ScoreTally(["exact", "includes", "f1"], seed=0, group_by="topic")
    for line in lines:
        line["scores"] = score_line(line, targets[line["id"]])
        line["usage"] = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        tally.add_line(line)
        groups.add_line(line)
    results = directory / f"{name}.jsonl"
    results.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    summary = orjson.loads((directory / f"{name}-raw-summary.json").read_bytes())
    summary["scores"] = tally.scores()
    summary["groups"] = groups.groups()
    summary["usage"] = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    summary["run"] = {
        "dataset": {"path": dataset.name, "sha256": hashlib.sha256(dataset.read_bytes()).hexdigest(), "items": len(lines)},
        "scorers": ["exact", "includes", "f1"], "epochs": 1, "reducer": "mean", "seed": 0,
    }
    path = directory / f"{name}-summary.json"
    path.write_bytes(orjson.dumps(summary))
    return EvalRun(results=results, summary=path, transcripts=directory / f"{name}-transcripts")

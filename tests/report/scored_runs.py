"""Two scored simulator runs of one dataset (a baseline and a candidate with another scenario),
for the evaluation report and the comparison page.

The runs are real batches on the simulator, scored by the batch (``--score``); the summary
holds the scores, groups and run metadata the batch wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import orjson

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


@attrs.frozen
class EvalRuns:
    """The two scored runs, the candidate's report (with the comparison) and the comparison page."""

    directory: Path
    dataset: Path
    base: EvalRun
    candidate: EvalRun
    report: Path
    compare_page: Path
    compare_json: dict[str, Any]


SCORERS = ("exact", "includes", "f1")

# No item of these runs hangs, so none may reach the per-item --timeout: it only stops a hang bug.
# Items take milliseconds alone, but on a loaded machine the simulator's session-store writes
# were measured stalling it for over a second each (disk contention); 5 s (before) was too close.
ITEM_TIMEOUT = "60"


def run_scored(directory: Path, name: str, scenario: str, dataset: Path, *, exit_status: int) -> EvalRun:
    """One real simulator batch of ``dataset``, scored by the batch itself (``--score exact
    --score includes --score f1 --group-by topic``); files ``<name>.jsonl``,
    ``<name>-summary.json``, ``<name>-transcripts/``, and ``<name>-raw.jsonl``: the same lines
    without their scores (for `compare --score ... --dataset`). The batch must exit with
    ``exit_status`` (1: an item ended in error)."""
    (directory / f"{name}.toml").write_text(scenario, encoding="utf-8")
    (directory / "policy.toml").write_text(POLICY, encoding="utf-8")
    results = directory / f"{name}.jsonl"
    run = cli(
        "batch", dataset, "--out", results, "--runtime", "sim", "--script", f"{name}.toml", "--policy", "policy.toml",
        *(arg for scorer in SCORERS for arg in ("--score", scorer)), "--group-by", "topic",
        "--summary", f"{name}-summary.json", "--transcripts", f"{name}-transcripts", "--timeout", ITEM_TIMEOUT, "--retries", "0",
        "--no-progress", cwd=directory,
    )
    assert run.returncode == exit_status, run.stderr
    lines = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
    assert all(set(line["scores"]) == set(SCORERS) for line in lines)
    raw = directory / f"{name}-raw.jsonl"
    raw.write_bytes(b"".join(orjson.dumps({k: v for k, v in line.items() if k != "scores"}) + b"\n" for line in lines))
    return EvalRun(results=results, summary=directory / f"{name}-summary.json", transcripts=directory / f"{name}-transcripts")

"""Fixtures of the report tests.

* ``sim_run`` (session): ONE real batch run on the simulator, as a subprocess of the
  ``dsh-orchestra`` command (results, summary, audit log, transcripts), and its report.
* ``eval_runs`` (session): two real scored simulator runs (a baseline and a candidate with
  another scenario), the candidate's report with the comparison, and ``compare``'s outputs.
* ``browser`` (function): the system Chromium driven by Playwright (``playwright_browser``),
  closed after the test (a fresh one per test: the suite's leak check allows no child process
  across tests).
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from playwright_browser import Browser, open_browser
from scored_runs import BASE_SCENARIO, CANDIDATE_SCENARIO, EvalRuns, run_scored
from scored_runs import dataset_items as eval_dataset_items
from report_support import HANG_TIMEOUT, POLICY, SCRIPT, SimRun, cli, dataset_items


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> SimRun:
    """The real batch run on the simulator, then ``dsh-orchestra report`` over its files."""
    directory = tmp_path_factory.mktemp("sim-batch")
    (directory / "scenario.toml").write_text(SCRIPT, encoding="utf-8")
    (directory / "policy.toml").write_text(POLICY, encoding="utf-8")
    dataset = directory / "dataset.jsonl"
    dataset.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in dataset_items()))
    run = cli(
        "batch", dataset, "--out", "results.jsonl", "--runtime", "sim", "--script", "scenario.toml",
        "--policy", "policy.toml", "--audit", "audit.jsonl", "--summary", "summary.json",
        "--transcripts", "transcripts", "--timeout", str(HANG_TIMEOUT), "--retries", "0", "--no-progress",
        cwd=directory,
    )
    assert run.returncode == 1, run.stderr  # fail-1 and hang-1 end in error
    report = cli(
        "report", "results.jsonl", "--summary", "summary.json", "--audit", "audit.jsonl", "--dataset", "dataset.jsonl",
        "--transcripts", "transcripts", "--out", "site/report.html", cwd=directory,
    )
    assert report.returncode == 0, report.stderr
    return SimRun(
        directory=directory, dataset=dataset, results=directory / "results.jsonl", summary=directory / "summary.json",
        audit=directory / "audit.jsonl", transcripts=directory / "transcripts", report=directory / "site" / "report.html",
        returncode=run.returncode, stderr=run.stderr,
    )


@pytest.fixture
def browser() -> Iterator[Browser]:
    """The system Chromium for this test (skipped locally when none is installed; CI installs it)."""
    with open_browser() as instance:
        yield instance


@pytest.fixture(scope="session")
def eval_runs(tmp_path_factory: pytest.TempPathFactory) -> EvalRuns:
    """Two real scored simulator runs of one dataset, the candidate's report (prompts from the
    dataset its summary names, conversations from its transcripts) and `compare`'s outputs."""
    directory = tmp_path_factory.mktemp("eval-runs")
    dataset = directory / "dataset.jsonl"
    dataset.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in eval_dataset_items()))
    base = run_scored(directory, "base", BASE_SCENARIO, dataset, exit_status=1)  # its flaky item fails
    candidate = run_scored(directory, "candidate", CANDIDATE_SCENARIO, dataset, exit_status=0)
    report = cli(
        "report", candidate.results.name, "--summary", candidate.summary.name, "--transcripts", candidate.transcripts.name,
        "--compare", base.results.name, "--group-by", "topic", "--out", "site/report.html", cwd=directory,
    )
    assert report.returncode == 0, report.stderr
    compared = cli("compare", base.results.name, candidate.results.name, "--json", "--out", "site/compare.html", "--dataset", dataset.name,
                   cwd=directory)
    assert compared.returncode == 0, compared.stderr
    return EvalRuns(
        directory=directory, dataset=dataset, base=base, candidate=candidate, report=directory / "site" / "report.html",
        compare_page=directory / "site" / "compare.html", compare_json=orjson.loads(compared.stdout),
    )

"""Judges' model calls under ``--ray`` count and spend as on one machine: the real runtime on the
scripted model, through the CLI, the same batch locally and on one local Ray instance.

On one machine a judge scorer grades on the batch's pool, so its calls (sessions ``judge-...``)
go through the run's gateway: they are in the summary's ``model`` totals and under
``--max-total-tokens``, and not in the item's line ``model`` (that is the item's session and
its subagents'; the judge's tokens are the line's ``judge_usage``). Under Ray the judges run on
the driver, through a gateway of the run that is a member of the quota coordinator.

* ``test_judges_calls_count_in_the_run_totals_and_budget_as_on_one_machine``: three items
  graded by a judge: the Ray run's summary ``model`` (calls, tokens, cost, the budget's tokens)
  equals the local run's and counts every call the model answered, judges' included; each
  line's ``model``, ``scores`` and ``judge_usage`` equal the local run's; every judge's call
  reached the model with the real key (through a gateway), and the judges' runtime on the
  driver has the run's token and a loopback gateway's URL in its environment, never the key.
* ``test_a_refused_judges_call_cuts_its_item_on_ray_as_on_one_machine``: a budget below one
  call: the first item's own call reaches it, its judge's call is refused: no line, exit 4,
  ``cut_items`` 1, and the model never saw a judge's call; the same locally. ``--resume`` with
  a larger budget runs every item once, graded.
* ``test_a_judges_call_that_reaches_the_budget_stops_the_run_on_ray_as_on_one_machine``: the
  first item's call and its judge's reach the budget: the item keeps its line (graded), no
  other item starts, exit 4; the same locally (the driver's view of the budget and the
  judges' gateway tell each other what they know: they are in one process).
* ``test_judges_of_a_run_without_a_gateway_call_the_model_directly_on_ray_as_on_one_machine``:
  with ``--no-gateway`` the judges' runtime on the driver calls the model itself (its
  ``DEEPSEEK_BASE_URL`` is the model's), as the batch's runtimes the judges use locally.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from dsh_orchestra.testing import FakeModelServer, open_fake_model, parse_script

from scale_support import RayCluster, real_batch, write_dataset
from scored_scenario_support import PRICES, SCRIPT

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.integration]

KEY = "sk-rayjudge-test-real-key-0123456789abcdef"
ITEMS = [{"id": "a", "prompt": "What is the capital of France?", "target": "Paris"},
         {"id": "b", "prompt": "What is 6 x 7?", "target": "42"},
         {"id": "c", "prompt": "Who wrote it?", "target": "Homer"}]
TIMED = ("time_to_first_token_s", "call_duration_s")
TOTALS = ("calls", "upstream_calls", "cache_hits", "retries", "errors", "input_tokens", "output_tokens", "cost_usd")


def lines_of(path: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {line["id"]: line for line in lines}


def untimed(model: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model.items() if k not in TIMED}


async def batch(tmp_path: Path, name: str, base_url: str, ray: str | None, *flags: str) -> trio.CompletedProcess[bytes]:
    """``batch --runtime dsh --score judge`` into ``NAME.jsonl`` (summary ``NAME.json``), on Ray at ``ray``."""
    home = tmp_path / f"home-{name}"
    home.mkdir(exist_ok=True)
    return await real_batch(tmp_path, f"{name}.jsonl", f"{name}.json", str(home), "--score", "judge", "--prices", "prices.toml",
                            *flags, key=KEY, base_url=base_url, ray=ray)


async def stopped_by_the_budget(tmp_path: Path, model: FakeModelServer, address: str,
                                tokens: str) -> tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]:
    """The same batch with ``--max-total-tokens TOKENS``, locally then on Ray: each must stop on
    the budget (exit 4, work left); each run's requests at the model and its summary, by name."""
    seen: dict[str, list[Any]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for name, ray in (("local", None), ("ray", address)):
        before = len(model.requests)
        done = await batch(tmp_path, name, model.base_url, ray, "--concurrency", "1", "--max-total-tokens", tokens)
        assert done.returncode == 4, done.stderr.decode()[-3000:]
        assert b"nothing left to do" not in done.stderr  # the budget stopped it: work is left
        seen[name] = model.requests[before:]
        summaries[name] = json.loads((tmp_path / f"{name}.json").read_text())
    return seen, summaries


async def watch_driver_runtimes(home: Path, found: list[dict[str, str]]) -> None:
    """Collect, until cancelled, the environments of the runtimes (DSH_HOME ``home``) whose
    parent is the CLI (the driver): the judges' runtime; the actors' runtimes are Ray workers' children."""
    while True:
        for process in psutil.process_iter():
            try:
                environ = process.environ()
                if environ.get("DSH_HOME") != str(home):
                    continue
                parent = process.parent()
                if parent is not None and "from dsh_orchestra.cli import main" in " ".join(parent.cmdline()):
                    found.append(environ)
            except psutil.Error:
                continue
        await trio.sleep(0.3)


async def on_ray_watching_judges(tmp_path: Path, model: FakeModelServer, address: str, name: str,
                                 *flags: str) -> tuple[trio.CompletedProcess[bytes], list[dict[str, str]]]:
    """The batch on Ray, and the environments of the judges' runtime(s) its driver started."""
    judges: list[dict[str, str]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_driver_runtimes, tmp_path / f"home-{name}", judges)
        done = await batch(tmp_path, name, model.base_url, address, *flags)
        nursery.cancel_scope.cancel()
    return done, judges


def prepare(tmp_path: Path) -> None:
    write_dataset(tmp_path / "ds.jsonl", ITEMS)
    (tmp_path / "prices.toml").write_text(PRICES)


async def test_judges_calls_count_in_the_run_totals_and_budget_as_on_one_machine(
        ray_cluster: RayCluster, tmp_path: Path) -> None:
    prepare(tmp_path)
    seen: dict[str, list[Any]] = {}
    async with open_fake_model(parse_script(tomllib.loads(SCRIPT))) as model:
        done = await batch(tmp_path, "local", model.base_url, None, "--max-total-tokens", "100000")
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        seen["local"] = list(model.requests)
        done, judges = await on_ray_watching_judges(tmp_path, model, ray_cluster.address, "ray", "--max-total-tokens", "100000")
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        seen["ray"] = model.requests[len(seen["local"]):]
    assert judges, "the judges' runtime on the driver was not seen"
    for environ in judges:  # routed through a gateway of the run: its token, never the key
        assert not any(KEY in value for value in environ.values())
        url = environ["DEEPSEEK_BASE_URL"]
        assert url.startswith("http://127.0.0.1:") and url != model.base_url
    local, on_ray = lines_of(tmp_path / "local.jsonl"), lines_of(tmp_path / "ray.jsonl")
    assert set(local) == set(on_ray) == {"a", "b", "c"}
    assert [on_ray[i]["scores"]["judge"]["answer"] for i in "abc"] == ["correct", "incorrect", "incorrect"]
    for item in "abc":
        assert on_ray[item]["scores"] == local[item]["scores"]
        assert on_ray[item]["judge_usage"] == local[item]["judge_usage"] and on_ray[item]["judge_usage"]["total_tokens"] > 0
        assert on_ray[item]["judge_cost_usd"] == local[item]["judge_cost_usd"]
        assert untimed(on_ray[item]["model"]) == untimed(local[item]["model"])  # the item's own calls, as locally
        assert on_ray[item]["model"]["calls"] == 1
    for name in ("local", "ray"):
        requests = seen[name]
        judged = [r for r in requests if (r.session_id or "").startswith("judge-")]
        assert len(judged) == 3 and len(requests) == 6, [(r.session_id, r.prompt[:30]) for r in requests]
        assert all(r.api_key == KEY for r in requests)  # through a gateway: the real key only upstream
    want = json.loads((tmp_path / "local.json").read_text())["model"]
    got = json.loads((tmp_path / "ray.json").read_text())["model"]
    assert {k: got[k] for k in TOTALS} == {k: want[k] for k in TOTALS}
    assert got["calls"] == 6 and got["cost_usd"] > 0  # the judges' three calls included
    assert got["nodes"] == 1  # node gateways; the driver's (the judges') is not a node
    assert got["budget"]["tokens"] == want["budget"]["tokens"] == 6 * 15  # the judges' tokens under the budget
    assert got["budget"]["cost_usd"] == want["budget"]["cost_usd"] and not got["budget"]["reached"]


async def test_a_refused_judges_call_cuts_its_item_on_ray_as_on_one_machine(
        ray_cluster: RayCluster, tmp_path: Path) -> None:
    prepare(tmp_path)
    async with open_fake_model(parse_script(tomllib.loads(SCRIPT))) as model:
        seen, summaries = await stopped_by_the_budget(tmp_path, model, ray_cluster.address, "10")
        before = len(model.requests)
        resumed = await batch(tmp_path, "ray", model.base_url, ray_cluster.address, "--concurrency", "1",
                              "--max-total-tokens", "100000", "--resume")
        assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
        rerun = model.requests[before:]
    for name in ("local", "ray"):
        assert [r.prompt for r in seen[name]] == [ITEMS[0]["prompt"]]  # the item's call; its judge's was refused
        summary = summaries[name]
        assert summary["stopped"] == "budget"
        budget = summary["model"]["budget"]
        assert budget["reached"] and budget["tokens"] == 15 and budget["refused_calls"] == 1
        assert budget["cut_items"] == 1 and budget["cut_sessions"] == 1
        assert summary["model"]["calls"] == 1 and summary["model"]["errors"] == 1  # the refusal counts in errors
    assert lines_of(tmp_path / "local.jsonl") == {}  # no line for the cut item (the file is removed locally)
    lines = lines_of(tmp_path / "ray.jsonl")
    assert sorted(lines) == ["a", "b", "c"] and lines["a"]["scores"]["judge"]["answer"] == "correct"
    assert sorted(r.prompt for r in rerun if not (r.session_id or "").startswith("judge-")) == sorted(
        item["prompt"] for item in ITEMS)  # the cut item and the two never started, once each
    assert sum(1 for r in rerun if (r.session_id or "").startswith("judge-")) == 3


async def test_a_judges_call_that_reaches_the_budget_stops_the_run_on_ray_as_on_one_machine(
        ray_cluster: RayCluster, tmp_path: Path) -> None:
    prepare(tmp_path)
    async with open_fake_model(parse_script(tomllib.loads(SCRIPT))) as model:
        seen, summaries = await stopped_by_the_budget(tmp_path, model, ray_cluster.address, "20")
    for name in ("local", "ray"):
        # the first item's call (15 tokens) and its judge's (15 more: the budget is reached), then nothing
        assert [(r.session_id or "")[:5] for r in seen[name]] == ["item-", "judge"]
        lines = lines_of(tmp_path / f"{name}.jsonl")
        assert sorted(lines) == ["a"] and lines["a"]["scores"]["judge"]["answer"] == "correct"
        summary = summaries[name]
        assert summary["stopped"] == "budget"
        budget = summary["model"]["budget"]
        assert budget["reached"] and budget["tokens"] == 30 and budget["refused_calls"] == 0 and budget["cut_items"] == 0
        assert summary["model"]["calls"] == 2


async def test_judges_of_a_run_without_a_gateway_call_the_model_directly_on_ray_as_on_one_machine(
        ray_cluster: RayCluster, tmp_path: Path) -> None:
    # locally, --no-gateway judges grade on the batch's runtimes, which call the model directly;
    # on Ray the judges' runtime on the driver had a private gateway of its own (before)
    prepare(tmp_path)
    async with open_fake_model(parse_script(tomllib.loads(SCRIPT))) as model:
        done, judges = await on_ray_watching_judges(tmp_path, model, ray_cluster.address, "ray", "--no-gateway")
        requests = list(model.requests)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert judges, "the judges' runtime on the driver was not seen"
    assert {environ["DEEPSEEK_BASE_URL"] for environ in judges} == {model.base_url}  # the model itself, no gateway
    lines = lines_of(tmp_path / "ray.jsonl")
    assert [lines[i]["scores"]["judge"]["answer"] for i in "abc"] == ["correct", "incorrect", "incorrect"]
    assert all("model" not in line for line in lines.values())
    assert json.loads((tmp_path / "ray.json").read_text()).get("model") is None
    assert sum(1 for r in requests if (r.session_id or "").startswith("judge-")) == 3 and len(requests) == 6
    assert all(r.api_key == KEY for r in requests)

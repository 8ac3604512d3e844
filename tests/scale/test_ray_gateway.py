"""The model gateway under ``--ray`` on one local Ray instance, the real runtime on the scripted
model, through the CLI: a token budget for the whole run (held by the quota coordinator, each
node gateway reporting its spending) and ``ctl concurrency`` setting the coordinator's total.

* ``test_a_token_budget_on_ray_stops_with_exit_4_and_resume_runs_the_cut_items``: six one-call
  items (15 tokens each) then six spawning items (four calls each), one at a time on one actor:
  ``--max-total-tokens 100`` is reached during the first spawning item's first call and its
  child's call is refused: exit 4, the six finished lines kept, none for the cut item, the
  summary's ``model.budget`` reached with ``cut_items`` 1; ``--resume`` with a larger budget runs
  exactly the six spawning items, once each (each one's session started once at the model).
* ``test_ctl_concurrency_sets_the_coordinators_total``: a batch of slow calls; ``ctl status``
  shows the coordinator's total (8, auto's start), ``ctl concurrency 1`` sets it (the status
  says 1), and from a call's length after that the model never saw more than one call in flight;
  the summary's ``model.concurrency`` ends fixed at 1.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.batch import ControlError, send_command
from dsh_orchestra.testing import open_fake_model, parse_script

from scale_support import RayCluster, real_batch, write_dataset

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.integration]

KEY = "sk-raygw-test-real-key-0123456789abcdef"
MIXED = {"default_reply": "plain answer", "rules": [
    {"name": "spawn", "match": "SPAWN", "reply": "spawning", "after_subagents": "children done",
     "spawn": [{"description": "child task", "prompt": "CHILD: review", "reply": "child reviewed"}]},
]}
SLOW = {"default_reply": "slow answer", "rules": [{"name": "slow", "match": "SLOW", "reply": "slow answer", "delay": 1.0}]}


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def batch(tmp_path: Path, address: str, base_url: str, *flags: str) -> trio.CompletedProcess[bytes]:
    return await real_batch(tmp_path, "r.jsonl", "summary.json", str(tmp_path / "home-{actor}"), "--json", *flags,
                            key=KEY, base_url=base_url, ray=address)


async def test_a_token_budget_on_ray_stops_with_exit_4_and_resume_runs_the_cut_items(
        ray_cluster: RayCluster, tmp_path: Path) -> None:
    items = [{"id": f"p{i}", "prompt": f"plain question {i}"} for i in range(6)]
    items += [{"id": f"s{i}", "prompt": f"SPAWN one child {i}"} for i in range(6)]
    write_dataset(tmp_path / "ds.jsonl", items)
    async with open_fake_model(parse_script(MIXED)) as model:
        first = await batch(tmp_path, ray_cluster.address, model.base_url, "--concurrency", "1", "--max-total-tokens", "100")
        assert first.returncode == 4, first.stderr.decode()[-3000:]
        written = lines_of(tmp_path / "r.jsonl")
        summary = json.loads((tmp_path / "summary.json").read_text())
        requests_before = len(model.requests)
        second = await batch(tmp_path, ray_cluster.address, model.base_url, "--concurrency", "2",
                             "--max-total-tokens", "10000", "--resume")
        assert second.returncode == 0, second.stderr.decode()[-3000:]
    assert [line["id"] for line in written] == [f"p{i}" for i in range(6)]  # no line for the cut item
    assert all(line["status"] == "ok" and line["model"]["calls"] == 1 for line in written)
    assert summary["stopped"] == "budget"
    budget = summary["model"]["budget"]
    assert budget["reached"] and budget["cut_items"] == 1 and budget["refused_calls"] >= 1
    assert budget["max_total_tokens"] == 100 and budget["tokens"] >= 100
    assert budget["overshoot"]["tokens"] <= max(1, budget["reached_with"]["in_flight"]) * budget["largest_call_tokens"]
    lines = lines_of(tmp_path / "r.jsonl")
    assert Counter(line["id"] for line in lines) == Counter(item["id"] for item in items)  # each once
    assert lines[:6] == written  # the finished lines are intact
    rerun = lines[6:]
    assert sorted(line["id"] for line in rerun) == [f"s{i}" for i in range(6)]
    assert all(line["status"] == "ok" and line["attempts"] == 1 and line["final_response"] == "children done" for line in rerun)
    assert all(line["model"]["calls"] == 4 for line in rerun)  # parent, child, parent twice: the child's counted too
    started = [r.prompt for r in model.requests[requests_before:] if r.kind == "prompt" and r.prompt.startswith("SPAWN")]
    assert sorted(started) == [f"SPAWN one child {i}" for i in range(6)]  # each cut item's session started once


async def test_ctl_concurrency_sets_the_coordinators_total(ray_cluster: RayCluster, tmp_path: Path) -> None:
    write_dataset(tmp_path / "ds.jsonl", [{"id": f"slow-{i:02d}", "prompt": f"SLOW {i}"} for i in range(14)])
    out = tmp_path / "r.jsonl"
    answers: list[dict[str, Any]] = []
    changed_at: list[float] = []

    async def retune() -> None:
        while True:  # the control socket is there once an actor started and the first items go
            try:
                status = await trio.to_thread.run_sync(partial(send_command, out, "status"))
            except ControlError:
                await trio.sleep(0.2)
                continue
            if status["in_flight"] >= 2 and model.in_flight >= 2:
                break
            await trio.sleep(0.2)
        answers.append(status)
        answers.append(await trio.to_thread.run_sync(partial(send_command, out, "concurrency", 1)))
        changed_at.append(trio.current_time())
        with trio.fail_after(30):
            while True:  # the coordinator's own answer, as ctl status shows it
                status = await trio.to_thread.run_sync(partial(send_command, out, "status"))
                if status["model_concurrency"] == 1 and status["model_in_flight"] is not None:
                    answers.append(status)
                    return
                await trio.sleep(0.3)

    async with open_fake_model(parse_script(SLOW)) as model:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(retune)
            done = await batch(tmp_path, ray_cluster.address, model.base_url, "--concurrency", "4")
        spans = list(model.spans)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    before, after, settled = answers
    assert before["model_concurrency"] == 8  # the coordinator's total: auto starts at 8
    assert after["concurrency"] == 1 and after["model_concurrency"] == 1
    assert settled["model_concurrency"] == 1
    since = changed_at[0] + 2.0  # calls in flight at the change end within a call's length (1 s)
    events = sorted([(s, 1) for s, e, _ in spans if e >= since] + [(max(e, since), -1) for s, e, _ in spans if e >= since])
    level = top = 0
    for _, step in events:
        level += step
        top = max(top, level)
    assert top == 1, spans  # one call at a time from then on
    assert sum(1 for s, _, _ in spans if s >= since) >= 3  # and calls went on after it
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] == 14
    concurrency = summary["model"]["concurrency"]
    assert concurrency["mode"] == "fixed" and concurrency["final"] == 1
    assert [limit for _, limit in concurrency["changes"]][-1] == 1

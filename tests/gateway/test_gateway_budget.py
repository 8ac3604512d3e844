"""Budgets enforced per model call: counted as the calls stream, refused once reached, cache
hits free; on the real runtime a batch stops with the cut items unwritten and resumes them."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.eval import Price
from dsh_orchestra.gateway import CallBudget, GatewayOptions, ResponseCache
from dsh_orchestra.gateway._sse import Usage
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._fake_model import FakeModelServer, open_fake_model
from dsh_orchestra.testing._script import parse_script

from gateway_support import BASE_ENV, REAL_KEY, body, running_gateway, write_dataset

CALL_TOKENS = 15  # the fake model's usage: 10 input + 1 output at message_start, 5 output at message_delta
PRICE = Price(input_per_mtok=2.0, output_per_mtok=8.0)
CALL_COST = (10 * 2.0 + 5 * 8.0) / 1e6


async def post(url: str, token: str, payload: object) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.post(url + "/v1/messages", content=json.dumps(payload), headers={"x-api-key": token})


def test_the_budget_counts_each_usage_update_once_and_notes_the_calls_in_flight() -> None:
    budget = CallBudget(max_tokens=20, price=PRICE)
    budget.in_flight = 3
    start, delta = Usage(input_tokens=10, output_tokens=1), Usage(input_tokens=10, output_tokens=5)
    budget.charge(Usage(), start)
    assert (budget.tokens, budget.reached) == (11, False)
    budget.charge(start, delta)  # cumulative output: only the growth counts
    budget.charge(delta, delta)
    assert budget.tokens == CALL_TOKENS and budget.cost == pytest.approx(CALL_COST)
    budget.charge(Usage(), start)
    assert budget.reached and budget.reached_with == {"tokens": 26, "cost_usd": pytest.approx(budget.cost), "in_flight": 3}
    assert budget.overshoot() == {"tokens": 6, "cost_usd": None}
    assert "26 of 20 tokens" in budget.refuse("item-a") and budget.cut == {"item-a"}


def test_a_cost_budget_needs_a_price() -> None:
    from dsh_orchestra._params import ParamValueError

    with pytest.raises(ParamValueError, match="max_total_cost.*needs.*price"):
        GatewayOptions(max_total_cost=1.0)
    with pytest.raises(ParamValueError, match="price must be a price"):
        GatewayOptions(price="cheap")  # type: ignore[arg-type]
    assert GatewayOptions(max_total_cost=1.0, price=PRICE).price == PRICE


async def test_calls_are_refused_once_reached_and_cache_hits_cost_nothing(tmp_path: Path, fake_model: FakeModelServer) -> None:
    cache = ResponseCache(tmp_path / "cache")
    options = GatewayOptions(cache=str(tmp_path / "cache"), max_total_tokens=2 * CALL_TOKENS, price=PRICE)
    with trio.fail_after(60):
        async with running_gateway(fake_model.base_url, options, cache=cache) as gw:
            first = await post(gw.base_url, gw.token, body("ECHO one"))
            hits = [await post(gw.base_url, gw.token, body("ECHO one")) for _ in range(3)]
            assert gw.budget.tokens == CALL_TOKENS and not gw.budget.reached  # the hits counted nothing
            second = await post(gw.base_url, gw.token, body("ECHO two"))
            assert gw.budget.reached
            refused = await post(gw.base_url, gw.token, body("ECHO three"))
            late_hit = await post(gw.base_url, gw.token, body("ECHO two"))  # a hit is served after the limit too
    cache.close()
    assert first.status_code == second.status_code == late_hit.status_code == 200 and all(h.text == first.text for h in hits)
    assert refused.status_code == 400 and "budget reached (30 of 30 tokens)" in refused.json()["error"]["message"]
    assert len(fake_model.requests) == 2  # nothing was sent upstream once the limit was reached
    totals = gw.summary()
    assert (totals["upstream_calls"], totals["cache_hits"], totals["saved_tokens"], totals["errors"]) == (2, 4, 4 * CALL_TOKENS, 1)
    assert totals["cost_usd"] == pytest.approx(2 * CALL_COST) and totals["saved_cost_usd"] == pytest.approx(4 * CALL_COST)
    assert totals["budget"]["tokens"] == 2 * CALL_TOKENS and totals["budget"]["refused_calls"] == 1
    assert totals["budget"]["cost_usd"] == pytest.approx(2 * CALL_COST)
    assert gw.take("a session without calls").to_json()["cost_usd"] == 0.0  # priced: zero, not unknown


async def test_without_a_price_there_is_no_cost(fake_model: FakeModelServer) -> None:
    with trio.fail_after(60):
        async with running_gateway(fake_model.base_url) as gw:
            await post(gw.base_url, gw.token, body("hello"))
    summary = gw.summary()
    assert summary["cost_usd"] is None and summary["saved_cost_usd"] is None and summary["budget"] is None
    assert gw.take("a session without calls").to_json()["cost_usd"] is None


SLOW = parse_script({"default_reply": "slow answer", "rules": [{"name": "slow", "match": "SLOW", "reply": "slow answer", "delay": 1.0}]})


async def test_the_overshoot_stays_within_the_calls_in_flight() -> None:
    """Eight concurrent calls that answer after 1 s, a budget of one and a half calls: every
    call already forwarded finishes; the overshoot is at most the calls in flight when the
    budget was reached times the largest call."""
    async with open_fake_model(SLOW) as model:
        with trio.fail_after(60):
            async with running_gateway(model.base_url, GatewayOptions(model_concurrency=8, max_total_tokens=22)) as gw:
                answers: list[httpx.Response] = []

                async def one(index: int) -> None:
                    answers.append(await post(gw.base_url, gw.token, body(f"SLOW {index}")))

                async with trio.open_nursery() as nursery:
                    for index in range(8):
                        nursery.start_soon(one, index)
                late = await post(gw.base_url, gw.token, body("SLOW late"))
    budget = gw.summary()["budget"]
    forwarded = len(model.requests)  # 8 unless a call came later than the first answers (a loaded machine)
    assert sorted(a.status_code for a in answers) == [200] * forwarded + [400] * (8 - forwarded) and late.status_code == 400
    reached = budget["reached_with"]
    assert forwarded >= 2 and 1 <= reached["in_flight"] <= forwarded
    assert budget["overshoot"]["tokens"] == forwarded * CALL_TOKENS - 22
    assert budget["overshoot"]["tokens"] <= reached["in_flight"] * budget["largest_call_tokens"]
    assert budget["largest_call_tokens"] == CALL_TOKENS


MIXED = parse_script({"default_reply": "plain answer", "rules": [
    {"name": "spawn", "match": "SPAWN", "reply": "spawning", "after_subagents": "children done",
     "spawn": [{"description": "child task", "prompt": "CHILD: review", "reply": "child reviewed"}]},
]})


def result_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.integration
async def test_a_batch_stops_at_the_budget_and_resume_runs_exactly_the_cut_items(
    tmp_path: Path, dsh_home: Path, workspace: Path
) -> None:
    """Six one-call items (90 tokens), then six items of four calls each (parent, child,
    parent twice), one at a time (in order, so which item is cut does not depend on timing): a
    budget of 100 tokens is reached during the first spawning item's first call, and its child's
    call is refused. The first run keeps the six finished lines and writes none for the cut
    items; the resume with a larger budget runs exactly the other six, once each."""
    items = [{"id": f"p{i}", "prompt": f"plain question {i}"} for i in range(6)]
    items += [{"id": f"s{i}", "prompt": f"SPAWN one child {i}"} for i in range(6)]
    dataset = write_dataset(tmp_path / "ds.jsonl", items)
    out = tmp_path / "results.jsonl"
    prices = tmp_path / "prices.toml"
    prices.write_text('["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n')
    async with open_fake_model(MIXED) as model:
        spec = RuntimeSpec(env=dict(BASE_ENV), dsh_home=dsh_home, cwd=workspace, base_url=model.base_url,
                           api_key=REAL_KEY, handshake_timeout=120.0)
        with trio.fail_after(400):
            first = await run_batch(dataset, out, spec, BatchOptions(
                runtimes=1, concurrency=1, progress="none", timeout=60, max_total_tokens=100, prices=prices))
            written = result_lines(out)
            assert first.stopped == "budget" and first.model is not None
            budget = first.model["budget"]
            assert budget["reached"] and budget["cut_sessions"] >= 1 and budget["refused_calls"] >= 1
            assert budget["cut_items"] == 1 and budget["reached_with"]["in_flight"] == 1  # one item at a time: s0
            assert sorted(str(line["id"]) for line in written) == [f"p{i}" for i in range(6)]
            assert all(line["status"] == "ok" for line in written)
            assert budget["overshoot"]["tokens"] <= budget["reached_with"]["in_flight"] * budget["largest_call_tokens"]
            requests_before = len(model.requests)
            second = await run_batch(dataset, out, spec, BatchOptions(
                runtimes=1, concurrency=3, progress="none", timeout=60, max_total_tokens=10_000, resume=True, prices=prices))
    lines = result_lines(out)
    assert second.stopped is None and second.ok == 12 and second.resumed == 6
    assert Counter(str(line["id"]) for line in lines) == Counter(str(item["id"]) for item in items)  # each once
    assert lines[:6] == written  # the finished lines are intact
    rerun = lines[6:]
    assert sorted(str(line["id"]) for line in rerun) == [f"s{i}" for i in range(6)]
    assert all(line["status"] == "ok" and line["attempts"] == 1 and line["final_response"] == "children done" for line in rerun)
    for line in lines:  # each item's calls (its subagent's included) at the run's price
        model_json = line["model"]
        assert isinstance(model_json, dict) and model_json["cost_usd"] == pytest.approx(model_json["upstream_calls"] * CALL_COST)
    assert second.model is not None and second.model["cost_usd"] == pytest.approx(second.model["upstream_calls"] * CALL_COST)
    started = [r.prompt for r in model.requests[requests_before:] if r.kind == "prompt" and r.prompt.startswith("SPAWN")]
    assert sorted(started) == [f"SPAWN one child {i}" for i in range(6)]  # each cut item's session started once


CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]


async def batch_cli(tmp_path: Path, model: FakeModelServer, *flags: str) -> trio.CompletedProcess[bytes]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, **BASE_ENV, "DEEPSEEK_BASE_URL": model.base_url, "DEEPSEEK_API_KEY": REAL_KEY}
    args = ["batch", "ds.jsonl", "--out", "r.jsonl", "--runtime", "dsh", "--dsh-home", str(home), "--workspace", str(tmp_path),
            "--no-progress", "--json", "--runtimes", "1", "--concurrency", "2", *flags]
    with trio.fail_after(300):
        return await trio.run_process([*CLI, *args], cwd=tmp_path, env=env, capture_stdout=True, capture_stderr=True, check=False)


@pytest.mark.integration
@pytest.mark.parametrize("gateway", [True, False], ids=["gateway", "no-gateway"])
async def test_the_cli_exits_4_at_the_budget_with_or_without_the_gateway(tmp_path: Path, gateway: bool) -> None:
    """``--max-total-tokens``: exit 4, ``stopped: "budget"``, every line written is a finished
    one (with the gateway: per call; with ``--no-gateway``: checked as each item would start,
    from the finished items' usage, so the items in flight finish and are written)."""
    write_dataset(tmp_path / "ds.jsonl", [{"id": f"p{i}", "prompt": f"plain question {i}"} for i in range(4)]
                  + [{"id": f"s{i}", "prompt": f"SPAWN one child {i}"} for i in range(4)])
    async with open_fake_model(MIXED) as model:
        done = await batch_cli(tmp_path, model, "--max-total-tokens", "70", *([] if gateway else ["--no-gateway"]))
    assert done.returncode == 4, done.stderr.decode()
    summary = json.loads(done.stdout)
    written = result_lines(tmp_path / "r.jsonl")
    assert summary["stopped"] == "budget" and summary["ok"] == len(written) < 8
    assert all(line["status"] == "ok" for line in written)
    if gateway:
        assert summary["model"]["budget"]["max_total_tokens"] == 70 and summary["model"]["budget"]["reached"]
    else:
        assert summary.get("model") is None and "model" not in written[0]


async def test_a_scorer_failing_on_a_refused_call_cuts_the_item_too(fake_model: FakeModelServer) -> None:
    from dsh_orchestra.batch._cutoff import judged_past_budget, refused_calls

    async with running_gateway(fake_model.base_url, GatewayOptions(max_total_tokens=0)) as gw:
        before = refused_calls(gw)
        failed = {"scores": {"judge": {"value": None, "error": True}, "exact": {"value": 1.0}}}
        assert not judged_past_budget(gw, before, failed)  # nothing refused while it was scored
        gw.budget.refuse("judge-session")
        assert judged_past_budget(gw, before, failed)
        assert not judged_past_budget(gw, before, {"scores": {"exact": {"value": 1.0}}})  # scored fine: kept
        assert not judged_past_budget(None, 0, failed)


def test_a_batch_hands_its_budgets_and_price_to_the_gateway_unless_the_gateway_sets_its_own(tmp_path: Path) -> None:
    from dsh_orchestra.batch._cutoff import budgeted
    from dsh_orchestra.batch._evaluation import plan_of

    prices = tmp_path / "prices.toml"
    prices.write_text('["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n')
    options = BatchOptions(max_total_tokens=500, max_total_cost=0.5, prices=prices)
    handed = budgeted(options, plan_of(options, None))
    assert handed is not None and (handed.max_total_tokens, handed.max_total_cost, handed.price) == (500, 0.5, PRICE)
    own = attrs.evolve(options, gateway=GatewayOptions(max_total_tokens=7))
    handed = budgeted(own, plan_of(own, None))
    assert handed is not None and (handed.max_total_tokens, handed.max_total_cost) == (7, 0.5)
    assert budgeted(attrs.evolve(options, gateway=None), plan_of(options, None)) is None
    plain = BatchOptions()
    assert budgeted(plain, plan_of(plain, None)) is plain.gateway  # nothing to hand: the same options

"""The gateway's per-call budget: how far the calls in flight overshoot it.

64 clients (think: items) each send calls one after another (a new one as soon as the last is
answered) through the gateway to the fake model (in this process), whose every answer takes
``DELAY`` seconds and counts 15 tokens (10 input at ``message_start``, 5 output at
``message_delta``). The budget is ``BUDGET`` tokens. For each ``--model-concurrency`` the run
reports the tokens counted, the overshoot, the calls in flight when the budget was reached,
the bound (those calls x the largest call's tokens) and the calls refused.

``real``: a batch on 2 real runtimes (40 one-call items, 16 in flight, each answer after 0.3 s,
a budget of 200 tokens): the summary's ``model.budget`` and the lines written.

    python bench/gateway_budget.py                   # concurrency 1, 8, 32, 64
    GATEWAY_BUDGET_DELAY=0.2 python bench/gateway_budget.py
    python bench/gateway_budget.py real
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402

from dsh_orchestra.gateway import Gateway, GatewayOptions  # noqa: E402
from dsh_orchestra.testing._fake_model import open_fake_model  # noqa: E402
from dsh_orchestra.testing._script import parse_script  # noqa: E402

CLIENTS = 64
BUDGET = 1000
DELAY = float(os.environ.get("GATEWAY_BUDGET_DELAY", "0.05"))
SCRIPT = parse_script({"default_reply": "an answer", "rules": [{"name": "slow", "match": "CALL", "reply": "an answer", "delay": DELAY}]})


def body(client: int, call: int) -> bytes:
    return json.dumps({"model": "m", "stream": True, "max_tokens": 100,
                       "messages": [{"role": "user", "content": [{"type": "text", "text": f"CALL {client}.{call}"}]}]}).encode()


async def one_run(concurrency: int) -> dict[str, Any]:
    async with open_fake_model(SCRIPT) as model:
        gateway = Gateway(GatewayOptions(model_concurrency=concurrency, max_total_tokens=BUDGET), upstream=model.base_url, api_key="k")
        async with trio.open_nursery() as nursery:
            await nursery.start(gateway.run)
            limits = httpx.Limits(max_connections=CLIENTS)
            async with httpx.AsyncClient(trust_env=False, limits=limits, timeout=60) as client:

                async def item(index: int) -> None:
                    call = 0
                    while True:  # until the budget refuses a call
                        call += 1
                        answer = await client.post(gateway.base_url + "/v1/messages", content=body(index, call),
                                                   headers={"x-api-key": gateway.token})
                        if answer.status_code != 200:
                            return

                async with trio.open_nursery() as clients:
                    for index in range(CLIENTS):
                        clients.start_soon(item, index)
            nursery.cancel_scope.cancel()
    budget = gateway.budget.to_json()
    reached = budget["reached_with"] or {}
    bound = reached.get("in_flight", 0) * budget["largest_call_tokens"]
    return {"model_concurrency": concurrency, "budget": BUDGET, "tokens": budget["tokens"],
            "overshoot_tokens": budget["overshoot"]["tokens"], "in_flight_at_reach": reached.get("in_flight"),
            "largest_call_tokens": budget["largest_call_tokens"], "bound_tokens": bound,
            "within_bound": budget["overshoot"]["tokens"] <= bound, "upstream_calls": len(model.requests),
            "refused_calls": budget["refused_calls"]}


async def real_run() -> dict[str, Any]:
    import tempfile

    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    script = parse_script({"default_reply": "an answer", "rules": [{"name": "slow", "match": "CALL", "reply": "an answer", "delay": 0.3}]})
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        (root / "home").mkdir()
        dataset = root / "ds.jsonl"
        dataset.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"CALL {i}"}) + "\n" for i in range(40)))
        async with open_fake_model(script) as model:
            spec = RuntimeSpec(env={"DSH_TELEMETRY_MODE": "DISABLED", "NO_PROXY": "127.0.0.1"}, dsh_home=root / "home", cwd=root,
                               base_url=model.base_url, api_key="k", handshake_timeout=120.0)
            summary = await run_batch(dataset, root / "r.jsonl", spec, BatchOptions(
                runtimes=2, concurrency=16, progress="none", timeout=120, max_total_tokens=200))
        lines = (root / "r.jsonl").read_text().splitlines()
    assert summary.model is not None
    budget = summary.model["budget"]
    bound = budget["reached_with"]["in_flight"] * budget["largest_call_tokens"]
    return {"mode": "real", "items": 40, "in_flight_items": 16, "lines": len(lines), "stopped": summary.stopped,
            "budget": budget, "bound_tokens": bound, "within_bound": budget["overshoot"]["tokens"] <= bound}


def main() -> None:
    print(json.dumps({"machine": machine(), "loadavg": os.getloadavg(), "clients": CLIENTS, "delay_s": DELAY}))
    if sys.argv[1:] == ["real"]:
        print(json.dumps(trio.run(real_run)))
    else:
        for concurrency in (1, 8, 32, 64):
            print(json.dumps(trio.run(one_run, concurrency)))
    print(json.dumps({"loadavg_end": os.getloadavg()}))


if __name__ == "__main__":
    main()

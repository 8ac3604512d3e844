"""One provider quota across Ray nodes: a model gateway per node, one quota coordinator.

A three-node ``ray.cluster_utils.Cluster`` (a head and workers B and C). The scripted model
runs in this process with a quota of ``LIMIT`` requests in flight (it answers 429 above it) and
measures what reaches it: every answered request's start, end and session id.

* ``test_the_nodes_share_one_limit_and_a_lost_nodes_share_goes_to_the_other``: the run's
  ``NodeGateways`` start a gateway on B and on C; load on each node (a Ray task pinned there,
  more streams than the limit, through its node's gateway, the session id naming the node):
  the total in flight at the model never exceeds the limit and reaches it, no 429, no node
  above the largest share the coordinator granted it; then B is removed while its load runs:
  the coordinator drops it, and C alone reaches the whole limit at the model.
* ``test_one_token_budget_for_the_run_across_the_nodes``: ``max_total_tokens`` for the run;
  both nodes spend until the run's total reaches it (neither alone does); then both refuse
  every call, the model sees none, and the overshoot stays within the documented bound.
* ``test_a_batch_on_two_nodes_through_the_cli_keeps_the_limit``: ``batch --runtime dsh --ray``
  with ``--model-concurrency 3`` and one actor on each worker: one gateway per node (named
  actors), the model never above 3 in flight, no 429, every item ok, no key in any runtime's
  environment, nothing of the run left in Ray; each line's ``model.calls`` is what the model
  answered for its session, and the summary's totals add up over both nodes.

Marked ``multinode`` (``pytest -m multinode`` runs them alone).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from ray_serial import ray_serial
from scale_support import CLI, cli_env, wait_gone, write_dataset

from dsh_orchestra.gateway import GatewayOptions
from dsh_orchestra.scale._gateways import NodeGatewayConfig, NodeGateways
from dsh_orchestra.scale._refs import wait_ref

ray = pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra: pip install '.[test,ray]')")
from ray.cluster_utils import Cluster  # noqa: E402 - after importorskip, which needs ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.multinode]

NODE = {"num_cpus": 2, "object_store_memory": 80 * 2**20}
LIMIT = 6
KEY = "sk-quota-test-real-key-0123456789abcdef"


class Nodes:
    """The module's cluster: a head with no actor resources and workers B and C."""

    def __init__(self) -> None:
        self.cluster = Cluster(initialize_head=True, connect=False, head_node_args={**NODE, "include_dashboard": False})
        self.b: Any = self.cluster.add_node(**NODE, resources={"node_b": 1})
        self.c: Any = self.cluster.add_node(**NODE, resources={"node_c": 1})
        self.cluster.wait_for_nodes()

    def restore_b(self) -> None:
        if self.b is None:
            self.b = self.cluster.add_node(**NODE, resources={"node_b": 1})
            self.cluster.wait_for_nodes()

    def remove_b(self) -> None:
        self.cluster.remove_node(self.b)
        self.b = None


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    with ray_serial(tmp_path_factory):
        saved = os.environ.get("RAY_AUTH_MODE")
        os.environ["RAY_AUTH_MODE"] = "disabled"  # loopback only, as in conftest's ray_cluster
        me = psutil.Process()
        before = {p.pid for p in me.children(recursive=True)}
        cluster = Nodes()
        try:
            ray.init(address=cluster.cluster.address, log_to_driver=False, logging_level=logging.WARNING)
            yield cluster
        finally:
            ray.shutdown()
            members = [p for p in me.children(recursive=True) if p.pid not in before]
            cluster.cluster.shutdown()
            if saved is None:
                os.environ.pop("RAY_AUTH_MODE", None)
            else:
                os.environ["RAY_AUTH_MODE"] = saved
            wait_gone(members, 30, "Ray processes outlived the cluster")


SLOW = {"default_reply": "answer", "rules": [{"name": "slow", "match": "SLOW", "reply": "slow answer", "delay": 0.15}]}


def load_task() -> Any:
    """A Ray task (a closure: pickled by value) keeping ``streams`` calls going through a gateway
    for ``seconds``; each call's session id is ``{tag}-{stream}``. Returns the answers' statuses."""

    def load(base_url: str, token: str, tag: str, streams: int, seconds: float) -> dict[str, int]:
        import json as json_

        import httpx as httpx_
        import trio as trio_

        body = json_.dumps({"model": "m", "stream": True, "max_tokens": 50,
                            "messages": [{"role": "user", "content": "SLOW please"}]}).encode()
        statuses: dict[str, int] = {}

        async def main() -> None:
            limits = httpx_.Limits(max_connections=streams)
            async with httpx_.AsyncClient(trust_env=False, limits=limits, timeout=120) as client:
                async def stream(index: int) -> None:
                    end = trio_.current_time() + seconds
                    while trio_.current_time() < end:
                        headers = {"x-api-key": token, "x-deepseek-harness-session-id": f"{tag}-{index}"}
                        response = await client.post(base_url + "/v1/messages", content=body, headers=headers)
                        statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

                async with trio_.open_nursery() as nursery:
                    for index in range(streams):
                        nursery.start_soon(stream, index)

        trio_.run(main)
        return statuses

    return ray.remote(num_cpus=0, max_retries=0)(load)


def peak(spans: list[tuple[float, float, str | None]], *, prefix: str = "", since: float = float("-inf")) -> int:
    """The most requests in flight at once at the model (those whose session id starts with ``prefix``)."""
    events = sorted([(s, 1) for s, e, sid in spans if (sid or "").startswith(prefix) and e >= since]
                    + [(e, -1) for s, e, sid in spans if (sid or "").startswith(prefix) and e >= since])
    level = top = 0
    for _, step in events:  # an end before a start at the same instant
        level += step
        top = max(top, level)
    return top


async def test_the_nodes_share_one_limit_and_a_lost_nodes_share_goes_to_the_other(nodes: Nodes) -> None:
    from dsh_orchestra.testing import open_fake_model, parse_script

    nodes.restore_b()
    b_id, c_id = str(nodes.b.node_id), str(nodes.c.node_id)
    load = load_task()
    async with open_fake_model(parse_script(SLOW), concurrency_limit=LIMIT) as model:
        config = NodeGatewayConfig(options=GatewayOptions(model_concurrency=LIMIT), upstream=model.base_url)
        gateways = NodeGateways(ray, "quotatest", config, KEY, actor_options={})
        try:
            with trio.fail_after(240):
                routes = {node: ray.get((await gateways.route_box(node))[0]) for node in (b_id, c_id)}
                assert {r.node_id for r in routes.values()} == {b_id, c_id}  # one gateway on each node
                assert len({r.base_url for r in routes.values()}) == 2

                def start(node: str, tag: str, seconds: float) -> Any:
                    pinned = load.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
                    return pinned.remote(routes[node].base_url, routes[node].token, tag, 2 * LIMIT, seconds)

                # both nodes busy: the limit shared
                both = [start(b_id, "node-b", 6.0), start(c_id, "node-c", 6.0)]
                statuses = [await wait_ref(ref) for ref in both]
                assert all(set(s) == {"200"} for s in statuses), statuses
                assert model.rate_limited == 0
                assert peak(model.spans) == LIMIT  # the whole limit used, never more
                snapshot = await gateways.snapshot()
                granted = {name: max(limit for _, member, limit, _, _ in snapshot["trace"] if member == name)
                           for name in {m for _, m, _, _, _ in snapshot["trace"]}}
                names = {node: gateways.nodes[node].name for node in (b_id, c_id)}
                for node, tag in ((b_id, "node-b"), (c_id, "node-c")):
                    assert 0 < peak(model.spans, prefix=tag) <= granted[names[node]], (tag, granted)
                assert set(snapshot["members"]) == set(names.values())

                # B is lost while both are busy: C gets B's share
                lost = start(b_id, "lost-b", 30.0)
                after = start(c_id, "after-c", 14.0)
                await trio.sleep(2.0)
                await trio.to_thread.run_sync(nodes.remove_b)
                removed_at = trio.current_time()
                statuses = await wait_ref(after)
                assert set(statuses) == {"200"}, statuses
                with pytest.raises(ray.exceptions.RayError):
                    await wait_ref(lost)
                snapshot = await gateways.snapshot()
                assert set(snapshot["members"]) == {names[c_id]}
                assert snapshot["members"][names[c_id]]["limit"] == LIMIT
                assert peak(model.spans, prefix="after-c", since=removed_at + 5.0) == LIMIT  # C alone fills it
                assert peak(model.spans) == LIMIT and model.rate_limited == 0
        finally:
            gateways.close()
    named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("dsh-orchestra-")]
    with trio.fail_after(30):
        while named:  # ray.kill is asynchronous
            await trio.sleep(0.2)
            named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].startswith("dsh-orchestra-")]


async def test_one_token_budget_for_the_run_across_the_nodes(nodes: Nodes) -> None:
    """``max_total_tokens`` for the run: both nodes' gateways spend concurrently until the run's
    total reaches it; each node alone spent less than the budget, yet both refuse every call from
    then on (they learned the run's total from the coordinator), and the model sees no new call.
    The overshoot stays within the calls in flight on all nodes plus those started within one
    report interval (and its round trip): at most ``LIMIT`` places, each freed every 0.15 s."""
    from dsh_orchestra.scale._budget import REPORT_EVERY
    from dsh_orchestra.testing import open_fake_model, parse_script

    nodes.restore_b()
    b_id, c_id = str(nodes.b.node_id), str(nodes.c.node_id)
    load = load_task()
    budget = 900
    async with open_fake_model(parse_script(SLOW), concurrency_limit=LIMIT) as model:
        config = NodeGatewayConfig(options=GatewayOptions(model_concurrency=LIMIT, max_total_tokens=budget),
                                   upstream=model.base_url)
        gateways = NodeGateways(ray, "budgettest", config, KEY, actor_options={})
        try:
            with trio.fail_after(240):
                routes = {node: ray.get((await gateways.route_box(node))[0]) for node in (b_id, c_id)}

                def start(node: str, tag: str, seconds: float) -> Any:
                    pinned = load.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
                    return pinned.remote(routes[node].base_url, routes[node].token, tag, LIMIT, seconds)

                both = [start(b_id, "spend-b", 6.0), start(c_id, "spend-c", 6.0)]
                statuses = [await wait_ref(ref) for ref in both]
                assert all(s.get("400", 0) > 0 for s in statuses), statuses  # both nodes refused calls
                refused = sum(s["400"] for s in statuses)
                answered = len(model.requests)
                stats = {node: await wait_ref(gateways.nodes[node].actor.stats.remote()) for node in (b_id, c_id)}
                own = {node: stats[node]["spending"]["tokens"] for node in (b_id, c_id)}
                assert all(0 < spent < budget for spent in own.values()), own  # neither alone reached it
                per_call = max(stats[node]["spending"]["largest_call"] for node in (b_id, c_id))
                total = sum(own.values())
                assert total == answered * per_call and total >= budget
                overshoot_calls = (total - budget) / per_call
                assert overshoot_calls <= LIMIT * (1 + math.ceil(2 * REPORT_EVERY / 0.15)), (total, answered)
                late = [start(b_id, "late-b", 1.0), start(c_id, "late-c", 1.0)]
                statuses = [await wait_ref(ref) for ref in late]
                assert all(set(s) == {"400"} for s in statuses), statuses  # every further call refused
                assert len(model.requests) == answered  # none reached the model
                summary = await gateways.summary()
                assert summary is not None and summary["nodes"] == 2 and summary["upstream_calls"] == answered
                run = summary["budget"]
                assert run["reached"] and run["tokens"] == total and run["max_total_tokens"] == budget
                assert run["refused_calls"] == refused + sum(s["400"] for s in statuses)  # each 400 a refusal
        finally:
            gateways.close()


@pytest.mark.integration
async def test_a_batch_on_two_nodes_through_the_cli_keeps_the_limit(nodes: Nodes, tmp_path: Path) -> None:
    from dsh_orchestra.testing import open_fake_model, parse_script

    nodes.restore_b()
    items = [{"id": f"q-{i:02d}", "prompt": f"SLOW {i}", "target": "slow answer"} for i in range(24)]
    write_dataset(tmp_path / "ds.jsonl", items)
    env = {**cli_env(), "DSH_TELEMETRY_MODE": "DISABLED", "DEEPSEEK_API_KEY": KEY,
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    seen_envs: list[dict[str, str]] = []
    async with open_fake_model(parse_script(SLOW), concurrency_limit=3) as model:
        env["DEEPSEEK_BASE_URL"] = model.base_url
        args = ["batch", "ds.jsonl", "--out", "ray.jsonl", "--runtime", "dsh", "--dsh-home", str(tmp_path / "home-{actor}"),
                "--workspace", str(tmp_path), "--score", "exact", "--concurrency", "8", "--retries", "0",
                "--timeout", "120", "--no-progress", "--model-concurrency", "3", "--summary", "summary.json",
                "--ray", nodes.cluster.address,
                "--ray-actors", "2", "--ray-actor-resources", '[{"node_b": 1}, {"node_c": 1}]']

        async def watch() -> None:  # the runtimes' environments while they run
            while True:
                for process in psutil.process_iter():
                    try:
                        environ = process.environ()
                    except psutil.Error:
                        continue
                    if environ.get("DSH_HOME", "").startswith(str(tmp_path)):  # a runtime of this run
                        seen_envs.append(environ)
                await trio.sleep(0.5)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            with trio.fail_after(400):
                done = await trio.run_process([*CLI, *args], cwd=tmp_path, env=env, capture_stdout=True,
                                              capture_stderr=True, check=False)
            nursery.cancel_scope.cancel()
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    lines = [json.loads(line) for line in (tmp_path / "ray.jsonl").read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == [item["id"] for item in items]
    assert all(line["status"] == "ok" and line["final_response"] == "slow answer" for line in lines)
    counted = Counter(r.session_id for r in model.requests)  # each line's calls, as its node's gateway counted them
    assert all(line["model"]["calls"] == counted[line["session_id"]] >= 1 for line in lines), lines
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["model"]["nodes"] == 2 and summary["model"]["calls"] == len(model.requests)  # summed over both
    assert summary["model"]["concurrency"]["final"] == 3
    assert model.rate_limited == 0 and peak(model.spans) <= 3
    assert {r.api_key for r in model.requests} == {KEY}  # the gateways sent the real key upstream
    assert seen_envs, "no runtime process was seen"
    assert all(KEY not in value for env_ in seen_envs for value in env_.values())
    assert {env_.get("DEEPSEEK_API_KEY", "")[:8] for env_ in seen_envs} == {"dsho-gw-"}  # the run's token
    assert len({env_["DEEPSEEK_BASE_URL"] for env_ in seen_envs}) == 2  # a gateway on each node
    assert all(env_["DEEPSEEK_BASE_URL"].startswith("http://127.0.0.1:") for env_ in seen_envs)
    named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("dsh-orchestra-")]
    assert named == []


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-m", "multinode"]))

"""One batch over a two-node Ray cluster (``ray.cluster_utils.Cluster``, started for this module).

The head node offers the custom resource ``node_a``, the worker node ``node_b``; the executor
gives actor slot 0 ``{"node_a": 1}`` and slot 1 ``{"node_b": 1}`` (``actor_resources``), so
one actor runs on each node. The first items of each batch are gated: their approval is
decided by a policy (pickled to the actors) that records the node it runs on, then waits for
a gate file. Four gated items in flight with two places per actor means two on each node,
known before anything else happens (no timing involved):

* both nodes run items, and the results are the same as the same batch on one machine;
* the worker node is removed while its two gated items are in flight: they come back lost,
  run again on the head node, and every id ends ok exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from ray_serial import ray_serial
from scale_support import SCRIPT, by_id, mixed_items, sim_spec, wait_gone, write_dataset

from dsh_orchestra.approvals import ApprovalRequest, allow
from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.questions import first_option
from dsh_orchestra.scale import run_batch_ray

ray = pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra: pip install '.[test,ray]')")
from ray.cluster_utils import Cluster  # noqa: E402 - after importorskip, which needs ray

pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance at a time (tests/conftest.py)

GATED = 4
"""Gated items at the head of each dataset: two places per actor, two actors."""
NODE = {"num_cpus": 2, "object_store_memory": 80 * 2**20}
GATES = "".join(f"""
[[rules]]
name = "gate-{i}"
match = "GATE-{i}:"
reply = "gate {i} was {{outcome}}"
approval = {{ tool = "bash", reason = "gate-{i}" }}
""" for i in range(GATED))


def gate_policy(marks: Path, gate: Path) -> Any:
    """An async approval policy (a closure: Ray pickles it by value) that writes a marker
    ``{"reason", "node"}`` into ``marks``, waits until ``gate`` exists, then allows."""
    marks_dir, gate_file = str(marks), str(gate)

    async def policy(request: ApprovalRequest) -> Any:
        import ray as in_actor

        node = in_actor.get_runtime_context().get_node_id() if in_actor.is_initialized() else "local"
        label = (request.reason or "").rsplit(": ", 1)[-1]
        await trio.Path(marks_dir, uuid.uuid4().hex).write_text(json.dumps({"reason": label, "node": node}))
        while not os.path.exists(gate_file):  # noqa: ASYNC110, ASYNC240 - the gate is a file the test writes from another process
            await trio.sleep(0.02)
        return allow("gate")

    policy.deadline = 600.0  # type: ignore[attr-defined]  # the gate, not the policy's deadline, decides
    return policy


def marks_in(directory: Path) -> list[dict[str, str]]:
    found = []
    for path in directory.iterdir():
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:  # being written
            pass
    return found


async def wait_marks(directory: Path, count: int) -> list[dict[str, str]]:
    """The markers once ``count`` gated approvals are in flight."""
    with trio.fail_after(180):
        while len(found := [m for m in marks_in(directory) if m["reason"].startswith("gate-")]) < count:  # noqa: ASYNC110 - Ray actors write the marks: no event to wait on
            await trio.sleep(0.05)
    return found


def items(rest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": f"gate-{i}", "prompt": f"GATE-{i}: hold"} for i in range(GATED)] + rest


def outcome(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["status"], line["finish_reason"], line["final_response"],
            [(a["outcome"], a["rule"]) for a in line["approvals"]], [s["text"] for s in line["subagents"]],
            [(q["outcome"], q["selected"]) for q in line["questions"]], (line["error"] or {}).get("type"),
            line["metadata"])


def spec_for(directory: Path) -> Any:
    directory.mkdir(exist_ok=True)
    spec = sim_spec(directory)
    (directory / "script.toml").write_text(SCRIPT + GATES)
    return spec


async def local_run(tmp_path: Path, dataset: Path) -> dict[str, dict[str, Any]]:
    """The same batch on one machine (the gate open from the start)."""
    (tmp_path / "local-marks").mkdir()
    (tmp_path / "local-gate").touch()
    policy = gate_policy(tmp_path / "local-marks", tmp_path / "local-gate")
    await run_batch(dataset, tmp_path / "local.jsonl", spec_for(tmp_path / "local"),
                    BatchOptions(policy=policy, answerer=first_option, progress="none", concurrency=4))
    return by_id(tmp_path / "local.jsonl")


def named_actors() -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith("dsh-orchestra-"))


class TwoNodes:
    """The module's cluster: a head offering ``node_a`` and (``worker()``) a worker offering ``node_b``."""

    def __init__(self) -> None:
        self.cluster = Cluster(initialize_head=True, connect=False, head_node_args={
            **NODE, "resources": {"node_a": 1}, "include_dashboard": False})
        self.node: Any = None

    def worker(self) -> Any:
        if self.node is None:
            self.node = self.cluster.add_node(**NODE, resources={"node_b": 1})
            self.cluster.wait_for_nodes()
        return self.node

    def remove_worker(self) -> None:
        node, self.node = self.node, None
        self.cluster.remove_node(node)

    @property
    def head_id(self) -> str:
        return str(self.cluster.head_node.node_id)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    with ray_serial(tmp_path_factory):
        yield from _two_nodes()


def _two_nodes() -> Iterator[TwoNodes]:
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # loopback only, as in conftest's ray_cluster
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    nodes = TwoNodes()
    try:
        nodes.worker()
        ray.init(address=nodes.cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        yield nodes
    finally:
        ray.shutdown()
        members = [p for p in me.children(recursive=True) if p.pid not in before]
        nodes.cluster.shutdown()
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
        wait_gone(members, 30, "Ray processes outlived the cluster")


RESOURCES = [{"node_a": 1}, {"node_b": 1}]


async def test_actors_on_both_nodes_same_results_as_one_machine(two_nodes: TwoNodes, tmp_path: Path) -> None:
    worker_id = str(two_nodes.worker().node_id)
    dataset = write_dataset(tmp_path / "ds.jsonl", items(mixed_items()))
    want = await local_run(tmp_path, dataset)
    marks, gate = tmp_path / "marks", tmp_path / "gate"
    marks.mkdir()
    seen: list[dict[str, str]] = []
    async with trio.open_nursery() as nursery:
        async def open_gate_when_both_nodes_hold_items() -> None:
            seen.extend(await wait_marks(marks, GATED))
            gate.touch()

        nursery.start_soon(open_gate_when_both_nodes_hold_items)
        summary = await run_batch_ray(
            dataset, tmp_path / "ray.jsonl", spec_for(tmp_path / "ray"),
            BatchOptions(policy=gate_policy(marks, gate), answerer=first_option, progress="none", concurrency=4),
            actors=2, runtimes_per_actor=1, actor_resources=RESOURCES)
    # two gated items in flight on each node at once (two places per actor, one actor per node)
    assert sorted(m["node"] for m in seen) == sorted([two_nodes.head_id] * 2 + [worker_id] * 2)
    got = by_id(tmp_path / "ray.jsonl")  # every id once
    assert set(got) == set(want) == {item["id"] for item in items(mixed_items())}
    assert {i: outcome(line) for i, line in got.items()} == {i: outcome(line) for i, line in want.items()}
    assert got["gate-0"]["final_response"] == "gate 0 was allowed-once"
    assert {line["status"] for line in got.values()} == {"ok", "error"} and summary.total == len(got)
    assert all(line["attempts"] == 1 for line in got.values())
    assert named_actors() == []


async def test_a_removed_node_s_items_run_again_on_the_other(two_nodes: TwoNodes, tmp_path: Path) -> None:
    worker_id = str(two_nodes.worker().node_id)
    rest = [{"id": f"p-{i:03d}", "prompt": f"plain {i}"} for i in range(16)]
    dataset = write_dataset(tmp_path / "ds.jsonl", items(rest))
    want = await local_run(tmp_path, dataset)
    marks, gate = tmp_path / "marks", tmp_path / "gate"
    marks.mkdir()
    on_worker: list[str] = []
    async with trio.open_nursery() as nursery:
        async def remove_the_worker_while_it_holds_items() -> None:
            found = await wait_marks(marks, GATED)
            on_worker.extend(sorted(m["reason"] for m in found if m["node"] == worker_id))
            assert len(on_worker) == 2, found
            await trio.to_thread.run_sync(two_nodes.remove_worker)  # its actor and runtimes die mid-turn
            gate.touch()

        nursery.start_soon(remove_the_worker_while_it_holds_items)
        summary = await run_batch_ray(
            dataset, tmp_path / "ray.jsonl", spec_for(tmp_path / "ray"),
            BatchOptions(policy=gate_policy(marks, gate), progress="none", concurrency=4, retries=0),
            actors=2, runtimes_per_actor=1, actor_resources=RESOURCES, backoff=(0.1, 1.0))
    got = by_id(tmp_path / "ray.jsonl")  # every id exactly once, each ok
    assert set(got) == {item["id"] for item in items(rest)}
    assert all(line["status"] == "ok" for line in got.values()), [line for line in got.values() if line["status"] != "ok"]
    assert {i: outcome(line) for i, line in got.items()} == {i: outcome(line) for i, line in want.items()}
    # the worker's two items were lost once and decided again, on the head node
    again = sorted(i for i, line in got.items() if line["attempts"] > 1)
    assert again == on_worker and all(got[i]["attempts"] == 2 for i in again)
    final = [m for m in marks_in(marks) if m["reason"] in on_worker and m["node"] == two_nodes.head_id]
    assert sorted(m["reason"] for m in final) == on_worker
    assert summary.ok == len(got) and summary.retries == 2
    assert named_actors() == []  # the replacement waiting for node_b was cancelled too

"""A batch through ``dsh-orchestra batch --ray ADDRESS`` on a three-node ``ray.cluster_utils.Cluster``
(a head and two workers), one worker removed mid-run.

The head offers no place for actors; worker B offers the custom resource ``node_b``, worker C
``node_c``, and ``--ray-actor-resources '[{"node_b": 1}, {"node_c": 1}]'`` puts one actor on
each. The CLI's policy is a ``module:attr`` importable on the driver and in the actors (its
directory is on ``PYTHONPATH`` when the cluster starts). It writes a mark ``{"reason", "node"}``
for every approval it decides, and holds the items whose reason starts with ``gate-`` until a
gate file exists. The gated items sit in the middle of the dataset, one more than the places
of one actor: with two places per actor, once all four places hold gated items, two are on
each worker (known without any timing), and the test removes worker B then. Its two items
come back lost, run again on worker C, and the run finishes with every id exactly once, no
torn line, and the same lines and scores as the same batch without Ray.

The same with ``--runtime dsh`` (the real runtime in each actor) against the scripted model,
with fewer items.

Marked ``multinode`` (``pytest -m multinode`` runs them alone; ``-m "not multinode"`` leaves them out).
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
from scale_support import CLI, SCRIPT, cli_env, wait_gone, write_dataset

ray = pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra: pip install '.[test,ray]')")
from ray.cluster_utils import Cluster  # noqa: E402 - after importorskip, which needs ray

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.multinode]

NODE = {"num_cpus": 2, "object_store_memory": 80 * 2**20}
ITEMS = 520
GATE_AT = 200
"""The four gated items are items 200..203: the first 200 run on both workers first."""
GATED = 4
RESOURCES = '[{"node_b": 1}, {"node_c": 1}]'
SCORING = '[regex.word]\npattern = "^[a-z]+"\n'

POLICY_MODULE = '''
"""The three-node test's policy: marks where each approval is decided; holds gated items."""
import json
import os
import uuid

import trio

from dsh_orchestra.approvals import allow

MARKS = {marks!r}
GATE = {gate!r}


async def policy(request):
    import ray

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
    reason = (request.reason or "").rsplit(": ", 1)[-1]
    mark = json.dumps({{"reason": reason, "node": node}})
    await trio.Path(MARKS, uuid.uuid4().hex).write_text(mark)
    if reason.startswith("gate-"):
        while not os.path.exists(GATE):  # noqa: ASYNC110 - the test writes the gate from another process
            await trio.sleep(0.02)
    return allow("marked")


policy.deadline = 600.0
'''

GATES = "".join(f"""
[[rules]]
name = "gate-{i}"
match = "GATE-{i}:"
reply = "gate {i} was {{outcome}}"
approval = {{ tool = "bash", reason = "gate-{i}" }}
""" for i in range(GATED)) + """
[[rules]]
name = "mark"
match = "MARK"
reply = "marked was {outcome}"
approval = { tool = "bash", reason = "mark" }
"""


def dataset_items() -> list[dict[str, Any]]:
    """Every tenth item asks for an approval (a mark of the node it ran on); targets for the scorers."""
    kinds = ["TICK", "plain", "SPAWN", "plain", "ASK", "plain", "E400", "plain", "LONG", "MARK"]
    rows: list[dict[str, Any]] = []
    for i in range(ITEMS - GATED):
        kind = kinds[i % len(kinds)]
        rows.append({"id": f"i-{i:04d}", "prompt": f"{kind} {i}", "target": "tock" if kind == "TICK" else f"answer to {kind} {i}",
                     "metadata": {"kind": kind}})
    gated = [{"id": f"gate-{i}", "prompt": f"GATE-{i}: hold", "target": f"gate {i} was allowed-once"} for i in range(GATED)]
    return rows[:GATE_AT] + gated + rows[GATE_AT:]


class ThreeNodes:
    """The module's cluster: a head with no actor resources and workers B and C."""

    def __init__(self) -> None:
        self.cluster = Cluster(initialize_head=True, connect=False,
                               head_node_args={**NODE, "include_dashboard": False})
        self.b = self.cluster.add_node(**NODE, resources={"node_b": 1})
        self.c = self.cluster.add_node(**NODE, resources={"node_c": 1})
        self.cluster.wait_for_nodes()

    def remove_b(self) -> None:
        self.cluster.remove_node(self.b)
        self.b = None

    def restore_b(self) -> None:
        """Worker B again (a new node) after a test removed it."""
        if self.b is None:
            self.b = self.cluster.add_node(**NODE, resources={"node_b": 1})
            self.cluster.wait_for_nodes()


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The policy module's directory, and its marks and gate beside it."""
    root = tmp_path_factory.mktemp("three-nodes")
    (root / "marks").mkdir()
    name = f"threenodes_{uuid.uuid4().hex[:8]}"
    (root / f"{name}.py").write_text(POLICY_MODULE.format(marks=str(root / "marks"), gate=str(root / "gate")))
    (root / "module").write_text(name)
    return root


@pytest.fixture(scope="module")
def three_nodes(policy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreeNodes]:
    with ray_serial(tmp_path_factory):
        yield from _three_nodes(policy_dir)


def _three_nodes(policy_dir: Path) -> Iterator[ThreeNodes]:
    saved = {name: os.environ.get(name) for name in ("RAY_AUTH_MODE", "PYTHONPATH")}
    os.environ["RAY_AUTH_MODE"] = "disabled"  # loopback only, as in conftest's ray_cluster
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(policy_dir), saved["PYTHONPATH"]]))
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    nodes = ThreeNodes()
    try:
        ray.init(address=nodes.cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        yield nodes
    finally:
        ray.shutdown()
        members = [p for p in me.children(recursive=True) if p.pid not in before]
        nodes.cluster.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        wait_gone(members, 30, "Ray processes outlived the cluster")


def marks_in(directory: Path) -> list[dict[str, str]]:
    found = []
    for path in directory.iterdir():
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:  # being written
            pass
    return found


def whole_lines(path: Path) -> list[dict[str, Any]]:
    """Every line, each complete JSON, the file ending in a newline (no torn line)."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), "the last line is torn"
    return [json.loads(line) for line in data.splitlines()]


def comparable(line: dict[str, Any]) -> tuple[Any, ...]:
    """What must not depend on where, or how often, an item ran."""
    return (line["status"], line["finish_reason"], line["final_response"], line["scores"],
            [a["outcome"] for a in line["approvals"]], [s["text"] for s in line["subagents"]],
            [(q["outcome"], q["selected"]) for q in line["questions"]], (line["error"] or {}).get("type"),
            line["metadata"])


def batch_args(directory: Path, dataset: Path, out: str, module: str, *extra: str) -> list[str]:
    home = directory / "dsh-home"
    home.mkdir(exist_ok=True)
    (directory / "script.toml").write_text(SCRIPT + GATES)
    (directory / "scoring.toml").write_text(SCORING)
    return ["batch", str(dataset), "--out", out, "--runtime", "sim", "--script", str(directory / "script.toml"),
            "--dsh-home", str(home), "--policy", f"{module}:policy", "--answerer", "first-option",
            "--score", "exact", "--score", "includes", "--score", "regex:word", "--scoring", str(directory / "scoring.toml"),
            "--group-by", "kind", "--concurrency", "4", "--retries", "0", "--timeout", "60", "--no-progress",
            "--summary", out.replace(".jsonl", "-summary.json"), *extra]


async def cli(args: list[str], cwd: Path, env: dict[str, str]) -> Any:
    with trio.fail_after(600):
        return await trio.run_process([*CLI, *args], cwd=cwd, env=env, capture_stdout=True, capture_stderr=True, check=False)


def fresh_marks(policy_dir: Path) -> tuple[Path, Path]:
    """The marks directory emptied and the gate closed, for the next test."""
    marks, gate = policy_dir / "marks", policy_dir / "gate"
    for path in marks.iterdir():
        path.unlink()
    gate.unlink(missing_ok=True)
    return marks, gate


async def remove_b_while_it_holds_gated_items(three_nodes: ThreeNodes, marks: Path, gate: Path, held: list[dict[str, str]]) -> None:
    """Wait until the four gated items are in flight, remove worker B, open the gate."""
    with trio.fail_after(300):
        while len(found := [m for m in marks_in(marks) if m["reason"].startswith("gate-")]) < GATED:  # noqa: ASYNC110 - Ray actors write the marks: no event to wait on
            await trio.sleep(0.05)
    held.extend(found)
    await trio.to_thread.run_sync(three_nodes.remove_b)  # its actor and runtime die mid-turn
    await trio.Path(gate).touch()


async def test_a_worker_node_lost_mid_run_through_the_cli(three_nodes: ThreeNodes, policy_dir: Path, tmp_path: Path) -> None:
    three_nodes.restore_b()
    module = (policy_dir / "module").read_text()
    marks, gate = fresh_marks(policy_dir)
    env = {**cli_env(), "DSH_TELEMETRY_MODE": "DISABLED", "PYTHONPATH": os.environ["PYTHONPATH"]}
    dataset = write_dataset(tmp_path / "ds.jsonl", dataset_items())
    b_id, c_id = str(three_nodes.b.node_id), str(three_nodes.c.node_id)

    held: list[dict[str, str]] = []
    done: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        async def run_on_ray() -> None:
            args = batch_args(tmp_path / "ray", dataset, "ray.jsonl", module,
                              "--ray", three_nodes.cluster.address, "--ray-actors", "2", "--ray-actor-resources", RESOURCES)
            done["ray"] = await cli(args, tmp_path, env)

        (tmp_path / "ray").mkdir()
        nursery.start_soon(remove_b_while_it_holds_gated_items, three_nodes, marks, gate, held)
        nursery.start_soon(run_on_ray)

    ray_run = done["ray"]
    assert ray_run.returncode == 1, ray_run.stderr.decode()[-3000:]  # E400 items fail by design
    # two gated items were in flight on each worker when B was removed
    assert sorted(m["node"] for m in held) == sorted([b_id] * 2 + [c_id] * 2), held
    on_b = sorted(m["reason"] for m in held if m["node"] == b_id)
    # both workers ran items before that (placement), the head none
    before = [m for m in marks_in(marks) if m["reason"] == "mark"]
    assert {m["node"] for m in before} == {b_id, c_id}

    got = whole_lines(tmp_path / "ray.jsonl")
    by_id = {line["id"]: line for line in got}
    assert len(by_id) == len(got) == ITEMS  # every id exactly once
    assert set(by_id) == {item["id"] for item in dataset_items()}
    # B's gated items were lost once and decided again on C
    again = sorted(i for i, line in by_id.items() if line["attempts"] > 1)
    assert [f"gate-{r.split('-')[1]}" for r in on_b] == [i for i in again if i.startswith("gate-")], (on_b, again)
    decided_on_c = sorted(m["reason"] for m in marks_in(marks) if m["reason"] in on_b and m["node"] == c_id)
    assert decided_on_c == on_b
    assert all(by_id[f"gate-{i}"]["status"] == "ok" for i in range(GATED))

    # the same batch without Ray: the same lines (where and how often aside) and the same scores
    await trio.Path(gate).touch()
    (tmp_path / "local").mkdir()
    local = await cli(batch_args(tmp_path / "local", dataset, "local.jsonl", module), tmp_path, env)
    assert local.returncode == 1, local.stderr.decode()[-3000:]
    want = {line["id"]: line for line in whole_lines(tmp_path / "local.jsonl")}
    assert {i: comparable(line) for i, line in by_id.items()} == {i: comparable(line) for i, line in want.items()}
    summaries = {run: json.loads((tmp_path / f"{run}-summary.json").read_text()) for run in ("ray", "local")}
    for key in ("total", "ok", "error", "scores", "groups", "finish_reasons"):
        assert summaries["ray"].get(key) == summaries["local"].get(key), key
    assert summaries["ray"]["scores"]["exact"]["n"] > 0
    named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("dsh-orchestra-")]
    assert named == []


REAL_ITEMS = 40
REAL_GATE_AT = 12


def _escalation(command: str, justification: str) -> dict[str, Any]:
    return {"name": "bash", "input": {"description": "x", "command": command,
                                      "sandbox_permissions": "danger-full-access", "justification": justification}}


def real_items() -> list[dict[str, Any]]:
    rows = [{"id": f"r-{i:03d}", "prompt": ("MARK " if i % 4 == 0 else "hello ") + str(i), "target": "marked" if i % 4 == 0 else "",
             "metadata": {"n": i}} for i in range(REAL_ITEMS - GATED)]
    gated = [{"id": f"gate-{i}", "prompt": f"GATE-{i}: hold", "target": f"gate {i} done"} for i in range(GATED)]
    return rows[:REAL_GATE_AT] + gated + rows[REAL_GATE_AT:]


def real_model_script() -> Any:
    from dsh_orchestra.testing import parse_script

    rules = [{"name": f"gate-{i}", "match": f"GATE-{i}:", "reply": f"gate {i} done",
              "tools": [_escalation(f"echo {i} > gate-{i}.txt", f"gate-{i}")]} for i in range(GATED)]
    rules.append({"name": "mark", "match": "MARK", "reply": "marked", "tools": [_escalation("true", "mark")]})
    return parse_script({"default_reply": "hello back", "rules": rules})


def real_comparable(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["status"], line["finish_reason"], line["final_response"], line["scores"],
            [a["outcome"] for a in line["approvals"]], (line["error"] or {}).get("type"), line["metadata"])


@pytest.mark.integration
async def test_the_real_runtime_loses_a_worker_node_mid_run(three_nodes: ThreeNodes, policy_dir: Path, tmp_path: Path) -> None:
    """``--runtime dsh`` in the actors, offline against the scripted model: B removed while it
    holds two gated items; every id once, the same answers and scores as without Ray."""
    from dsh_orchestra.testing import open_fake_model

    three_nodes.restore_b()
    module = (policy_dir / "module").read_text()
    marks, gate = fresh_marks(policy_dir)
    write_dataset(tmp_path / "ds.jsonl", real_items())
    b_id, c_id = str(three_nodes.b.node_id), str(three_nodes.c.node_id)
    env = {**cli_env(), "DSH_TELEMETRY_MODE": "DISABLED", "PYTHONPATH": os.environ["PYTHONPATH"],
           "DEEPSEEK_API_KEY": "offline-placeholder", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def args(run: str, *extra: str) -> list[str]:
        workspace = tmp_path / f"ws-{run}"
        workspace.mkdir()
        home = tmp_path / (f"home-{run}" + ("-{actor}" if extra else ""))
        if not extra:
            home.mkdir()
        return ["batch", "ds.jsonl", "--out", f"{run}.jsonl", "--runtime", "dsh", "--dsh-home", str(home),
                "--workspace", str(workspace), "--policy", f"{module}:policy", "--score", "exact", "--score", "includes",
                "--concurrency", "4", "--retries", "0", "--timeout", "120", "--no-progress",
                "--summary", f"{run}-summary.json", *extra]

    held: list[dict[str, str]] = []
    done: dict[str, Any] = {}
    async with open_fake_model(real_model_script()) as model:
        env["DEEPSEEK_BASE_URL"] = model.base_url

        async def run_on_ray() -> None:
            done["ray"] = await cli(args("ray", "--ray", three_nodes.cluster.address, "--ray-actors", "2",
                                         "--ray-actor-resources", RESOURCES), tmp_path, env)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(remove_b_while_it_holds_gated_items, three_nodes, marks, gate, held)
            nursery.start_soon(run_on_ray)
        done["local"] = await cli(args("local"), tmp_path, env)

    for run in ("ray", "local"):
        assert done[run].returncode == 0, done[run].stderr.decode()[-3000:]
    assert sorted(m["node"] for m in held) == sorted([b_id] * 2 + [c_id] * 2), held
    on_b = sorted(m["reason"] for m in held if m["node"] == b_id)
    # placement on both workers: the held gated items above (two on each). The items before the
    # gates may all run on one worker when the other's actor (and its node's gateway) starts late.
    got = whole_lines(tmp_path / "ray.jsonl")
    by_id = {line["id"]: line for line in got}
    assert len(by_id) == len(got) == REAL_ITEMS
    again = sorted(i for i, line in by_id.items() if line["attempts"] > 1)
    assert on_b == again, (on_b, again)
    want = {line["id"]: line for line in whole_lines(tmp_path / "local.jsonl")}
    assert {i: real_comparable(line) for i, line in by_id.items()} == {i: real_comparable(line) for i, line in want.items()}
    summaries = {run: json.loads((tmp_path / f"{run}-summary.json").read_text()) for run in ("ray", "local")}
    for key in ("total", "ok", "error", "scores", "finish_reasons"):
        assert summaries["ray"].get(key) == summaries["local"].get(key), key
    assert (tmp_path / "ws-ray" / "gate-0.txt").exists()

"""One batch on Ray actors, on a small local Ray instance (2 CPUs) started for this module.

* the same ids, statuses and answers as the same batch on one machine (policy and answerer
  loaded on the driver, used inside the actors); sharding;
* runtime settings and secrets reach the runtimes, and no Ray log holds a secret;
* an actor killed mid-run (SIGKILL of its process, then ``ray.kill``) is replaced, its items go
  out again: every id exactly once, nothing lost;
* the driver (the CLI with ``--ray ADDRESS``) killed with SIGKILL, then ``--resume``;
* the CLI with ``--ray`` and no address (a local instance of its own, gone afterwards);
* no actor can start: the runtime's start error, bare;
* the real runtime (``--runtime dsh``) on Ray through the CLI, offline against the scripted model.
"""

from __future__ import annotations

from collections import Counter

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from dsh_orchestra.approvals import load_policy
from dsh_orchestra.batch import BatchOptions, in_shard, read_results, run_batch
from dsh_orchestra.protocol import RuntimeStartError
from dsh_orchestra.questions import first_option
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.scale import run_batch_ray

from scale_support import (
    CLI, RayCluster, POLICY, by_id, cli_args, cli_env, count_lines, mixed_items, our_runtimes, run_cli, sim_spec, tick_items,
    wait_until, write_dataset,
)

ray = pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra: pip install '.[test,ray]')")
pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance at a time (tests/conftest.py)

SECRET_KEY = "sk-scale-test-secret-0123456789"
SECRET_TOKEN = "tok-scale-test-secret-9876543210"


def outcome(line: dict[str, Any]) -> tuple[Any, ...]:
    """What must not depend on where an item ran."""
    return (line["status"], line["finish_reason"], line["final_response"],
            [a["outcome"] for a in line["approvals"]], [s["text"] for s in line["subagents"]],
            (line["error"] or {}).get("type"), line["metadata"])


def named_actors(prefix: str = "dsh-orchestra-") -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix))


async def test_same_results_as_one_machine(ray_cluster: RayCluster, tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY)
    dataset = write_dataset(tmp_path / "ds.jsonl", mixed_items())
    options = BatchOptions(policy=load_policy(str(policy_file)), answerer=first_option, progress="none",
                           summary=tmp_path / "local-summary.json")
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    local = await run_batch(dataset, tmp_path / "local.jsonl", sim_spec(tmp_path / "local"), options)
    on_ray = await run_batch_ray(dataset, tmp_path / "ray.jsonl", sim_spec(tmp_path / "ray"),
                                 BatchOptions(policy=options.policy, answerer=first_option, progress="none",
                                              summary=tmp_path / "ray-summary.json"),
                                 actors=2, runtimes_per_actor=1)
    want, got = by_id(tmp_path / "local.jsonl"), by_id(tmp_path / "ray.jsonl")
    assert set(got) == set(want) == {item["id"] for item in mixed_items()}
    assert {i: outcome(line) for i, line in got.items()} == {i: outcome(line) for i, line in want.items()}
    assert {line["status"] for line in got.values()} == {"ok", "error"}
    assert got["m-004"]["final_response"] == "deploy was allowed-once"  # the policy, inside an actor
    assert got["m-005"]["final_response"] == "deploying to staging"  # the answerer, inside an actor
    assert [list(line) for line in got.values()] == [list(line) for line in want.values()]  # the same keys, in order
    for key in ("total", "ok", "error", "resumed", "processed", "finish_reasons", "approval_outcomes"):
        assert getattr(on_ray, key) == getattr(local, key), key
    assert json.loads((tmp_path / "ray-summary.json").read_text()).keys() == json.loads(
        (tmp_path / "local-summary.json").read_text()).keys()
    assert named_actors() == []  # every actor of the run was ended


async def test_shard_on_ray(ray_cluster: RayCluster, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", mixed_items())
    summary = await run_batch_ray(dataset, tmp_path / "r.jsonl", sim_spec(tmp_path), BatchOptions(
        shard=(1, 3), progress="none", answerer=first_option), actors=1)
    want = {item["id"] for item in mixed_items() if in_shard(item["id"], (1, 3))}
    assert set(by_id(tmp_path / "r.jsonl")) == want and summary.total == len(want)


async def test_settings_and_secrets_reach_the_runtimes_but_no_log(ray_cluster: RayCluster, tmp_path: Path) -> None:
    spec = sim_spec(tmp_path, env={"MY_API_TOKEN": SECRET_TOKEN, "SCALE_SETTING": "on"}, api_key=SECRET_KEY)
    dataset = write_dataset(tmp_path / "ds.jsonl", tick_items(30))
    seen: list[dict[str, str]] = []

    def runtime_environments() -> list[dict[str, str]]:
        found = []
        for process in our_runtimes(tmp_path):
            try:
                found.append(process.environ())
            except psutil.Error:
                pass
        return found

    async with trio.open_nursery() as nursery:
        async def watch() -> None:
            while not seen:
                seen.extend(await trio.to_thread.run_sync(runtime_environments))
                await trio.sleep(0.05)

        nursery.start_soon(watch)
        await run_batch_ray(dataset, tmp_path / "r.jsonl", spec, BatchOptions(progress="none"), actors=2)
        nursery.cancel_scope.cancel()
    assert seen, "no runtime was seen running"
    for environment in seen:
        assert environment["DEEPSEEK_API_KEY"] == SECRET_KEY
        assert environment["MY_API_TOKEN"] == SECRET_TOKEN
        assert environment["SCALE_SETTING"] == "on" and environment["DSH_TELEMETRY_MODE"] == "DISABLED"
    leaks = []
    for path in ray_cluster.temp_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            leaks += [f"{path}: {name}" for name, value in (("api key", SECRET_KEY), ("token", SECRET_TOKEN))
                      if value.encode() in data]
    assert leaks == []
    assert all(line["status"] == "ok" for line in by_id(tmp_path / "r.jsonl").values())


async def test_killed_actors_are_replaced_and_nothing_is_lost(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """SIGKILL one actor's process, then ``ray.kill`` the other, mid-run."""
    total = 240
    dataset = write_dataset(tmp_path / "ds.jsonl", tick_items(total))
    out = tmp_path / "r.jsonl"
    kills: list[str] = []

    async def killer() -> None:
        with trio.fail_after(60):
            await wait_lines(out, 20)
        first = wait_until(named_actors, 10, "the run's actors")[0]
        actor = ray.get_actor(first)
        pid = await trio.to_thread.run_sync(ray.get, actor.pid.remote())
        os.kill(pid, signal.SIGKILL)
        kills.append(f"SIGKILL {first}")
        with trio.fail_after(60):
            await wait_lines(out, count_lines(out) + 30)
        others = [name for name in named_actors() if not name.startswith(first.rsplit("-", 1)[0] + "-0.")]
        assert others, named_actors()
        ray.kill(ray.get_actor(others[0]))
        kills.append(f"ray.kill {others[0]}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(killer)
        summary = await run_batch_ray(dataset, out, sim_spec(tmp_path), BatchOptions(progress="none", retries=0),
                                      actors=2, backoff=(0.1, 1.0))
    assert len(kills) == 2, kills
    results = by_id(out)  # every id exactly once
    assert set(results) == {item["id"] for item in tick_items(total)}
    assert all(line["status"] == "ok" for line in results.values()), [
        line for line in results.values() if line["status"] != "ok"][:3]
    again = [line for line in results.values() if line["attempts"] > 1]
    assert again, "no item was handed out again"  # retries=0: only lost hand-outs made attempts > 1
    assert summary.ok == total and summary.retries == sum(line["attempts"] - 1 for line in results.values())
    assert named_actors() == []


async def wait_lines(path: Path, count: int) -> None:
    while count_lines(path) < count:  # noqa: ASYNC110 - Ray actors' results reach the file: no event to wait on
        await trio.sleep(0.02)


def test_driver_killed_then_resumed(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """The CLI driver on the module's cluster, SIGKILLed after some results, then ``--resume``."""
    total = 200
    dataset = write_dataset(tmp_path / "ds.jsonl", tick_items(total))
    out = tmp_path / "r.jsonl"
    args = cli_args(dataset, out, tmp_path, "--ray", ray_cluster.address, "--ray-actors", "2", "--resume")
    driver = subprocess.Popen([*CLI, *args], cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        wait_until(lambda: count_lines(out) >= 15 or driver.poll() is not None, 90, "the first results")
        assert driver.poll() is None, f"the driver ended first: {driver.stderr.read() if driver.stderr else ''}"
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if driver.stderr is not None:
            driver.stderr.close()
    before, torn = read_results(out, repair=False)  # only whole lines (a torn tail at worst)
    assert 15 <= len(before) < total and torn < 200
    # its actors die with it (their owner is gone), and their runtimes with them
    wait_until(lambda: not named_actors() and not our_runtimes(tmp_path), 30, "the killed driver's actors to go")
    done = run_cli([*args, "--json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = by_id(out)
    assert set(results) == {item["id"] for item in tick_items(total)}
    assert all(line["status"] == "ok" for line in results.values())
    summary = json.loads(done.stdout)
    assert summary["resumed"] == len(before) and summary["processed"] == total - len(before)


def _local_heads() -> set[int]:
    """Ray heads started by LocalRay on this machine (their temp dirs are dsh-ray-*)."""
    heads = set()
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or ())
        except psutil.Error:
            continue
        if "raylet" in cmdline and "/dsh-ray-" in cmdline:
            heads.add(process.pid)
    return heads


def test_cli_with_its_own_local_ray_instance(tmp_path: Path) -> None:
    """``--ray`` with no address: a local instance for the run; the same results as without it."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    dataset = write_dataset(tmp_path / "ds.jsonl", mixed_items())
    common = ("--policy", str(policy), "--answerer", "first-option")
    heads = _local_heads()
    local = run_cli(cli_args(dataset, tmp_path / "local.jsonl", tmp_path, *common), cwd=tmp_path)
    on_ray = run_cli(cli_args(dataset, tmp_path / "ray.jsonl", tmp_path, *common, "--ray", "--ray-actors", "2",
                              "--runtimes-per-actor", "1", "--summary", str(tmp_path / "summary.json")), cwd=tmp_path,
                     unset=("RAY_AUTH_MODE",))  # Ray's default: the head and the driver must agree on it
    assert local.returncode == on_ray.returncode == 1, on_ray.stderr  # some items end in error (by design)
    want, got = by_id(tmp_path / "local.jsonl"), by_id(tmp_path / "ray.jsonl")
    assert {i: outcome(line) for i, line in got.items()} == {i: outcome(line) for i, line in want.items()}
    assert (tmp_path / "summary.json").exists()
    wait_until(lambda: _local_heads() <= heads, 15, "the CLI's Ray instance to stop")


async def test_no_actor_can_start(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """The runtime cannot start anywhere: its RuntimeStartError, bare, and no actor left."""
    dataset = write_dataset(tmp_path / "ds.jsonl", tick_items(3))
    spec = RuntimeSpec(command=[str(tmp_path / "no-such-runtime")], dsh_home=tmp_path, cwd=tmp_path)
    with pytest.raises(RuntimeStartError, match="no-such-runtime"):
        await run_batch_ray(dataset, tmp_path / "r.jsonl", spec, BatchOptions(progress="none"), actors=2)
    assert named_actors() == []
    assert not (tmp_path / "r.jsonl").exists()  # refused before the results file is made


class _LockedPolicy:
    """A policy Ray cannot pickle (it holds a thread lock)."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()

    def __call__(self, request: Any) -> None:
        return None


async def test_a_policy_that_cannot_be_pickled_is_refused_first(tmp_path: Path) -> None:
    from dsh_orchestra.batch import BatchUsageError

    dataset = write_dataset(tmp_path / "ds.jsonl", tick_items(2))
    with pytest.raises(BatchUsageError, match="cannot be sent to Ray actors"):
        await run_batch_ray(dataset, tmp_path / "r.jsonl", sim_spec(tmp_path),
                            BatchOptions(policy=_LockedPolicy(), progress="none"), actors=1)
    assert not (tmp_path / "r.jsonl").exists()  # refused before the results file is made


async def test_timeout_retries_audit_and_transcripts_work_in_actors(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """The per-item options run inside the actors as on one machine; the actors write the audit
    log and the transcripts (here on this node, the only one)."""
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY)
    items = [{"id": "hang", "prompt": "HANG forever"}, {"id": "deploy", "prompt": "DEPLOY now"},
             {"id": "tick", "prompt": "TICK once"}]
    dataset = write_dataset(tmp_path / "ds.jsonl", items)
    # Only "hang" may reach the timeout. "deploy" and "tick" take milliseconds alone, but on a
    # loaded machine the simulator's session-store writes were measured stalling it over a second
    # (disk contention); 3 s (before) was too close for them, 8 s costs "hang" 10 s more.
    options = BatchOptions(timeout=8.0, retries=1, retry_backoff=0.05, policy=load_policy(str(policy_file)),
                           audit=tmp_path / "audit.jsonl", transcripts=tmp_path / "transcripts", progress="none")
    summary = await run_batch_ray(dataset, tmp_path / "r.jsonl", sim_spec(tmp_path), options, actors=2)
    results = by_id(tmp_path / "r.jsonl")
    assert results["hang"]["status"] == "error" and results["hang"]["error"]["type"] == "TimeoutError"
    assert results["hang"]["attempts"] == 2 and summary.retries == 1
    assert results["deploy"]["final_response"] == "deploy was allowed-once"
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [record["outcome"] for record in audit] == ["allowed-once"]
    written = sorted(path.name for path in (tmp_path / "transcripts").iterdir())
    assert written == ["deploy.jsonl.gz", "tick.jsonl.gz"]  # the items that got a turn


def _escalation(command: str, justification: str) -> dict[str, Any]:
    return {"name": "bash", "input": {"description": "x", "command": command,
                                      "sandbox_permissions": "danger-full-access", "justification": justification}}


REAL_POLICY = """
default = "rejected"
deadline = 30

[[rules]]
name = "allowed runs"
tools = "bash"
reason = "allowed run$"
outcome = "allowed-once"
"""

REAL_ITEMS = [
    {"id": "yes", "prompt": "ESC-YES please"},
    {"id": "no", "prompt": "ESC-NO please"},
    {"id": "ask", "prompt": "QUESTION please"},
    {"id": "bad", "prompt": "E400 please"},
    *({"id": f"plain-{i}", "prompt": f"hello {i}", "metadata": {"n": i}} for i in range(6)),
]


def _real_model_script() -> Any:
    from dsh_orchestra.testing import parse_script

    ask = {"questions": [{"id": "mode", "question": "Which mode?", "options": [{"label": "fast"}, {"label": "safe"}]}]}
    return parse_script({"rules": [
        {"name": "yes", "match": "ESC-YES", "reply": "ran", "tools": [_escalation("echo yes > allowed.txt", "allowed run")]},
        {"name": "no", "match": "ESC-NO", "reply": "refused", "tools": [_escalation("echo no > refused.txt", "forbidden run")]},
        {"name": "ask", "match": "QUESTION", "reply": "asked", "tools": [{"name": "ask_user_question", "input": ask}]},
        {"name": "bad", "match": "E400", "fail": "http-400"},
    ]})


def comparable(line: dict[str, Any]) -> dict[str, Any]:
    """A result line without what may differ between two runs of one batch: timings, the
    random session ids, the tool call ids, and the model gateway's counts (``model``: compared
    apart, its timings differ)."""
    out = {k: v for k, v in line.items() if k not in ("duration_s", "session_id", "model")}
    out["approvals"] = [{k: v for k, v in a.items() if k != "call_id"} for a in line["approvals"]]
    out["subagents"] = [{k: v for k, v in s.items() if k != "child_session_id"} for s in line["subagents"]]
    return out


@pytest.mark.integration
async def test_real_runtime_on_ray_through_the_cli(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """``batch --runtime dsh --ray ADDRESS``, offline against the scripted model: the same lines as the
    same command without ``--ray`` (timings aside); the policy reaches the actors' runtimes through
    the relay (the allowed command's side effect is on disk, the audit says ``via: relay``); each
    line's ``model`` counts (its node gateway's) are the local run's, its calls what the model
    answered for its session, and the summary's ``model`` totals add up over the nodes."""
    from dsh_orchestra.testing import open_fake_model

    write_dataset(tmp_path / "ds.jsonl", REAL_ITEMS)
    (tmp_path / "policy.toml").write_text(REAL_POLICY)
    env = {**cli_env(), "DSH_TELEMETRY_MODE": "DISABLED", "DEEPSEEK_API_KEY": "offline-placeholder",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    done: dict[str, subprocess.CompletedProcess[bytes]] = {}
    async with open_fake_model(_real_model_script()) as model:
        env["DEEPSEEK_BASE_URL"] = model.base_url
        for run, extra in (("local", ()), ("ray", ("--ray", ray_cluster.address, "--ray-actors", "2", "--concurrency", "4"))):
            workspace = tmp_path / f"ws-{run}"
            workspace.mkdir()
            home = tmp_path / (f"home-{run}" + ("-{actor}" if run == "ray" else ""))
            if run == "local":
                home.mkdir()
            args = ["batch", "ds.jsonl", "--out", f"{run}.jsonl", "--runtime", "dsh", "--dsh-home", str(home),
                    "--workspace", str(workspace), "--policy", "policy.toml", "--answerer", "first-option",
                    "--audit", f"audit-{run}.jsonl", "--summary", f"summary-{run}.json", "--no-progress", *extra]
            with trio.fail_after(300):
                done[run] = await trio.run_process([*CLI, *args], cwd=tmp_path, env=env, capture_stdout=True,
                                                   capture_stderr=True, check=False)
    for run in ("local", "ray"):
        assert done[run].returncode == 1, done[run].stderr.decode()[-3000:]  # "bad" fails (HTTP 400), by design
    want, got = by_id(tmp_path / "local.jsonl"), by_id(tmp_path / "ray.jsonl")
    assert set(got) == set(want) == {item["id"] for item in REAL_ITEMS}  # every id once
    counted = Counter(r.session_id for r in model.requests)
    counts = ("calls", "upstream_calls", "cache_hits", "retries", "errors")
    for i, line in got.items():
        assert line["model"]["calls"] == counted[line["session_id"]] > 0, (i, line["model"])
        assert {k: line["model"][k] for k in counts} == {k: want[i]["model"][k] for k in counts}, i
        if i != "bad":  # its one call was answered 400: no stream timed
            assert line["model"]["call_duration_s"] > 0 and line["model"]["time_to_first_token_s"] > 0, i
    assert {i: comparable(line) for i, line in got.items()} == {i: comparable(line) for i, line in want.items()}
    assert got["yes"]["final_response"] == "ran" and got["yes"]["approvals"][0]["outcome"] == "allowed-once"
    assert got["no"]["approvals"][0]["outcome"] == "rejected" and got["ask"]["questions"][0]["selected"] == ["fast"]
    assert got["bad"]["status"] == "error" and got["plain-0"]["status"] == "ok"
    assert (tmp_path / "ws-ray" / "allowed.txt").read_text() == "yes\n" and not (tmp_path / "ws-ray" / "refused.txt").exists()
    audit = [json.loads(line) for line in (tmp_path / "audit-ray.jsonl").read_text().splitlines()]
    assert sorted((a["outcome"], a["via"]) for a in audit) == [("allowed-once", "relay"), ("rejected", "relay")]
    summaries = {run: json.loads((tmp_path / f"summary-{run}.json").read_text()) for run in ("local", "ray")}
    for key in ("total", "ok", "error", "finish_reasons", "approval_outcomes", "usage"):
        assert summaries["ray"][key] == summaries["local"][key], key
    ray_model, local_model = summaries["ray"]["model"], summaries["local"]["model"]
    assert {k: ray_model[k] for k in (*counts, "input_tokens", "output_tokens")} == {
        k: local_model[k] for k in (*counts, "input_tokens", "output_tokens")}
    assert ray_model["calls"] == sum(line["model"]["calls"] for line in got.values())
    assert ray_model["nodes"] == 1 and ray_model["concurrency"]["final"] >= 1 and ray_model["budget"] is None
    assert summaries["ray"]["usage"]["total_tokens"] > 0  # the model's usage reached the driver
    homes = sorted(p.name for p in tmp_path.glob("home-ray-*"))  # noqa: ASYNC240 - the runs have ended; nothing else runs
    assert homes == ["home-ray-0", "home-ray-1"]  # one DSH_HOME per actor, both used
    assert named_actors() == []

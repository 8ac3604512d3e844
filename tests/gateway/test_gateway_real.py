"""The real runtime through the gateway, against the fake model: routing, keys, files."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import trio

from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.gateway import GatewayOptions
from dsh_orchestra.testing._fake_model import FakeModelServer, open_fake_model
from dsh_orchestra.testing._script import parse_script

from gateway_support import BASE_ENV, REAL_KEY, write_dataset

pytestmark = pytest.mark.integration
START = 240.0
TOKEN_PREFIX = "dsho-gw-"


def environments(pid: int) -> list[bytes]:
    """The environments of ``pid`` and its descendants."""
    process = psutil.Process(pid)
    found = []
    for member in [process, *process.children(recursive=True)]:
        try:
            found.append(Path(f"/proc/{member.pid}/environ").read_bytes())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def written(root: Path) -> dict[Path, bytes]:
    """Every file under ``root`` (results, summary, transcripts, logs, DSH_HOME, workspace)."""
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def test_open_runtime_routes_the_real_runtime_through_a_gateway(
    dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", REAL_KEY)
    monkeypatch.setenv("OTHER_COPY_OF_THE_KEY", REAL_KEY)  # a copy under another name is dropped too
    spec = dsh_spec(api_key=None)
    with trio.fail_after(START):
        async with open_runtime(spec) as runtime:
            gateway = runtime.gateway
            assert gateway is not None and gateway.upstream == fake_model.base_url
            result = await runtime.session().run("Say hello")
            assert result.final_response == "Hello from the fake model"
            envs = environments(runtime.actor.pid)
    assert envs and all(REAL_KEY.encode() not in env for env in envs)
    assert any(f"DEEPSEEK_BASE_URL={gateway.base_url}".encode() in env for env in envs)
    assert any(f"DEEPSEEK_API_KEY={gateway.token}".encode() in env for env in envs)
    assert fake_model.requests and {r.api_key for r in fake_model.requests} == {REAL_KEY}
    assert gateway.totals.calls == len(fake_model.requests)


async def test_no_gateway_lets_the_runtime_call_the_model_itself(
    dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer
) -> None:
    with trio.fail_after(START):
        async with open_runtime(dsh_spec(api_key=REAL_KEY), gateway=None) as runtime:
            assert runtime.gateway is None
            await runtime.session().run("Say hello")
    assert {r.api_key for r in fake_model.requests} == {REAL_KEY}


async def test_a_batch_shares_one_gateway_and_writes_no_key_or_token(
    tmp_path: Path, dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": f"q{i}", "prompt": f"question {i}"} for i in range(4)])
    out = tmp_path / "results.jsonl"
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    logging.getLogger("dsh_orchestra").addHandler(handler)
    caplog.set_level(logging.DEBUG, logger="dsh_orchestra")
    try:
        with trio.fail_after(START):
            summary = await run_batch(dataset, out, dsh_spec(api_key=REAL_KEY), BatchOptions(
                runtimes=2, progress="none", timeout=60, summary=tmp_path / "summary.json",
                transcripts=tmp_path / "transcripts"))
    finally:
        logging.getLogger("dsh_orchestra").removeHandler(handler)
        handler.close()
    assert summary.ok == 4
    assert {r.api_key for r in fake_model.requests} == {REAL_KEY}
    for line in lines(out).values():
        model = line["model"]
        assert isinstance(model, dict) and model["calls"] == model["upstream_calls"] >= 1 and model["cache_hits"] == 0
        assert model["input_tokens"] == 10 * model["calls"] and model["output_tokens"] == 5 * model["calls"]
        assert 0 <= model["time_to_first_token_s"] <= model["call_duration_s"]
    assert summary.model is not None and summary.model["calls"] == len(fake_model.requests)
    assert summary.model["concurrency"]["mode"] == "auto" and summary.model["hit_rate"] == 0
    files = written(tmp_path)
    assert log_file in files and out in files and len(files) > 5
    for path, data in files.items():
        assert REAL_KEY.encode() not in data and TOKEN_PREFIX.encode() not in data, path
    assert REAL_KEY not in caplog.text and TOKEN_PREFIX not in caplog.text


CACHE_SCRIPT = parse_script({"default_reply": "real answer", "rules": [
    {"name": "spawn", "match": "SPAWN", "reply": "spawning", "after_subagents": "children done",
     "spawn": [{"description": "child task", "prompt": "CHILD: review", "reply": "child reviewed"}]},
    {"name": "echo", "match": "ECHO", "reply": "you said: {prompt}"},
]})


def lines(path: Path) -> dict[tuple[str, int], dict[str, object]]:
    return {(r["id"], r.get("epoch", 1)): r for r in map(json.loads, path.read_text().splitlines())}


async def test_a_batch_recorded_once_replays_with_the_model_stopped(tmp_path: Path, workspace: Path) -> None:
    """Record on the real runtime against the fake model; replay with the model stopped: the
    same final responses and scores, and an item never recorded fails with a cache miss."""
    items = [{"id": "plain", "prompt": "question one", "target": "real answer"},
             {"id": "echo", "prompt": "ECHO this", "target": "you said: ECHO this"},
             {"id": "spawn", "prompt": "SPAWN one child", "target": "children done"}]
    dataset = write_dataset(tmp_path / "ds.jsonl", items)
    cache = tmp_path / "cache"

    def spec(base_url: str, home: str) -> RuntimeSpec:
        (tmp_path / home).mkdir()
        return RuntimeSpec(dsh_home=tmp_path / home, cwd=workspace, base_url=base_url, api_key=REAL_KEY,
                           env={**BASE_ENV}, handshake_timeout=120.0)

    options = dict(runtimes=1, progress="none", timeout=60, scorers=["exact"], epochs=2)
    with trio.fail_after(START):
        async with open_fake_model(CACHE_SCRIPT) as model:
            recorded = await run_batch(dataset, tmp_path / "recorded.jsonl", spec(model.base_url, "h1"), BatchOptions(
                **options, gateway=GatewayOptions(cache=str(cache), cache_mode="record")))
            upstream = model.base_url
            calls = len(model.requests)
        assert recorded.ok == 6 and calls >= 8
        replayed = await run_batch(dataset, tmp_path / "replayed.jsonl", spec(upstream, "h2"), BatchOptions(
            **options, gateway=GatewayOptions(cache=str(cache), cache_mode="replay")))
    assert replayed.ok == 6
    before, after = lines(tmp_path / "recorded.jsonl"), lines(tmp_path / "replayed.jsonl")
    assert set(before) == set(after) and len(after) == 6
    for key in before:
        assert after[key]["final_response"] == before[key]["final_response"], key
        assert after[key]["scores"] == before[key]["scores"], key
    assert after[("spawn", 2)]["final_response"] == "children done"
    spawned = after[("spawn", 1)]["model"]  # the child's calls count for its item
    assert isinstance(spawned, dict) and spawned["calls"] == spawned["cache_hits"] >= 4 and spawned["upstream_calls"] == 0
    assert replayed.model is not None and replayed.model["hit_rate"] == 1.0 and recorded.model is not None
    assert replayed.model["saved_tokens"] == recorded.model["input_tokens"] + recorded.model["output_tokens"]
    write_dataset(tmp_path / "new.jsonl", [{"id": "new", "prompt": "never recorded"}])
    with trio.fail_after(START):
        missing = await run_batch(tmp_path / "new.jsonl", tmp_path / "missing.jsonl", spec(upstream, "h3"), BatchOptions(
            runtimes=1, progress="none", timeout=60, retries=0,
            gateway=GatewayOptions(cache=str(cache), cache_mode="replay")))
    [line] = lines(tmp_path / "missing.jsonl").values()
    assert missing.error == 1 and "cache miss: request " in line["error"]["message"]  # type: ignore[index]

"""The real runtime through the gateway, against the fake model: routing, keys, files."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import trio

from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.testing._fake_model import FakeModelServer

from gateway_support import REAL_KEY, write_dataset

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
    files = written(tmp_path)
    assert log_file in files and out in files and len(files) > 5
    for path, data in files.items():
        assert REAL_KEY.encode() not in data and TOKEN_PREFIX.encode() not in data, path
    assert REAL_KEY not in caplog.text and TOKEN_PREFIX not in caplog.text

"""``dsh-orchestra score --no-gateway`` and ``score_results(gateway=None)``: the judges' runtime
opens without a gateway; by default it gets one of its own, as a batch's judges do
(tests/batch/test_judges_no_gateway.py)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio

from dsh_orchestra.batch import score_results
from dsh_orchestra.cli import main
from dsh_orchestra.eval import _judge
from dsh_orchestra.gateway import DEFAULT_GATEWAY
from dsh_orchestra.runtime import RuntimeSpec

from eval_support import write_jsonl


class _Places:
    @asynccontextmanager
    async def lease(self) -> AsyncIterator[Any]:
        yield None


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The gateway option of every pool the judges open (none is started)."""
    seen: list[Any] = []

    @asynccontextmanager
    async def places(spec: RuntimeSpec | None, runtimes: int, **options: Any) -> AsyncIterator[_Places]:
        seen.append(options.get("gateway", DEFAULT_GATEWAY))
        yield _Places()

    monkeypatch.setattr(_judge, "open_places", places)
    return seen


def _files(tmp_path: Path) -> tuple[Path, Path]:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": "q1", "prompt": "p", "target": "x"}])
    results = tmp_path / "results.jsonl"
    results.write_text("")  # no line to judge: only the opening of the judges' runtime is looked at
    return dataset, results


@pytest.mark.parametrize(("flags", "expected"), [([], DEFAULT_GATEWAY), (["--no-gateway"], None)])
def test_score_opens_the_judges_runtime_without_a_gateway_only_with_no_gateway(
        flags: list[str], expected: Any, opened: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-score-test")
    dataset, results = _files(tmp_path)
    status = main(["score", str(results), "--dataset", str(dataset), "--out", str(tmp_path / "out.jsonl"), "--score", "judge",
                   "--runtime", "dsh", "--dsh-home", str(tmp_path / "home"), "--json", *flags])
    assert status == 0
    assert opened == [expected]


@pytest.mark.parametrize("gateway", [DEFAULT_GATEWAY, None])
async def test_score_results_hands_its_gateway_to_the_judges(gateway: Any, opened: list[Any], tmp_path: Path) -> None:
    dataset, results = _files(tmp_path)
    spec = RuntimeSpec(command=["dsh", "--profile", "sdk"], name="dsh", dsh_home=str(tmp_path / "home"))
    with trio.fail_after(30):
        await score_results(results, dataset, tmp_path / "out.jsonl", ["judge"], judge_runtime=spec, gateway=gateway)
    assert opened == [gateway]

"""A run without a gateway (``gateway=None``, ``--no-gateway``) opens its judges' runtime without
one too; a run with one gives them a gateway of their own, as before. This is the path a Ray run
without node gateways takes (no ``RayRunner.lease``: the judges open a pool on the driver);
tests/scale/test_ray_judges.py runs it on Ray."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio

from dsh_orchestra.batch import BatchOptions
from dsh_orchestra.batch._evaluation import open_batch_eval
from dsh_orchestra.eval import EvalTally, ScorerSpec, make_plan
from dsh_orchestra.eval import _judge
from dsh_orchestra.gateway import DEFAULT_GATEWAY
from dsh_orchestra.runtime import RuntimeSpec


class _Places:
    @asynccontextmanager
    async def lease(self) -> AsyncIterator[Any]:
        yield None


@pytest.mark.parametrize(("gateway", "judges_gateway"), [(None, None), (DEFAULT_GATEWAY, DEFAULT_GATEWAY)])
async def test_the_judges_runtime_has_a_gateway_only_when_the_run_has_one(
        gateway: Any, judges_gateway: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[RuntimeSpec | None, Any]] = []

    @asynccontextmanager
    async def places(spec: RuntimeSpec | None, runtimes: int, **options: Any) -> AsyncIterator[_Places]:
        opened.append((spec, options.get("gateway", DEFAULT_GATEWAY)))
        yield _Places()

    monkeypatch.setattr(_judge, "open_places", places)
    plan = make_plan([ScorerSpec("judge", "judge", {}), "exact"])
    spec = RuntimeSpec(command=["dsh", "--profile", "sdk"], name="dsh", dsh_home=str(tmp_path))
    with trio.fail_after(10):
        async with open_batch_eval(BatchOptions(gateway=gateway), plan, tmp_path / "out.jsonl", lease=None, spec=spec,
                                   tally=EvalTally(plan)) as run:
            assert [(s.name, s.judge is not None) for s in run.scorers] == [("judge", True), ("exact", False)]
    assert opened == [(spec, judges_gateway)]

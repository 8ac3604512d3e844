"""open_places: the one way a workflow, a batch or a judge opens the runtimes of its job.

Simulator processes; every process is reaped when the block ends (conftest checks for
children left behind).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from dsh_orchestra import open_places as root_open_places
from dsh_orchestra.approvals import allow_tools
from dsh_orchestra.pool import Places, RuntimePool, job_warnings, open_places
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime

SpecMaker = Callable[..., RuntimeSpec]


async def test_a_pool_of_places_leases_its_runtimes_and_closes_them(sim_process: SpecMaker, tmp_path: Path) -> None:
    assert root_open_places is open_places
    audit = tmp_path / "audit.jsonl"
    with trio.fail_after(60):
        async with open_places(sim_process(), 2, approvals=allow_tools("bash"), audit=audit, max_sessions=1) as places:
            assert isinstance(places, Places) and isinstance(places.pool, RuntimePool) and places.runtime is None
            assert places.target is places.pool and places.pool.size == 2
            async with places.lease() as runtime:
                turn = await runtime.session().run("hello")
            assert turn.finish_reason == "completed"
            assert audit.exists()  # opened from the path, with the spec's secrets
    assert all(runtime.actor.connection is None or runtime.actor.connection.closed for runtime in places.pool.runtimes)


async def test_one_unpooled_runtime_is_its_own_lease(sim_process: SpecMaker) -> None:
    with trio.fail_after(60):
        async with open_places(sim_process(), pooled=False) as places:
            assert isinstance(places.runtime, Runtime) and places.pool is None and places.target is places.runtime
            async with places.lease() as runtime:
                assert runtime is places.runtime
                assert (await runtime.session().run("hello")).finish_reason == "completed"


async def test_no_spec_runs_the_simulator_in_a_scratch_home_removed_afterwards() -> None:
    with trio.fail_after(60):
        async with open_places(None, 1, scratch="placestest") as places:
            assert places.pool is not None
            home = places.pool.runtimes[0].actor.spec.dsh_home
            assert home is not None and await trio.Path(home).is_dir() and "placestest" in str(home)
    assert not await trio.Path(home).exists()


def test_job_warnings_are_reported_once_for_the_job(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    spec = RuntimeSpec(command=["dsh"], dsh_home=tmp_path, approval_relay="off")  # a dsh with no --patch files
    with caplog.at_level(logging.WARNING, logger="dsh_orchestra.session"):
        with job_warnings(spec, approvals=True, answerer=False) as warnings:
            assert warnings and all("approval policy" in message for message in warnings)
            with job_warnings(spec, approvals=True, answerer=False) as again:  # a runtime opened inside
                assert again == warnings
    assert [record.getMessage() for record in caplog.records] == warnings

"""On the simulator process (real pipes, so subscribers and requests read the pipe themselves):
a turn group, session runs and a ``session.events()`` subscriber reading the pipe, all at once,
approvals and questions included; every outcome is what session.run gives alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from process_table import assert_gone
from test_turn_group import SCENARIO, SIM, approve, run_each, run_group, shape

from dsh_orchestra.questions import first_option
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.transport import Notification


@pytest.fixture
def sim_spec(tmp_path: Path) -> RuntimeSpec:
    (tmp_path / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    return RuntimeSpec.simulator(script=tmp_path / "scenario.toml", dsh_home=tmp_path, cwd=tmp_path)


async def test_a_group_runs_and_a_pipe_reading_subscriber_at_once(sim_spec: RuntimeSpec) -> None:
    alone: dict[str, Any] = {}
    together: dict[str, Any] = {}
    seen: list[Notification] = []
    with trio.fail_after(90):
        async with open_runtime(sim_spec, approvals=approve, answerer=first_option) as runtime:
            alone = await run_each(runtime, {f"alone-{name}": prompt for name, prompt in SIM.items()})

            async def watch() -> None:
                async for notification in events:  # reads the pipe itself when its buffer is empty
                    seen.append(notification)
                    event = notification.params.get("event", {})
                    if notification.method == "session.event" and event.get("type") == "turn/end":
                        return

            async def group() -> None:
                together.update(await run_group(runtime, {f"group-{name}": prompt for name, prompt in SIM.items()}))

            async def runs() -> None:
                together.update(await run_each(runtime, {f"run-{name}": prompt for name, prompt in SIM.items()}))

            with runtime.session("group-deploy").events() as events:
                async with trio.open_nursery() as nursery:
                    for job in (watch, group, runs):
                        nursery.start_soon(job)
            pid = runtime.actor.pid
            statistics = runtime.connection.statistics()
    assert pid is not None
    assert_gone(pid)
    for name in SIM:
        assert shape(together[f"group-{name}"]) == shape(alone[f"alone-{name}"]), name
        assert shape(together[f"run-{name}"]) == shape(alone[f"alone-{name}"]), name
    seqs = [n.params["event"]["seq"] for n in seen if n.method == "session.event" and n.params.get("sessionId") == "group-deploy"]
    assert seqs and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    deploy = together["group-deploy"]
    assert deploy.final_response == "deploy was allowed-once"
    assert [e["seq"] for e in deploy.events] == seqs[-len(deploy.events):]  # the same events, in the same order
    assert statistics.pending_requests == 0 and statistics.lent_reads > 0  # the pipe was read by waiting tasks

"""The blocking API (``dsh_orchestra.sync``): in a plain script, inside a running asyncio loop
(as a Jupyter cell runs), with plain and trio policies, and interrupted by Ctrl-C mid-turn.

Every runtime is the simulator as a process; the autouse leak check (tests/conftest.py) fails
a test that leaves a child behind, and the Ctrl-C test checks the process table itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra import Decision, TurnResult, sync
from dsh_orchestra.approvals import allow
from dsh_orchestra.batch import BatchSummary
from dsh_orchestra.protocol import JsonRpcResponseError
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, WorkflowResult
from process_table import assert_gone

from .embed_support import sim_spec, write_dataset

REPO = Path(__file__).resolve().parents[2]


def test_a_turn_events_and_calls_block_in_a_plain_thread(tmp_path: Path) -> None:
    with sync.open_runtime(sim_spec(tmp_path)) as runtime:
        assert runtime.alive and runtime.name == "sim"
        session = runtime.session("s1")
        result = session.run("hello")
        assert isinstance(result, TurnResult)
        assert (result.final_response, result.finish_reason, result.session_id) == ("echo: hello", "completed", "s1")
        with session.events() as events:
            message_id = session.prompt("again")
            seen = []
            for notification in events:
                event = notification.params.get("event", {})
                seen.append(event.get("type"))
                if event.get("type") == "turn/end":
                    break
            session.wait()
        assert isinstance(message_id, str) and "turn/end" in seen and "assistant/message" in seen
        assert session.get_working_directory() == str(tmp_path)
        resumed_elsewhere = runtime.session("s2")
        assert resumed_elsewhere.run("x").final_response == "echo: x"
        with pytest.raises(JsonRpcResponseError):  # the same exception as the trio API raises
            runtime.resume("no-such-session")
        pid = runtime.trio_runtime.actor.pid
    assert pid is not None
    assert_gone(pid)
    assert not runtime.alive


def test_the_blocking_api_works_inside_a_running_asyncio_loop(tmp_path: Path) -> None:
    """A Jupyter cell: asyncio runs in this thread, and the cell calls the blocking API."""

    async def cell() -> tuple[str, int]:
        asyncio.get_running_loop()  # asyncio is running here, as in a notebook kernel
        with sync.open_runtime(sim_spec(tmp_path)) as runtime:
            text = runtime.session().run("from a cell").final_response
        dataset = write_dataset(tmp_path)
        summary = sync.run_batch(dataset, tmp_path / "results.jsonl", sim_spec(tmp_path), runtimes=1, progress="none")
        return text, summary.ok

    assert asyncio.run(cell()) == ("echo: from a cell", 3)


def test_a_plain_script_runs_a_turn(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        from dsh_orchestra import sync
        from dsh_orchestra.runtime import RuntimeSpec
        spec = RuntimeSpec.simulator(script={str(tmp_path / 'scenario.toml')!r}, dsh_home={str(tmp_path / 'home')!r}, cwd={str(tmp_path)!r})
        with sync.open_runtime(spec) as runtime:
            print(runtime.session().run("scripted").final_response)
    """))
    sim_spec(tmp_path)  # writes the scenario and the home
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert (done.returncode, done.stdout) == (0, "echo: scripted\n"), done.stderr


@pytest.mark.parametrize("kind", ["plain", "trio"])
def test_policies_may_be_plain_or_trio_functions(tmp_path: Path, kind: str) -> None:
    asked: list[str] = []

    def plain(request: Any) -> Decision:
        asked.append(request.tool_name)
        return allow("plain")

    async def trio_policy(request: Any) -> Decision:
        await trio.lowlevel.checkpoint()  # a trio function: it runs in the runtime's trio thread
        asked.append(request.tool_name)
        return allow("trio")

    with sync.open_runtime(sim_spec(tmp_path), approvals=plain if kind == "plain" else trio_policy) as runtime:
        result = runtime.session().run("BASHESC now")
    assert asked == ["bash"]
    assert [record.outcome for record in result.approvals] == ["allowed-once"]
    assert "allowed" in result.final_response


def test_an_error_in_the_block_closes_the_runtime_and_comes_out_as_itself(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        with sync.open_runtime(sim_spec(tmp_path)) as runtime:
            pid = runtime.trio_runtime.actor.pid
            raise ZeroDivisionError
    assert pid is not None
    assert_gone(pid)


def test_a_failed_start_is_raised_bare(tmp_path: Path) -> None:
    from dsh_orchestra import RuntimeStartError
    from dsh_orchestra.runtime import RuntimeSpec

    spec = RuntimeSpec(command=("/no/such/dsh",), dsh_home=tmp_path)
    with pytest.raises(RuntimeStartError, match="cannot spawn"):
        with sync.open_runtime(spec):
            pass  # pragma: no cover


def test_batch_score_compare_and_workflow_block(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path)
    results = tmp_path / "results.jsonl"
    summary = sync.run_batch(dataset, results, sim_spec(tmp_path), runtimes=1, progress="none", scorers=["exact"])
    assert isinstance(summary, BatchSummary) and (summary.total, summary.ok) == (3, 3)
    assert summary.scores["exact"]["mean"] == pytest.approx(2 / 3)
    scored = sync.score_results(results, dataset, tmp_path / "scored.jsonl", ["exact", "includes"])
    assert scored["scores"]["includes"]["mean"] == pytest.approx(2 / 3) and scored["results"] == 3
    comparison = sync.compare_runs(results, tmp_path / "scored.jsonl", scorers=["exact"])
    assert comparison["pairs"] == 3 and comparison["scorers"]["exact"]["n"] == 3

    wf = Workflow("two")

    @wf.step()
    async def names(ctx: StepContext) -> list[str]:
        return ["x", "y"]

    wf.prompt("greet", "hi {item}", fan_out="names")
    result = sync.run_workflow(wf, WorkflowOptions(spec=sim_spec(tmp_path)))
    assert isinstance(result, WorkflowResult) and result.ok
    assert result.output("greet") == ["echo: hi x", "echo: hi y"]
    with sync.open_runtime(sim_spec(tmp_path)) as runtime:
        again = sync.run_workflow(wf, runtime)
    assert again.output("greet") == ["echo: hi x", "echo: hi y"]


def test_the_blocking_api_refuses_to_run_inside_trio(tmp_path: Path) -> None:
    async def inside() -> None:
        with pytest.raises(RuntimeError, match="cannot run inside trio"):
            with sync.open_runtime(sim_spec(tmp_path)):
                pass  # pragma: no cover

    trio.run(inside)


def test_a_trio_runtime_is_refused_as_a_workflow_target() -> None:
    with pytest.raises(TypeError, match="sync.Runtime"):
        sync.run_workflow(Workflow("w"), object())  # type: ignore[arg-type]


INTERRUPTED = """
import sys, trio
from dsh_orchestra import sync
from dsh_orchestra.approvals import ApprovalService
from dsh_orchestra.runtime import RuntimeSpec

async def stalls(request):
    print("in-flight", flush=True)  # the turn waits for this decision: Ctrl-C now is mid-turn
    await trio.sleep_forever()

spec = RuntimeSpec.simulator(script=sys.argv[1], dsh_home=sys.argv[2], cwd=sys.argv[3])
session = None
try:
    with sync.open_runtime(spec, approvals=ApprovalService(stalls, deadline=600)) as runtime:
        print(runtime.trio_runtime.actor.pid, flush=True)
        session = runtime.session()
        session.run("BASHESC please")
except KeyboardInterrupt:
    print("interrupted", session.abandoned, flush=True)
    sys.exit(130)
"""


def test_ctrl_c_mid_turn_cancels_the_trio_side_and_leaves_no_process(tmp_path: Path) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    sim_spec(tmp_path)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "scenario.toml"), str(tmp_path / "home"), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        assert process.stdout is not None
        runtime_pid = int(process.stdout.readline())
        assert process.stdout.readline() == "in-flight\n"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # pragma: no cover (a hang: leave nothing behind)
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert out == "interrupted True\n"
    assert_gone(runtime_pid)


def test_ctrl_c_in_a_thread_while_waiting_cancels_the_job(tmp_path: Path) -> None:
    """The interrupt as a signal delivered to this (main) thread while it waits in ``run``."""
    if threading.current_thread() is not threading.main_thread():  # pragma: no cover
        pytest.skip("signals are delivered to the main thread")
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:  # pragma: no cover
        pytest.skip("SIGINT is not Python's default handler here")
    in_flight = threading.Event()

    async def stalls(request: Any) -> Decision:
        in_flight.set()
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    from dsh_orchestra.approvals import ApprovalService

    def interrupt() -> None:
        in_flight.wait(30)
        os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        with sync.open_runtime(sim_spec(tmp_path), approvals=ApprovalService(stalls, deadline=600)) as runtime:
            pid = runtime.trio_runtime.actor.pid
            session = runtime.session()
            threading.Thread(target=interrupt, daemon=True).start()
            session.run("BASHESC please")
    assert session.abandoned
    assert pid is not None
    assert_gone(pid)

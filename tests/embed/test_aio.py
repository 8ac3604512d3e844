"""The asyncio API (``dsh_orchestra.aio``) under ``asyncio.run``: turns and events, the same
exception across the boundary, cancellation both ways (an asyncio task cancelled mid-turn; a
policy's deadline cancelling an asyncio policy), asyncio policies, trio-only objects refused,
and no process left behind. Every runtime is the simulator as a process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra import Decision, TurnResult, aio
from dsh_orchestra.aio import _guest
from dsh_orchestra.approvals import allow
from dsh_orchestra.batch import BatchSummary
from dsh_orchestra.protocol import JsonRpcResponseError
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, WorkflowResult
from process_table import assert_gone

from .embed_support import sim_spec, write_dataset


def test_a_turn_and_its_events_from_asyncio(tmp_path: Path) -> None:
    async def main() -> tuple[TurnResult, list[str], int | None]:
        async with aio.open_runtime(sim_spec(tmp_path)) as runtime:
            session = runtime.session("s1")
            result = await session.run("hello")
            async with session.events() as events:
                await session.prompt("again")
                seen = []
                async for notification in events:
                    seen.append(notification.params.get("event", {}).get("type"))
                    if seen[-1] == "turn/end":
                        break
            await session.wait()
            assert await session.get_working_directory() == str(tmp_path)
            pid = runtime.trio_runtime.actor.pid
        assert asyncio.get_running_loop() not in _guest._guests  # the guest run ended with its last user
        return result, seen, pid

    result, seen, pid = asyncio.run(main())
    assert (result.final_response, result.finish_reason, result.session_id) == ("echo: hello", "completed", "s1")
    assert "assistant/message" in seen and seen[-1] == "turn/end"
    assert pid is not None
    assert_gone(pid)


def test_a_trio_side_exception_arrives_as_the_same_object(tmp_path: Path) -> None:
    raised = LookupError("from trio")

    async def fails() -> None:
        await trio.lowlevel.checkpoint()
        raise raised

    async def main() -> None:
        async with aio.open_runtime(sim_spec(tmp_path)) as runtime:
            with pytest.raises(LookupError) as caught:
                await runtime.call(fails)
            assert caught.value is raised
            with pytest.raises(JsonRpcResponseError, match="not found"):
                await runtime.resume("no-such-session")

    asyncio.run(main())


def test_cancelling_the_asyncio_task_mid_turn_cancels_the_run(tmp_path: Path) -> None:
    """The awaiting task is cancelled while its turn waits on an approval: the run is cancelled
    on the trio side (the session is abandoned) and the runtime stays usable."""

    async def main() -> None:
        asked = asyncio.Event()

        async def stalls(request: Any) -> Decision:
            asked.set()
            await asyncio.Event().wait()
            raise AssertionError  # pragma: no cover

        stalls.deadline = 600  # type: ignore[attr-defined]
        async with aio.open_runtime(sim_spec(tmp_path), approvals=stalls) as runtime:
            session = runtime.session()
            task = asyncio.create_task(session.run("BASHESC now"))
            await asyncio.wait_for(asked.wait(), 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert session.abandoned
            assert (await runtime.session().run("still here")).final_response == "echo: still here"

    asyncio.run(main())


def test_no_process_is_left_after_a_task_is_cancelled_mid_turn(tmp_path: Path) -> None:
    async def main() -> int:
        pids: list[int] = []
        in_flight = asyncio.Event()

        async def work() -> None:
            async with aio.open_runtime(sim_spec(tmp_path)) as runtime:
                pid = runtime.trio_runtime.actor.pid
                assert pid is not None
                pids.append(pid)
                session = runtime.session()
                async with session.events() as events:
                    await session.prompt("HANG forever")  # the turn is in flight from here on
                    in_flight.set()
                    async for _ in events:
                        pass

        task = asyncio.create_task(work())
        await asyncio.wait_for(in_flight.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pids[0]

    assert_gone(asyncio.run(main()))


def test_an_asyncio_policy_answers_and_one_that_never_does_fails_closed(tmp_path: Path) -> None:
    """The policy's deadline cancels an asyncio policy that does not answer (trio -> asyncio)."""
    cancelled: list[bool] = []

    async def approves(request: Any) -> Decision:
        await asyncio.sleep(0)  # an asyncio coroutine, on the asyncio loop
        asyncio.get_running_loop()
        return allow("asyncio")

    async def never(request: Any) -> Decision:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        raise AssertionError  # pragma: no cover

    never.deadline = 0.5  # type: ignore[attr-defined]

    async def raises(request: Any) -> Decision:
        raise ValueError("policy bug")

    async def main() -> list[Any]:
        out = []
        for policy in (approves, never, raises):
            async with aio.open_runtime(sim_spec(tmp_path), approvals=policy) as runtime:
                out.append((await runtime.session().run("BASHESC now")).approvals[0])
        return out

    approved, timed_out, failed = asyncio.run(main())
    assert (approved.outcome, approved.rule) == ("allowed-once", "asyncio")
    assert timed_out.outcome == "rejected" and "deadline" in (timed_out.error or "")
    assert cancelled == [True]
    assert failed.outcome == "rejected" and "policy bug" in (failed.error or "")


def test_trio_only_objects_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    async def trio_policy(request: Any) -> Decision:
        await trio.sleep(0.01)  # trio code, but under aio an async policy runs on asyncio
        return allow()  # pragma: no cover

    async def main() -> Any:
        async with aio.open_runtime(sim_spec(tmp_path), approvals=trio_policy) as runtime:
            record = (await runtime.session().run("BASHESC now")).approvals[0]
            with pytest.raises(aio.TrioObjectError, match="aio.Runtime"):
                await aio.run_workflow(Workflow("w"), runtime.trio_runtime)  # type: ignore[arg-type]
        return record

    record = asyncio.run(main())
    assert record.outcome == "rejected" and "awaited a trio-only object" in (record.error or "")


def test_batch_score_and_workflow_from_asyncio(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path)
    results = tmp_path / "results.jsonl"
    wf = Workflow("two")

    @wf.step()
    async def names(ctx: StepContext) -> list[str]:
        return ["x", "y"]

    wf.prompt("greet", "hi {item}", fan_out="names")

    async def main() -> tuple[BatchSummary, dict[str, Any], WorkflowResult, WorkflowResult]:
        summary = await aio.run_batch(dataset, results, sim_spec(tmp_path), runtimes=1, progress="none", scorers=["exact"])
        scored = await aio.score_results(results, dataset, tmp_path / "scored.jsonl", ["exact", "includes"])
        alone = await aio.run_workflow(wf, WorkflowOptions(spec=sim_spec(tmp_path)))
        async with aio.open_runtime(sim_spec(tmp_path)) as runtime:
            # two calls at once on one loop share its guest run
            batch_task = asyncio.create_task(aio.run_workflow(wf, runtime))
            on_runtime = await batch_task
        return summary, scored, alone, on_runtime

    summary, scored, alone, on_runtime = asyncio.run(main())
    assert (summary.total, summary.ok) == (3, 3) and summary.scores["exact"]["mean"] == pytest.approx(2 / 3)
    assert scored["scores"]["includes"]["mean"] == pytest.approx(2 / 3)
    assert alone.output("greet") == on_runtime.output("greet") == ["echo: hi x", "echo: hi y"]
    comparison = aio.compare_runs(results, tmp_path / "scored.jsonl", scorers=["exact"])
    assert comparison["scorers"]["exact"]["n"] == 3


def test_two_runtimes_at_once_share_one_guest_run(tmp_path: Path) -> None:
    async def one(name: str) -> str:
        async with aio.open_runtime(sim_spec(tmp_path / name)) as runtime:
            return (await runtime.session().run(name)).final_response

    async def main() -> list[str]:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        return list(await asyncio.gather(one("a"), one("b")))

    assert asyncio.run(main()) == ["echo: a", "echo: b"]


def test_cancelling_a_batch_task_leaves_no_process(tmp_path: Path) -> None:
    """asyncio -> trio: a whole batch in a task, cancelled while its items hang."""
    dataset = tmp_path / "dataset.jsonl"
    dataset.write_text('{"id": "a", "prompt": "HANG a"}\n{"id": "b", "prompt": "HANG b"}\n')

    async def main() -> None:
        task = asyncio.create_task(aio.run_batch(dataset, tmp_path / "r.jsonl", sim_spec(tmp_path), runtimes=1, progress="none"))
        while not list((tmp_path / "home").iterdir()):  # noqa: ASYNC110 - the runtime's store appearing has no event
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())  # the autouse leak check fails the test on a process left behind


def test_the_asyncio_api_refuses_to_run_inside_trio(tmp_path: Path) -> None:
    async def inside() -> None:
        with pytest.raises(RuntimeError, match="for asyncio code"):
            async with aio.open_runtime(sim_spec(tmp_path)):
                pass  # pragma: no cover

    trio.run(inside)

"""run_batch (the Python API) on in-process simulated runtimes, mostly in virtual time.

Covers: the result-line contract, policies (approvals in results, audit), subagents, finish
reasons, per-item timeout and retries on a hang, retries after a runtime crash, resume (skips,
torn-tail repair), refusing to overwrite, items' own session ids (resumed when persisted),
and that nothing per item is kept after its line is written.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import orjson
import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.approvals import load_policy, parse_rules
from dsh_orchestra.batch import BatchOptions, BatchUsageError, DatasetError, PoolExecutor, run_batch

from batch_support import (
    ALLOW_BASH, BATCH_SCRIPT, RESULT_KEYS, SUMMARY_KEYS, by_id, in_process, in_process_store, items, lines_of,
    write_dataset,
)

QUIET: dict[str, Any] = {"progress": "none"}


async def test_result_lines_follow_the_contract(autojump_clock: MockClock, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [
        {"id": "plain", "prompt": "hello", "metadata": {"split": "dev", "n": [1, 2]}},
        {"id": "blocks", "prompt": [{"type": "text", "text": "ECHO blocks"}]},
        {"id": "spawn", "prompt": "SPAWN a child"},
        {"id": "deploy", "prompt": "DEPLOY now"},
        {"id": "long", "prompt": "LONG answer"},
        {"id": "bad", "prompt": "E400 please"},
        {"id": "own-session", "prompt": "hello", "session_id": "my-session-1"},
    ])
    out = tmp_path / "results.jsonl"
    policy = parse_rules(__import__("tomllib").loads(ALLOW_BASH), source="allow.toml")
    summary_path = tmp_path / "summary.json"
    audit = tmp_path / "audit.jsonl"
    summary = await run_batch(dataset, out, in_process(), BatchOptions(
        runtimes=2, policy=policy, audit=audit, summary=summary_path, **QUIET))

    results = by_id(out)
    assert set(results) == {"plain", "blocks", "spawn", "deploy", "long", "bad", "own-session"}
    for result in results.values():
        assert list(result) == RESULT_KEYS
        assert isinstance(result["session_id"], str) and result["session_id"]
        assert result["attempts"] == 1
        assert isinstance(result["duration_s"], float) and result["duration_s"] >= 0
    plain = results["plain"]
    assert plain["status"] == "ok" and plain["final_response"] == "answer" and plain["finish_reason"] == "completed"
    assert plain["error"] is None and plain["metadata"] == {"split": "dev", "n": [1, 2]}
    assert plain["subagents"] == [] and plain["approvals"] == []
    assert results["blocks"]["final_response"] == "echo: ECHO blocks"
    assert results["blocks"]["metadata"] == {}

    spawn = results["spawn"]
    assert spawn["final_response"] == "children done"
    [child] = spawn["subagents"]
    assert set(child) == {"child_session_id", "status", "stop_reason", "text"}
    assert (child["status"], child["stop_reason"], child["text"]) == ("ok", "completed", "child says hi")

    deploy = results["deploy"]
    assert deploy["final_response"] == "deploy was allowed-once"
    [approval] = deploy["approvals"]
    assert approval["tool_name"] == "bash" and approval["outcome"] == "allowed-once"
    assert approval["rule"] == "allow-bash" and isinstance(approval["call_id"], str)
    assert list(approval) == ["tool_name", "call_id", "outcome", "rule"]

    assert results["long"]["status"] == "ok" and results["long"]["finish_reason"] == "max-tokens"
    bad = results["bad"]
    assert bad["status"] == "error" and bad["finish_reason"] == "error"
    assert bad["error"]["type"] == "TurnFailed" and "INVALID_REQUEST" in bad["error"]["message"]
    assert results["own-session"]["session_id"] == "my-session-1"

    written = json.loads(summary_path.read_text())
    assert SUMMARY_KEYS <= set(written)
    assert written == summary.to_json()
    assert (written["total"], written["ok"], written["error"], written["resumed"]) == (7, 6, 1, 0)
    assert written["finish_reasons"] == {"completed": 5, "error": 1, "max-tokens": 1}
    assert written["approval_outcomes"] == {"allowed-once": 1}
    assert written["p50_s"] is not None and written["p95_s"] >= written["p50_s"]
    [record] = lines_of(audit)
    assert record["outcome"] == "allowed-once" and record["rule"] == "allow-bash" and record["tool"] == "bash"


async def test_rejecting_policy_is_recorded(autojump_clock: MockClock, tmp_path: Path) -> None:
    """No rule matches: the default rejects, and the result says so."""
    policy = parse_rules({"default": "rejected", "rules": [{"name": "only-read", "outcome": "allowed-once", "tools": "read"}]})
    dataset = write_dataset(tmp_path / "ds.jsonl", items(3, "DEPLOY"))
    summary = await run_batch(dataset, tmp_path / "r.jsonl", in_process(), policy=policy, **QUIET)
    for result in lines_of(tmp_path / "r.jsonl"):
        assert result["final_response"] == "deploy was rejected"
        assert [(a["outcome"], a["rule"]) for a in result["approvals"]] == [("rejected", "default")]
    assert summary.approval_outcomes == {"rejected": 3}


async def test_python_policy_by_module_attr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the real clock: a sync policy runs in a worker thread, which an autojump clock does not wait for
    (tmp_path / "my_policy.py").write_text(
        "from dsh_orchestra.approvals import Decision\n"
        "def decide(request):\n"
        "    return Decision(outcome='allowed-once', rule='python:' + request.tool_name)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    dataset = write_dataset(tmp_path / "ds.jsonl", items(2, "DEPLOY"))
    await run_batch(dataset, tmp_path / "r.jsonl", in_process(), policy=load_policy("my_policy:decide"), **QUIET)
    assert {a["rule"] for r in lines_of(tmp_path / "r.jsonl") for a in r["approvals"]} == {"python:bash"}


async def test_hang_times_out_and_is_retried(autojump_clock: MockClock, tmp_path: Path) -> None:
    """A hanging item is cut at the timeout and retried up to --retries; the rest are unaffected."""
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "stuck", "prompt": "HANG"}, *items(8)])
    started = trio.current_time()
    summary = await run_batch(dataset, tmp_path / "r.jsonl", in_process(),
                              BatchOptions(runtimes=2, timeout=10, retries=2, retry_backoff=1.0, **QUIET))
    results = by_id(tmp_path / "r.jsonl")
    stuck = results.pop("stuck")
    assert stuck["status"] == "error" and stuck["attempts"] == 3
    assert stuck["error"]["type"] == "TimeoutError" and "within 10 s" in stuck["error"]["message"]
    assert stuck["final_response"] is None and stuck["finish_reason"] is None
    assert stuck["duration_s"] == pytest.approx(10 + 1 + 10 + 2 + 10, abs=0.5)  # timeouts plus backoff
    assert {r["status"] for r in results.values()} == {"ok"} and {r["attempts"] for r in results.values()} == {1}
    assert (summary.ok, summary.error, summary.retries) == (8, 1, 2)
    assert trio.current_time() - started == pytest.approx(33, abs=1)


async def test_no_retries_means_one_attempt(autojump_clock: MockClock, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "stuck", "prompt": "HANG"}])
    summary = await run_batch(dataset, tmp_path / "r.jsonl", in_process(), timeout=2, retries=0, **QUIET)
    [stuck] = lines_of(tmp_path / "r.jsonl")
    assert stuck["attempts"] == 1 and summary.retries == 0


async def test_model_failures_are_results_not_retries(autojump_clock: MockClock, tmp_path: Path) -> None:
    """A turn that ends in error is an answer (status error), not a retryable failure."""
    dataset = write_dataset(tmp_path / "ds.jsonl", items(3, "E400"))
    summary = await run_batch(dataset, tmp_path / "r.jsonl", in_process(), retries=3, **QUIET)
    assert {r["attempts"] for r in lines_of(tmp_path / "r.jsonl")} == {1}
    assert summary.retries == 0 and summary.error == 3


async def test_runtime_crash_costs_only_retries(autojump_clock: MockClock, tmp_path: Path) -> None:
    """Runtimes that crash every few prompts: every item still ends ok, some after a retry."""
    script = "crash_after_prompts = 7\n" + BATCH_SCRIPT
    dataset = write_dataset(tmp_path / "ds.jsonl", items(40, "TICK"))
    summary = await run_batch(dataset, tmp_path / "r.jsonl", in_process(script),
                              BatchOptions(runtimes=2, concurrency=6, retries=5, retry_backoff=0.1, **QUIET))
    results = by_id(tmp_path / "r.jsonl")
    assert len(results) == 40
    assert {r["status"] for r in results.values()} == {"ok"}
    assert max(r["attempts"] for r in results.values()) > 1
    assert summary.retries == sum(r["attempts"] - 1 for r in results.values())


async def test_resume_skips_done_ids_and_repairs_a_torn_tail(autojump_clock: MockClock, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", items(10))
    out = tmp_path / "r.jsonl"
    earlier = [
        {"id": "item-00001", "status": "ok", "finish_reason": "completed", "duration_s": 1.0, "approvals": []},
        {"id": "item-00004", "status": "error", "finish_reason": "error", "duration_s": 2.0, "approvals": []},
        {"id": "not-in-dataset", "status": "ok"},
    ]
    kept = b"".join(orjson.dumps(x) + b"\n" for x in earlier)
    out.write_bytes(kept + b'{"id": "item-00007", "status": "o')
    with pytest.raises(BatchUsageError, match="resume=True"):
        await run_batch(dataset, out, in_process(), **QUIET)
    assert out.read_bytes().startswith(kept)
    summary = await run_batch(dataset, out, in_process(), resume=True, **QUIET)
    data = out.read_bytes()
    assert data.startswith(kept)  # earlier lines untouched, the torn one cut
    results = by_id(out)
    assert set(results) == {f"item-{i:05d}" for i in range(10)} | {"not-in-dataset"}
    assert results["item-00004"]["status"] == "error"  # present: not rerun
    assert results["item-00007"]["status"] == "ok"
    assert (summary.total, summary.resumed, summary.processed, summary.ok, summary.error) == (10, 2, 8, 9, 1)
    again = await run_batch(dataset, out, in_process(), resume=True, **QUIET)
    assert (again.resumed, again.processed) == (10, 0) and out.read_bytes() == data


async def test_malformed_dataset_runs_nothing(tmp_path: Path) -> None:
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')

    def never() -> Any:
        raise AssertionError("no runtime may start")

    with pytest.raises(DatasetError, match="line 2"):
        await run_batch(dataset, tmp_path / "r.jsonl", in_process().evolve(connect=never), **QUIET)
    assert not (tmp_path / "r.jsonl").exists()


async def test_own_session_id_already_persisted_is_resumed(autojump_clock: MockClock, tmp_path: Path) -> None:
    """An item's session_id that a killed run (or another batch) already created is resumed, not failed."""
    store = tmp_path / "store"
    first = write_dataset(tmp_path / "first.jsonl", [{"id": "a", "prompt": "ECHO one", "session_id": "shared-1"}])
    await run_batch(first, tmp_path / "r1.jsonl", in_process_store(store), **QUIET)
    second = write_dataset(tmp_path / "second.jsonl", [{"id": "b", "prompt": "ECHO two", "session_id": "shared-1"}])
    await run_batch(second, tmp_path / "r2.jsonl", in_process_store(store), **QUIET)
    [result] = lines_of(tmp_path / "r2.jsonl")
    assert (result["status"], result["session_id"], result["final_response"]) == ("ok", "shared-1", "echo: ECHO two")


async def test_nothing_per_item_is_kept(autojump_clock: MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After every line is written, the runtimes hold no per-item state: no router edges, no
    subscriptions, no approval records, no pending requests."""
    seen: list[Any] = []

    class Spying:
        """The default executor, keeping the runtimes it ran on (an executor of our own)."""

        @asynccontextmanager
        async def open(self, spec: Any, options: BatchOptions) -> AsyncIterator[Any]:
            async with PoolExecutor().open(spec, options) as runner:
                yield runner
                seen.extend(runner.pool.runtimes)

    policy = parse_rules(__import__("tomllib").loads(ALLOW_BASH))
    dataset = write_dataset(tmp_path / "ds.jsonl", [
        {"id": f"i{i}", "prompt": ("SPAWN", "DEPLOY", "hello")[i % 3]} for i in range(60)])
    summary = await run_batch(dataset, tmp_path / "r.jsonl", in_process(), runtimes=2, policy=policy,
                              executor=Spying(), **QUIET)
    assert summary.ok == 60
    assert len(seen) == 2
    for runtime in seen:
        assert runtime.router.parents == {} and runtime.router._children == {}
        assert runtime.router._subscriptions == {}
        assert not any(runtime.approvals._by_session.values())
        assert runtime.connection.statistics().pending_requests == 0


async def test_answerer_answers_questions(autojump_clock: MockClock, tmp_path: Path) -> None:
    from dsh_orchestra.questions import first_option

    dataset = write_dataset(tmp_path / "ds.jsonl", items(2, "CHOOSE"))
    summary = await run_batch(dataset, tmp_path / "r.jsonl", in_process(), answerer=first_option, **QUIET)
    assert summary.ok == 2
    assert {r["final_response"] for r in lines_of(tmp_path / "r.jsonl")} == {"you picked alpha"}

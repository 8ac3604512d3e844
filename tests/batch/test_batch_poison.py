"""A poison item (one that crashes its runtime on every attempt) does not take its neighbours
down: the items in flight beside it at a runtime death run again without spending retries, an
item in flight at two deaths runs alone, and only the poison ends in error (``RuntimeCrashed``,
with the runtime's exit status and stderr tail).

The run loop's accounting against a scripted executor and on in-process simulators (virtual
time); then on simulator processes through ``run_batch`` and through the CLI (the required
case: 1 crashing item and 20 healthy ones, 1 runtime, concurrency 4).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
import trio.testing
from trio.testing import MockClock

from dsh_orchestra.batch import (
    ALONE_AFTER, RUNTIME_CRASHED, Attempt, AttemptRunner, BatchItem, BatchOptions, RuntimeCrash, run_batch,
)
from dsh_orchestra.batch._local import attempt_on_pool
from dsh_orchestra.pool import open_pool
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import TurnResult
from dsh_orchestra.testing._simulator import open_simulator_stream

from batch_support import by_id, cli_args, in_process, run_cli, script_of, sim_process, write_dataset
from poison_support import POISON_SCRIPT, poison_rows

QUIET: dict[str, Any] = {"progress": "none"}


def poison_dataset(path: Path, healthy: int = 20) -> Path:
    """One crashing item in the middle of ``healthy`` ones (so it has neighbours in flight)."""
    return write_dataset(path, poison_rows(healthy))


def check_outcome(out: Path, *, healthy: int = 20, retries: int = 2) -> dict[str, dict[str, Any]]:
    results = by_id(out)
    assert len(results) == healthy + 1
    poison = results.pop("poison")
    assert {r["status"] for r in results.values()} == {"ok"}, [r["error"] for r in results.values() if r["error"]]
    assert {r["final_response"] for r in results.values()} == {"fine"}
    assert max(r["attempts"] for r in results.values()) <= ALONE_AFTER + 1  # free reruns, then one alone
    assert poison["status"] == "error" and poison["error"]["type"] == RUNTIME_CRASHED
    assert poison["attempts"] == ALONE_AFTER + retries + 1  # two deaths beside others, then retries + 1 alone
    return {"poison": poison, **results}


# ---- the run loop's accounting, against an executor of our own --------------------------------


def _turn(session_id: str) -> TurnResult:
    return TurnResult(session_id=session_id, message_id="m", final_response="ok", finish_reason="completed",
                      error=None, events=[], notifications=(), subagents=(), duration=1.0)


class CrashingRunner:
    """One runtime, ``capacity`` places: an attempt at "poison" kills it after 1 s, and with it
    every attempt in flight there (each reports the same incarnation); others take 2 s. An
    ``alone`` attempt waits until nothing else is in flight and keeps new ones out."""

    def __init__(self, capacity: int = 4, stderr_tail: str = "boom") -> None:
        self.capacity = capacity
        self.stderr_tail = stderr_tail
        self.max_lost = 3
        self.generation = 0
        self.in_flight: set[str] = set()
        self.calls: dict[str, list[bool]] = defaultdict(list)  # item -> alone per attempt
        self.company: list[int] = []  # attempts in flight when an alone one started
        self._dead = trio.Event()
        self._alone = 0  # alone attempts waiting or running
        self._changed = trio.Event()

    async def _place(self, alone: bool) -> None:
        while (self.in_flight if alone else self._alone):
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def attempt(self, item: BatchItem, session_id: str, *, alone: bool = False) -> Attempt:
        self.calls[item.id].append(alone)
        self._alone += alone
        try:
            await self._place(alone)
            if alone:
                self.company.append(len(self.in_flight))
            return await self._run(item, session_id)
        finally:
            self._alone -= alone
            self._notify()

    async def _run(self, item: BatchItem, session_id: str) -> Attempt:
        generation = self.generation
        dead = self._dead
        self.in_flight.add(session_id)
        try:
            with trio.move_on_after(1.0 if item.id == "poison" else 2.0):
                await dead.wait()
            if dead.is_set() or item.id == "poison":
                if not dead.is_set():  # the poison kills the runtime: every neighbour notices
                    self.generation += 1
                    dead.set()
                    self._dead = trio.Event()
                crash = RuntimeCrash(runtime=f"rt-{generation}", exit_status=3, stderr_tail=self.stderr_tail)
                return Attempt.failed(session_id, ConnectionError("runtime exited"), retryable=True, crash=crash)
            return Attempt(session_id=session_id, turn=_turn(session_id))
        finally:
            self.in_flight.discard(session_id)
            self._notify()

    def pending_approvals(self) -> int:
        return 0


class Crashing:
    def __init__(self, runner: CrashingRunner) -> None:
        self.runner = runner

    @asynccontextmanager
    async def open(self, spec: Any, options: BatchOptions) -> AsyncIterator[CrashingRunner]:
        yield self.runner


@pytest.mark.parametrize("retries", [0, 2])
async def test_only_alone_crashes_spend_retries(autojump_clock: MockClock, tmp_path: Path, retries: int) -> None:
    runner = CrashingRunner()
    assert isinstance(runner, AttemptRunner)
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "poison", "prompt": "p"},
                                                     *({"id": f"h{i}", "prompt": "p"} for i in range(6))])
    summary = await run_batch(dataset, tmp_path / "r.jsonl", executor=Crashing(runner),
                              options=BatchOptions(retries=retries, retry_backoff=0.1, **QUIET))
    results = by_id(tmp_path / "r.jsonl")
    assert summary.ok == 6 and summary.error == 1
    poison = results["poison"]
    assert runner.calls["poison"] == [False] * ALONE_AFTER + [True] * (retries + 1)
    assert poison["attempts"] == ALONE_AFTER + retries + 1
    assert poison["error"]["type"] == RUNTIME_CRASHED
    message = poison["error"]["message"]
    assert "exit status 3" in message and "boom" in message and f"rt-{runner.generation - 1}" in message
    neighbours = [i for i in results if i != "poison" and results[i]["attempts"] > 1]
    assert neighbours, "the poison's neighbours were in flight at its deaths"
    for item_id, alone in runner.calls.items():
        if item_id != "poison":  # neighbours: rerun for free, at most twice, then alone (and fine)
            assert alone == [False] * (len(alone) - 1) + [len(alone) > ALONE_AFTER]
            assert results[item_id]["status"] == "ok"
    assert summary.retries == sum(r["attempts"] - 1 for r in results.values())
    assert runner.company and set(runner.company) == {0}


async def test_the_runtime_crashed_message_holds_no_secret(autojump_clock: MockClock, tmp_path: Path) -> None:
    """A runtime that printed the api key before dying: the stderr tail in the line is redacted."""
    key = "sk-poison-test-secret-0123456789"
    runner = CrashingRunner(stderr_tail=f"auth failed for {key}")
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "poison", "prompt": "p"}, {"id": "h", "prompt": "p"}])
    spec = RuntimeSpec(command=("unused",), api_key=key, dsh_home=tmp_path, cwd=tmp_path)
    await run_batch(dataset, tmp_path / "r.jsonl", spec, BatchOptions(retries=0, **QUIET), executor=Crashing(runner))
    poison = by_id(tmp_path / "r.jsonl")["poison"]
    assert poison["error"]["type"] == RUNTIME_CRASHED and "auth failed for ***" in poison["error"]["message"]
    assert key not in (tmp_path / "r.jsonl").read_text()


# ---- in-process simulators, virtual time ------------------------------------------------------


@pytest.mark.parametrize("runtimes", [1, 2])
async def test_a_poison_item_fails_alone_in_process(autojump_clock: MockClock, tmp_path: Path, runtimes: int) -> None:
    dataset = poison_dataset(tmp_path / "ds.jsonl")
    out = tmp_path / "r.jsonl"
    summary = await run_batch(dataset, out, in_process(POISON_SCRIPT),
                              BatchOptions(runtimes=runtimes, concurrency=4, retries=2, **QUIET))
    results = check_outcome(out)
    assert summary.ok == 20 and summary.error == 1
    assert "exit status unknown" in results["poison"]["error"]["message"]  # no process: no status


async def test_neighbours_survive_with_no_retries_at_all(autojump_clock: MockClock, tmp_path: Path) -> None:
    """``retries=0``: a neighbour's free reruns are not retries; the poison gets its one alone run."""
    dataset = poison_dataset(tmp_path / "ds.jsonl")
    out = tmp_path / "r.jsonl"
    await run_batch(dataset, out, in_process(POISON_SCRIPT), BatchOptions(runtimes=1, concurrency=4, retries=0, **QUIET))
    check_outcome(out, retries=0)


# ---- simulator processes: run_batch and the CLI ----------------------------------------------


def _runtimes_left() -> list[psutil.Process]:
    return [p for p in psutil.Process(os.getpid()).children(recursive=True)
            if "dsh_orchestra.testing" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE]


async def test_a_poison_item_fails_alone_run_batch(tmp_path: Path) -> None:
    dataset = poison_dataset(tmp_path / "ds.jsonl")
    out = tmp_path / "r.jsonl"
    with trio.fail_after(300):
        summary = await run_batch(dataset, out, sim_process(tmp_path, POISON_SCRIPT),
                                  BatchOptions(runtimes=1, concurrency=4, retries=2, retry_backoff=0.05, **QUIET))
    results = check_outcome(out)
    assert summary.ok == 20 and summary.error == 1
    message = results["poison"]["error"]["message"]
    assert "exit status 3" in message and "simulated crash" in message  # the status and the stderr tail
    assert not _runtimes_left()


def test_a_poison_item_fails_alone_cli(tmp_path: Path) -> None:
    dataset = poison_dataset(tmp_path / "ds.jsonl")
    out = tmp_path / "r.jsonl"
    args = cli_args(dataset, out, tmp_path, "--runtimes", "1", "--concurrency", "4", "--no-progress", "--json",
                    script_text=POISON_SCRIPT)
    done = run_cli(args, cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert summary["ok"] == 20 and summary["error"] == 1
    results = check_outcome(out)
    assert "exit status 3" in results["poison"]["error"]["message"]
    assert "Traceback" not in done.stderr


# ---- a death first seen by a write ------------------------------------------------------------


class DyingStream(trio.abc.HalfCloseableStream):
    """The in-process simulator's stream, dying in two steps as a pipe shows it: after ``die()``
    every write fails at once (the runtime's stdin is closed), while the end of its output
    reaches the reader only at ``eof.set()`` (the reader had not got there yet)."""

    def __init__(self, inner: trio.abc.HalfCloseableStream) -> None:
        self.inner = inner
        self.dead = False
        self.eof = trio.Event()
        self._reading: trio.CancelScope | None = None

    def die(self) -> None:
        self.dead = True
        if self._reading is not None:
            self._reading.cancel()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.dead:
            raise trio.BrokenResourceError("the runtime's stdin is closed")
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if not self.dead:
            with trio.CancelScope() as self._reading:
                return await self.inner.receive_some(max_bytes)
        await self.eof.wait()
        return b""

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_death_first_seen_by_a_write_still_counts_as_a_death() -> None:
    """An attempt whose first write finds the runtime dead ("cannot write") learns of the death
    as one in flight at it does, not as a plain failure: it was racing the reader, and on a loaded
    machine a healthy item (test_a_poison_item_fails_alone_run_batch) spent a retry and a fourth
    attempt on such deaths."""
    streams: list[DyingStream] = []

    @asynccontextmanager
    async def connect() -> AsyncIterator[trio.abc.Stream]:
        async with open_simulator_stream(script_of(POISON_SCRIPT)) as inner:
            streams.append(DyingStream(inner))  # type: ignore[arg-type]
            yield streams[-1]

    attempts: list[Attempt] = []
    with trio.fail_after(30):
        async with open_pool(RuntimeSpec(connect=connect, name="sim"), 1) as pool:
            streams[0].die()
            async with trio.open_nursery() as nursery:

                async def attempt() -> None:
                    attempts.append(await attempt_on_pool(pool, BatchItem(id="h00", prompt="HEALTHY 0"), "s-h00"))

                nursery.start_soon(attempt)
                await trio.testing.wait_all_tasks_blocked()  # its write failed; the reader has not seen the end
                streams[0].eof.set()
    (failed,) = attempts
    assert failed.error is not None and failed.retryable
    assert failed.crash is not None and failed.crash.runtime.startswith("sim#0@")

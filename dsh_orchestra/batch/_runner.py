"""run_batch: dataset in, one result line per item out, exactly once, resumable after any crash.

Owns: validation before work, resume (skip done ids, repair a torn tail), sharding, retries
with backoff for retryable failures, per-item timeouts, progress and the summary.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from ..approvals import AuditLog
from ..pool import RuntimePool, open_pool
from ..protocol import JsonRpcResponseError, OrchestraError, SdkProtocolError, TransportClosedError
from ..runtime import RuntimeSpec
from ..session import TurnResult
from ._dataset import BatchItem, in_shard, load_dataset
from ._progress import Counters, Progress
from ._results import ResultsWriter, read_results, result_line
from ._summary import BatchSummary, Outcome, summarize

log = logging.getLogger("dsh_orchestra.batch")

OK_FINISH_REASONS = frozenset({"completed", "max-tokens"})


class BatchUsageError(ValueError):
    """The batch cannot start as asked (for example: results exist and --resume was not given)."""


@attrs.frozen(kw_only=True)
class BatchOptions:
    """How to run a batch (see ``run_batch``)."""

    runtimes: int = 1
    concurrency: int | None = None
    timeout: float | None = None
    retries: int = 2
    retry_backoff: float = 0.5
    resume: bool = False
    shard: tuple[int, int] | None = None
    policy: Any = None
    answerer: Any = None
    audit: str | os.PathLike[str] | None = None
    summary: str | os.PathLike[str] | None = None
    progress: str = "auto"

    def __attrs_post_init__(self) -> None:
        for name in ("runtimes", "retries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "runtimes" else 0):
                raise ValueError(f"{name} must be an integer >= {1 if name == 'runtimes' else 0}, not {value!r}")
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise ValueError(f"concurrency must be an integer >= 1, not {self.concurrency!r}")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or self.timeout <= 0):
            raise ValueError(f"timeout must be a positive number of seconds, not {self.timeout!r}")

    @property
    def in_flight(self) -> int:
        """Items in flight at once."""
        return self.concurrency or self.runtimes * 4


@attrs.define
class _Run:
    pool: RuntimePool
    writer: ResultsWriter
    options: BatchOptions
    counters: Counters
    progress: Progress
    outcomes: list[Outcome]


def _retryable(exc: BaseException) -> bool:
    """Runtime lost or timed out: retry. Protocol rejections and malformed data: do not."""
    if isinstance(exc, (JsonRpcResponseError, SdkProtocolError)):
        return False
    return isinstance(exc, (TransportClosedError, trio.TooSlowError, OrchestraError))


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


async def _attempt(run: _Run, item: BatchItem, session_id: str, attempt: int) -> TurnResult:
    resume = item.session_id is not None and attempt > 1
    timeout = run.options.timeout
    with trio.fail_after(timeout) if timeout is not None else trio.CancelScope():
        async with run.pool.lease() as runtime:
            if resume:
                try:
                    session = await runtime.resume(session_id)
                except JsonRpcResponseError:
                    session = runtime.session(session_id)  # never persisted: start it afresh
            else:
                session = runtime.session(session_id)
            return await session.run(item.prompt)


async def _process(run: _Run, item: BatchItem) -> None:
    started = time.monotonic()
    attempts = 0
    turn: TurnResult | None = None
    error: dict[str, str] | None = None
    session_id = item.session_id
    while True:
        attempts += 1
        session_id = item.session_id or f"item-{uuid.uuid4().hex[:24]}"
        try:
            turn = await _attempt(run, item, session_id, attempts)
            error = None
            break
        except trio.TooSlowError:
            exc: BaseException = TimeoutError(f"item {item.id!r} did not finish within {run.options.timeout:g} s")
            retry = True
        except (OrchestraError, OSError) as caught:
            exc, retry = caught, _retryable(caught)
        error = _error(exc)
        if not retry or attempts > run.options.retries:
            break
        run.counters.retries += 1
        log.info("retrying item %r after %s (attempt %d)", item.id, error["type"], attempts)
        await trio.sleep(run.options.retry_backoff * 2 ** (attempts - 1))
    status = "error"
    if turn is not None:
        if turn.finish_reason in OK_FINISH_REASONS:
            status = "ok"
        elif error is None:
            detail = turn.error
            message = f"{detail.code}: {detail.message}" if detail is not None else f"turn ended {turn.finish_reason!r}"
            error = {"type": "TurnFailed", "message": message}
    line = result_line(
        item.id,
        status=status,
        session_id=session_id,
        turn=turn,
        attempts=attempts,
        duration_s=time.monotonic() - started,
        error=error,
        metadata=item.metadata,
    )
    run.writer.write(line)
    run.outcomes.append(Outcome.of(line))
    run.counters.done += 1
    if status != "ok":
        run.counters.failed += 1
    run.progress.update()


async def _worker(run: _Run, receive: trio.MemoryReceiveChannel[BatchItem]) -> None:
    async with receive:
        async for item in receive:
            await _process(run, item)


async def run_batch(
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    spec: RuntimeSpec | None = None,
    options: BatchOptions | None = None,
    **kwargs: Any,
) -> BatchSummary:
    """Run every dataset item (of this shard) in its own session; write one result line each.

    With no spec the simulator runs (as processes, in a temporary DSH_HOME).

    Raises:
        DatasetError: the dataset is malformed (nothing ran).
        BatchUsageError: results exist without ``resume``, or they are corrupt.
        OrchestraError: no runtime could be started.
    """
    options = options or BatchOptions(**kwargs)
    items, unknown = load_dataset(dataset)
    if unknown:
        log.warning("dataset keys %s are not part of the contract and are ignored (use metadata)", unknown)
    items = [i for i in items if in_shard(i.id, options.shard)]
    out = Path(out)
    if out.exists() and out.stat().st_size and not options.resume:
        raise BatchUsageError(f"results file {str(out)!r} already has results; pass --resume to finish it, or choose another --out")
    try:
        done, torn = read_results(out, repair=True)
    except ValueError as exc:
        raise BatchUsageError(str(exc)) from exc
    if torn:
        log.warning("repaired %s: cut a torn last line of %d bytes", out, torn)
    wanted = {i.id for i in items}
    outcomes = [Outcome.of(line) for item_id, line in done.items() if item_id in wanted]
    todo = [i for i in items if i.id not in done]
    del done
    resumed = len(items) - len(todo)
    counters = Counters(total=len(items), done=resumed, resumed=resumed)
    progress = Progress(counters, mode=options.progress)
    started = time.monotonic()
    tmp_home = None
    if spec is None:
        import tempfile

        tmp_home = tempfile.TemporaryDirectory(prefix="dsh-orchestra-batch-")
        spec = RuntimeSpec.simulator(dsh_home=tmp_home.name, cwd=os.getcwd())
    audit = AuditLog(options.audit, secrets=spec.secrets()) if options.audit is not None else None
    per_runtime = max(1, math.ceil(options.in_flight / options.runtimes))
    try:
        with ResultsWriter(out) as writer:
            if todo:
                async with open_pool(
                    spec,
                    options.runtimes,
                    max_sessions=per_runtime,
                    approvals=options.policy,
                    answerer=options.answerer,
                    audit=audit,
                ) as pool:
                    counters.pending_approvals = lambda: sum(
                        r.approvals.pending for r in pool.runtimes if r.approvals is not None
                    )
                    run = _Run(pool, writer, options, counters, progress, outcomes)
                    send, receive = trio.open_memory_channel[BatchItem](0)
                    async with trio.open_nursery() as nursery:
                        for _ in range(min(options.in_flight, len(todo))):
                            nursery.start_soon(_worker, run, receive.clone())
                        receive.close()
                        async with send:
                            for item in todo:
                                await send.send(item)
    finally:
        progress.close()
        if audit is not None:
            audit.close()
        if tmp_home is not None:
            tmp_home.cleanup()
    duration = time.monotonic() - started
    summary = summarize(
        outcomes, total=len(items), resumed=resumed, processed=len(todo), duration_s=duration, retries=counters.retries
    )
    if options.summary is not None:
        Path(options.summary).write_bytes(orjson.dumps(summary.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    return summary

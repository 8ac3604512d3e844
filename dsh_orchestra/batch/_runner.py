"""run_batch: dataset in, one result line per item out, exactly once, resumable after any crash.

Owns: validation before work, resume (skip done ids, repair a torn tail), sharding, retries
with backoff for retryable failures, per-item timeouts, progress and the summary.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import attrs
import orjson
import trio

from .._tracing import ITEM_SPAN, observed
from ..approvals import AuditLog
from ..pool import PoolClosedError, RuntimePool, open_pool
from ..protocol import JsonRpcResponseError, OrchestraError, SdkProtocolError, TransportClosedError
from ..runtime import RuntimeSpec
from ..session import Runtime, TurnResult
from ._dataset import BatchItem, DatasetCheck, check_dataset, iter_dataset
from ._progress import Counters, Progress
from ._results import ResultsWriter, result_line, scan_results
from ._summary import BatchSummary, Tally
from ._transcripts import TranscriptWriter

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
    transcripts: str | os.PathLike[str] | None = None  # a directory: per-item notifications (see _transcripts)

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


class SessionBusyError(OrchestraError):
    """An item's own ``session_id`` is still held by another runtime process (retryable)."""


@attrs.define
class _Run:
    pool: RuntimePool
    writer: ResultsWriter
    options: BatchOptions
    counters: Counters
    progress: Progress
    tally: Tally
    transcripts: TranscriptWriter | None = None
    _token: str = attrs.field(factory=lambda: uuid.uuid4().hex[:12], init=False)
    _serial: Iterator[int] = attrs.field(factory=itertools.count, init=False)

    def new_session_id(self) -> str:
        """``item-<24 hex>``: a random token of this run, then a counter (unique in the store)."""
        return f"item-{self._token}{next(self._serial):012x}"


def _retryable(exc: BaseException) -> bool:
    """Runtime lost or timed out: retry. Protocol rejections and malformed data: do not."""
    if isinstance(exc, (JsonRpcResponseError, SdkProtocolError)):
        return False
    return isinstance(exc, (TransportClosedError, trio.TooSlowError, OrchestraError))


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


async def _run_session(runtime: Runtime, item: BatchItem, session_id: str) -> TurnResult:
    """Run the item's prompt in ``session_id``.

    A generated id is always new. An item's own ``session_id`` may already be persisted (by an
    earlier attempt, or by a run that was killed): then it is resumed first (PROTOCOL.md 5.4).
    """
    if item.session_id is None:
        return await runtime.session(session_id).run(item.prompt)
    try:
        return await runtime.session(session_id).run(item.prompt)
    except JsonRpcResponseError as exc:
        if "already exists" not in exc.message:  # the documented fallback: no code tells them apart
            raise
    try:
        session = await runtime.resume(session_id)
    except JsonRpcResponseError as exc:
        if "owned by an active write handle" in exc.message:  # a runtime being recycled holds it
            raise SessionBusyError(f"session {session_id!r} is still held by another runtime: {exc.message}") from exc
        raise
    return await session.run(item.prompt)


async def _attempt(pool: RuntimePool, timeout: float | None, item: BatchItem, session_id: str) -> TurnResult:
    """One attempt: a place on the least-loaded runtime, then the session under the timeout.

    The timeout covers the session's work only, not the wait for a place (a runtime that is
    restarting delays items without burning their retries).
    """
    async with pool.lease() as runtime:
        try:
            with trio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                return await _run_session(runtime, item, session_id)
        finally:
            runtime.forget(session_id)  # the batch never uses this session again


async def process_item(
    pool: RuntimePool,
    item: BatchItem,
    options: BatchOptions,
    *,
    new_session_id: Callable[[], str] | None = None,
    transcripts: TranscriptWriter | None = None,
    on_retry: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], int]:
    """Run one item on ``pool`` (retries with backoff, per-attempt timeout, own session_id
    resumed) and return its result line (``result_line``) and the retries it used.

    Writes nothing but the item's transcript (to ``transcripts``, before returning: a result
    line implies its transcript): the caller writes the line. Used by ``run_batch`` and by
    the Ray scale-out (``dsh_orchestra.scale``), which runs it inside each actor.
    ``on_retry`` is called before each retry (live progress counters).
    """
    if new_session_id is None:
        new_session_id = _random_session_id
    started = trio.current_time()
    attempts = 0
    turn: TurnResult | None = None
    error: dict[str, str] | None = None
    session_id = item.session_id
    while True:
        attempts += 1
        session_id = item.session_id or new_session_id()
        try:
            turn = await _attempt(pool, options.timeout, item, session_id)
            error = None
            break
        except trio.TooSlowError:
            exc: BaseException = TimeoutError(f"item {item.id!r} did not finish within {options.timeout:g} s")
            retry = True
        except (OrchestraError, OSError) as caught:
            exc, retry = caught, _retryable(caught)
        error = _error(exc)
        if not retry or attempts > options.retries or isinstance(exc, PoolClosedError):
            break
        if on_retry is not None:
            on_retry()
        log.info("retrying item %r after %s (attempt %d)", item.id, error["type"], attempts)
        await trio.sleep(options.retry_backoff * 2 ** (attempts - 1))
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
        duration_s=trio.current_time() - started,
        error=error,
        metadata=item.metadata,
    )
    if transcripts is not None and turn is not None:
        await transcripts.write(item.id, turn)  # before the line: a result implies its transcript
    del turn  # the events go no further than this line
    return line, attempts - 1


def _random_session_id() -> str:
    return f"item-{uuid.uuid4().hex[:24]}"


def _counted_retry(run: _Run) -> Callable[[], None]:
    def retried() -> None:
        run.counters.retries += 1

    return retried


@observed(ITEM_SPAN, lambda run, item: {"item": item.id})
async def _process(run: _Run, item: BatchItem) -> None:
    line, _ = await process_item(
        run.pool, item, run.options, new_session_id=run.new_session_id, transcripts=run.transcripts,
        on_retry=_counted_retry(run),
    )
    run.writer.write(line)
    run.tally.add_line(line)
    run.counters.done += 1
    if line["status"] != "ok":
        run.counters.failed += 1
    run.progress.update()


async def _worker(run: _Run, receive: trio.MemoryReceiveChannel[BatchItem]) -> None:
    async with receive:
        async for item in receive:
            await _process(run, item)


def _check_paths(out: Path, options: BatchOptions) -> None:
    """Refuse, before anything runs, outputs that could not be written at the end."""
    if out.is_dir():
        raise BatchUsageError(f"--out {str(out)!r} is a directory; give a file path for the results")
    if not out.parent.is_dir():
        raise BatchUsageError(f"--out {str(out)!r}: directory {str(out.parent)!r} does not exist; create it first")
    for name, value in (("--summary", options.summary), ("--audit", options.audit)):
        if value is None:
            continue
        path = Path(value)
        if path.is_dir():
            raise BatchUsageError(f"{name} {str(path)!r} is a directory; give a file path")
        if not path.parent.is_dir():
            raise BatchUsageError(f"{name} {str(path)!r}: directory {str(path.parent)!r} does not exist; create it first")
    if out.exists() and out.stat().st_size and not options.resume:
        raise BatchUsageError(
            f"results file {str(out)!r} already has results; pass --resume to finish it, or choose another --out"
        )


def prepare_resume(
    dataset: str | os.PathLike[str], out: Path, options: BatchOptions
) -> tuple[DatasetCheck, Tally, set[str]]:
    """Validate the dataset (nothing runs on a bad one), check the output paths, and scan the
    results already in ``out`` (repairing a torn tail): the check, the tally of the results
    kept, and the ids already done.

    Raises:
        DatasetError, BatchUsageError: as ``run_batch``.
    """
    check = check_dataset(dataset, options.shard)
    if check.unknown:
        log.warning("dataset keys %s are not part of the contract and are ignored (use metadata)", list(check.unknown))
    _check_paths(out, options)
    tally = Tally()
    done: set[str] = set()

    def resumed_line(line: dict[str, Any]) -> None:
        item_id = line["id"]
        if item_id in check.ids and item_id not in done:
            done.add(item_id)
            tally.add_line(line)

    try:
        _, torn = scan_results(out, resumed_line, repair=True)
    except ValueError as exc:
        raise BatchUsageError(str(exc)) from exc
    if torn:
        log.warning("repaired %s: cut a torn last line of %d bytes", out, torn)
    return check, tally, done


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
        BatchUsageError: results exist without ``resume``, they are corrupt, or an output
            cannot be written (nothing ran).
        RuntimeStartError: no runtime could be started (raised bare; nothing ran).
        ExceptionGroup: the batch stopped part-way (every runtime kept failing to start, a
            write failed, the dataset changed underneath); the results so far are kept.
    """
    options = options or BatchOptions(**kwargs)
    # Validate the whole file first (nothing runs on a bad dataset), keeping only the ids; the
    # items are streamed from the file again as places free up: memory stays flat in size.
    out = Path(out)
    check, tally, done = prepare_resume(dataset, out, options)
    total = len(check.ids)
    resumed = len(done)
    todo = total - resumed
    counters = Counters(total=total, done=resumed, resumed=resumed)
    progress = Progress(counters, mode=options.progress, clock=trio.current_time)
    started = trio.current_time()
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
                items = iter_dataset(check, skip=done)
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
                    transcripts = TranscriptWriter(options.transcripts) if options.transcripts is not None else None
                    run = _Run(pool, writer, options, counters, progress, tally, transcripts)
                    send, receive = trio.open_memory_channel[BatchItem](0)
                    async with trio.open_nursery() as outer:
                        outer.start_soon(progress.run)
                        async with trio.open_nursery() as nursery:
                            for _ in range(min(options.in_flight, todo)):
                                nursery.start_soon(_worker, run, receive.clone())
                            receive.close()
                            async with send:
                                for item in items:
                                    await send.send(item)
                        outer.cancel_scope.cancel(reason="every item finished")
    finally:
        progress.close()
        if audit is not None:
            audit.close()
        if tmp_home is not None:
            tmp_home.cleanup()
    duration = trio.current_time() - started
    summary = tally.summary(
        total=total, resumed=resumed, processed=todo, duration_s=duration, retries=counters.retries
    )
    if options.summary is not None:
        Path(options.summary).write_bytes(orjson.dumps(summary.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    return summary

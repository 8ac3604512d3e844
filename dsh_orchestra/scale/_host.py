"""PoolHost: a RuntimePool on a trio thread of its own, fed items from other threads.

Owns: the host thread (``trio.run`` there, never on the caller's event loop), the pool's
lifetime (runtimes start once per host, not per item), handing items in
(``trio.from_thread.run`` with the host's trio token) and result lines out. Knows nothing of
Ray: the Ray actor (``_actor``) is a thin shell around it, so it is usable and testable alone.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket
import tempfile
import threading
import time
import uuid
from typing import Any, Iterator, Mapping

import attrs
import trio

from ..approvals import AuditLog
from ..batch import BatchItem, BatchOptions, process_item
from ..batch._transcripts import TranscriptWriter
from ..pool import RuntimePool, open_pool
from ..protocol import OrchestraError
from ._portable import ActorSpec, RemoteError

log = logging.getLogger("dsh_orchestra.scale")

CLOSE_WAIT = 60.0
"""Seconds ``close()`` waits for the host thread (the pool's close ladder) before giving up."""


class HostFailedError(OrchestraError):
    """The host's pool is gone (it gave up, or the host is closing): the item was not run
    to the end here and goes to another host."""


@attrs.frozen(kw_only=True)
class HostConfig:
    """Everything a host needs but its secrets (picklable: it is an actor's creation argument)."""

    actor_spec: ActorSpec
    slot: int = 0
    runtimes: int = 1
    max_sessions: int = 4
    options: BatchOptions = attrs.field(factory=BatchOptions)  # timeout, retries, policy, answerer, audit, transcripts

    @classmethod
    def for_items(cls, actor_spec: ActorSpec, options: BatchOptions, *, slot: int, runtimes: int, in_flight: int) -> HostConfig:
        """A host for ``in_flight`` items at once over ``runtimes`` runtimes; the options
        only the items need (nothing the driver owns: results, summary, resume, shard)."""
        item_options = BatchOptions(
            runtimes=runtimes, concurrency=in_flight, timeout=options.timeout, retries=options.retries,
            retry_backoff=options.retry_backoff, policy=options.policy, answerer=options.answerer,
            audit=options.audit, transcripts=options.transcripts, progress="none",
        )
        return cls(actor_spec=actor_spec, slot=slot, runtimes=runtimes,
                   max_sessions=max(1, math.ceil(in_flight / runtimes)), options=item_options)


@attrs.frozen(kw_only=True)
class HostInfo:
    """A started host: where it runs and how long its runtimes took to start."""

    slot: int
    pid: int
    hostname: str
    startup_s: float
    runtimes: int
    node_id: str = ""


def _session_ids() -> Iterator[str]:
    token = uuid.uuid4().hex[:12]
    return (f"item-{token}{serial:012x}" for serial in itertools.count())


class PoolHost:
    """A RuntimePool owned by a trio thread; ``process()`` may be called from many threads.

    ``start()`` blocks until the pool's first runtime is ready (or raises its start error);
    ``process(item)`` blocks until the item's result line is ready; ``close()`` closes the
    pool (every runtime process reaped) and joins the thread.
    """

    def __init__(self, config: HostConfig, secrets: Mapping[str, str] | None = None) -> None:
        self.config = config
        self._secrets = dict(secrets or {})
        self._thread = threading.Thread(target=self._thread_main, name=f"dsh-orchestra-host-{config.slot}", daemon=True)
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._closing: trio.Event | None = None
        self._pool: RuntimePool | None = None
        self._failure: BaseException | None = None
        self._home: tempfile.TemporaryDirectory[str] | None = None
        self._session_ids = _session_ids()
        self._transcript_writer: TranscriptWriter | None = None
        self._started_at = 0.0
        self._startup_s = 0.0
        self._state = "new"  # then "running", "closed" or "failed"

    # ---- the host thread -------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to start() / process() callers; the thread ends
            self._failure = exc
            log.warning("host %d stopped: %s", self.config.slot, exc)
        finally:
            self._pool = None
            self._token = None
            self._state = "failed" if self._failure is not None else "closed"
            self._ready.set()
            if self._home is not None:
                self._home.cleanup()

    async def _main(self) -> None:
        config = self.config
        options = config.options
        spec, self._home = config.actor_spec.rebuild(self._secrets, config.slot)
        self._closing = trio.Event()
        audit = AuditLog(options.audit, secrets=spec.secrets()) if options.audit is not None else None
        try:
            async with open_pool(
                spec, config.runtimes, max_sessions=config.max_sessions,
                approvals=options.policy, answerer=options.answerer, audit=audit,
            ) as pool:
                self._pool = pool
                self._startup_s = time.monotonic() - self._started_at
                self._token = trio.lowlevel.current_trio_token()
                self._state = "running"
                self._ready.set()
                await self._closing.wait()
        finally:
            if audit is not None:
                audit.close()

    # ---- called from other threads ---------------------------------------------------

    def start(self) -> HostInfo:
        """Start the host thread and its pool; return once a runtime is ready.

        Raises:
            RemoteError: the pool could not start (it stands for e.g. RuntimeStartError:
                ``.local()`` rebuilds that one).
        """
        if self._thread.ident is None:
            self._started_at = time.monotonic()
            self._thread.start()
        self._ready.wait()
        if self._failure is not None or self._token is None:
            raise RemoteError.of(self._failure or HostFailedError("the host stopped before its pool was ready"))
        return HostInfo(slot=self.config.slot, pid=os.getpid(), hostname=socket.gethostname(),
                        startup_s=self._startup_s, runtimes=self.config.runtimes)

    def process(self, item: BatchItem) -> tuple[dict[str, Any], int]:
        """Run ``item`` on the pool; its result line and the retries it used (nothing written).

        Raises:
            HostFailedError: the pool is gone or closing; the item may not have run.
        """
        token = self._token
        if token is None or self._failure is not None:
            why = f": {self._failure}" if self._failure is not None else ""
            raise HostFailedError(f"host {self.config.slot} is not running ({self._state}{why})")
        try:
            return trio.from_thread.run(self._process, item, trio_token=token)
        except (trio.RunFinishedError, trio.Cancelled) as exc:  # another thread: converted, not swallowed
            raise HostFailedError(f"host {self.config.slot} stopped while item {item.id!r} was running") from exc

    async def _process(self, item: BatchItem) -> tuple[dict[str, Any], int]:
        pool = self._pool
        if pool is None:
            raise HostFailedError(f"host {self.config.slot} has no pool")
        transcripts = self._transcripts()
        line, retries = await process_item(pool, item, self.config.options, new_session_id=self._next_session_id,
                                           transcripts=transcripts)
        error = line.get("error")
        if isinstance(error, dict) and error.get("type") == "PoolClosedError":
            # the pool is closing under the item (it gave up): not the item's answer
            raise HostFailedError(f"host {self.config.slot}: {error.get('message')}")
        return line, retries

    def _next_session_id(self) -> str:
        return next(self._session_ids)

    def _transcripts(self) -> TranscriptWriter | None:
        directory = self.config.options.transcripts
        if directory is None:
            return None
        if self._transcript_writer is None:
            self._transcript_writer = TranscriptWriter(directory)
        return self._transcript_writer

    def statistics(self) -> dict[str, Any]:
        """The pool's statistics (as a dict), or ``{}`` when it is not running."""
        pool, token = self._pool, self._token
        if pool is None or token is None:
            return {}
        try:
            stats = trio.from_thread.run_sync(pool.statistics, trio_token=token)
        except trio.RunFinishedError:
            return {}
        return attrs.asdict(stats)

    def close(self) -> None:
        """Close the pool (every runtime reaped) and join the host thread. Idempotent."""
        token, closing = self._token, self._closing
        if token is not None and closing is not None:
            try:
                trio.from_thread.run_sync(closing.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        if self._thread.ident is not None:
            self._thread.join(CLOSE_WAIT)

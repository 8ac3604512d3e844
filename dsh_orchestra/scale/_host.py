"""PoolHost: a RuntimePool on a trio thread of its own, fed items from other threads.

Owns: the host thread (``trio.run`` there, never on the caller's event loop), the pool's
lifetime (runtimes start once per host, not per item), handing items in
(``trio.from_thread.run`` with the host's trio token) and attempts out (``attempt_on_pool``,
the same as on one machine). Knows nothing of
Ray: the Ray actor (``_actor``) is a thin shell around it, so it is usable and testable alone.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from typing import Any, Mapping

import attrs
import trio

from ..batch import Attempt, BatchItem, BatchOptions, PoolExecutor
from ..batch import PoolRunner
from ..protocol import OrchestraError
from ._gateways import GatewayRoute, route_spec
from ._portable import ActorSpec, RemoteError

log = logging.getLogger("dsh_orchestra.scale")

CLOSE_WAIT = 60.0
"""Seconds ``close()`` waits for the host thread (the pool's close ladder) before giving up."""


class HostFailedError(OrchestraError):
    """The host's pool is gone (it gave up, or the host is closing): the item was not run
    to the end here and goes to another host."""


def _absolute(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None else os.path.abspath(os.fspath(path))


@attrs.frozen(kw_only=True)
class HostConfig:
    """Everything a host needs but its secrets (picklable: it is an actor's creation argument)."""

    actor_spec: ActorSpec
    slot: int = 0
    runtimes: int = 1
    max_sessions: int = 4
    in_flight: int = 4
    options: BatchOptions = attrs.field(factory=BatchOptions)  # timeout, policy, answerer, audit, transcripts

    @classmethod
    def for_items(cls, actor_spec: ActorSpec, options: BatchOptions, *, slot: int, runtimes: int, in_flight: int) -> HostConfig:
        """A host for ``in_flight`` items at once over ``runtimes`` runtimes; the options
        only an attempt or the host's pool needs (nothing the driver owns: results, retries,
        summary, resume, shard)."""
        item_options = BatchOptions(
            runtimes=runtimes, concurrency=in_flight, timeout=options.timeout, policy=options.policy,
            answerer=options.answerer, audit=options.audit, transcripts=options.transcripts, progress="none",
            max_sessions_per_runtime=options.max_sessions_per_runtime, max_runtime_rss_mib=options.max_runtime_rss_mib,
            gateway=None,  # the driver decides: the node's gateway (a route given to the host) or none
        )
        # paths made absolute here, on the driver: an actor's working directory is not the driver's
        item_options = attrs.evolve(item_options, audit=_absolute(options.audit), transcripts=_absolute(options.transcripts))
        return cls(actor_spec=actor_spec, slot=slot, runtimes=runtimes, in_flight=in_flight, options=item_options)


@attrs.frozen(kw_only=True)
class HostInfo:
    """A started host: where it runs and how long its runtimes took to start."""

    slot: int
    pid: int
    hostname: str
    startup_s: float
    runtimes: int
    node_id: str = ""


class PoolHost:
    """A RuntimePool owned by a trio thread; ``process()`` may be called from many threads.

    ``start()`` blocks until the pool's first runtime is ready (or raises its start error);
    ``process(item)`` blocks until the item's result line is ready; ``close()`` closes the
    pool (every runtime process reaped) and joins the thread.
    """

    def __init__(self, config: HostConfig, secrets: Mapping[str, str] | None = None, *,
                 route: GatewayRoute | None = None) -> None:
        """``route``: the node's model gateway, which the runtimes use (None: none)."""
        self.config = config
        self._route = route
        self._secrets = dict(secrets or {})
        self._thread = threading.Thread(target=self._thread_main, name=f"dsh-orchestra-host-{config.slot}", daemon=True)
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._closing: trio.Event | None = None
        self._runner: PoolRunner | None = None
        self._failure: BaseException | None = None
        self._home: tempfile.TemporaryDirectory[str] | None = None
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
            self._runner = None
            self._token = None
            self._state = "failed" if self._failure is not None else "closed"
            self._ready.set()
            if self._home is not None:
                self._home.cleanup()

    async def _main(self) -> None:
        config = self.config
        spec, self._home = config.actor_spec.rebuild(self._secrets, config.slot)
        if self._route is not None:
            spec = route_spec(spec, self._route)
        self._closing = trio.Event()
        executor = PoolExecutor(runtimes=config.runtimes, concurrency=config.in_flight)
        async with executor.open(spec, config.options) as runner:
            self._runner = runner
            self._startup_s = time.monotonic() - self._started_at
            self._token = trio.lowlevel.current_trio_token()
            self._state = "running"
            self._ready.set()
            await self._closing.wait()

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

    def process(self, item: BatchItem, session_id: str, workspace: str | None = None, alone: bool = False) -> Attempt:
        """One attempt at ``item`` in ``session_id`` on the pool (``attempt_on_pool``; ``alone``:
        on a runtime of the pool with no other session).

        Raises:
            HostFailedError: the pool is gone or closing; the item may not have run.
        """
        token = self._token
        if token is None or self._failure is not None:
            why = f": {self._failure}" if self._failure is not None else ""
            raise HostFailedError(f"host {self.config.slot} is not running ({self._state}{why})")
        try:
            return trio.from_thread.run(self._attempt, item, session_id, workspace, alone, trio_token=token)
        except (trio.RunFinishedError, trio.Cancelled) as exc:  # another thread: converted, not swallowed
            raise HostFailedError(f"host {self.config.slot} stopped while item {item.id!r} was running") from exc

    async def _attempt(self, item: BatchItem, session_id: str, workspace: str | None, alone: bool = False) -> Attempt:
        runner = self._runner
        if runner is None:
            raise HostFailedError(f"host {self.config.slot} has no pool")
        attempt = await runner.attempt(item, session_id, workspace=workspace, alone=alone)
        if attempt.error is not None and attempt.error["type"] == "PoolClosedError":
            # the pool is closing under the item (it gave up): not the item's answer
            raise HostFailedError(f"host {self.config.slot}: {attempt.error['message']}")
        return attempt

    def statistics(self) -> dict[str, Any]:
        """The pool's statistics (as a dict), or ``{}`` when it is not running."""
        runner, token = self._runner, self._token
        if runner is None or token is None:
            return {}
        pool = runner.pool
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

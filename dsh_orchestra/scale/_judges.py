"""The judges of a Ray run: their runtime on the driver, its model calls through a gateway of the run.

On one machine a judge scorer without a runtime of its own grades on the batch's pool, so its
calls go through the run's gateway: counted in the summary's ``model`` totals, under the
run's budget and quota, through its cache. Under Ray the pool lives in the actors, so the
judges get a pool of one runtime on the driver (as ``open_judges`` opens for them) whose calls
go through a gateway the driver serves itself: a member of the run's quota coordinator like
the node gateways (``serve_gateway``), its counts added to the run's totals
(``NodeGateways.summary``). Started the first time a judge grades; nothing runs without
judges. Its runtime gets the per-run token, never the key.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio

from ..gateway import Gateway, routed_to
from ..pool import Places, open_places
from ..runtime import RuntimeSpec
from ..session import Runtime
from ._gateways import NodeGateways, serve_gateway

log = logging.getLogger("dsh_orchestra.scale")

JUDGE_SESSIONS = 4
"""Judge sessions at once on the driver's runtime (what ``open_judges`` gives a pool of its own)."""


class DriverJudges:
    """The judges' lease of a Ray run (``RayRunner.lease``): a pool of one runtime of ``spec``
    on the driver, routed through a gateway of the run (see the module docstring).
    The pool recycles its runtime as the batch's pools do (``max_sessions_per_runtime``,
    ``max_runtime_rss_mib``). Serve it with ``async with judges.open():`` around the run."""

    def __init__(self, spec: RuntimeSpec, gateways: NodeGateways, api_key: str | None, *,
                 max_sessions_per_runtime: int | None = None, max_runtime_rss_mib: float | None = None) -> None:
        self.spec = spec
        self.gateways = gateways
        self.api_key = api_key
        self.max_sessions_per_runtime = max_sessions_per_runtime
        self.max_runtime_rss_mib = max_runtime_rss_mib
        self._nursery: trio.Nursery | None = None
        self._places: Places | None = None
        self._lock = trio.Lock()

    @property
    def gateway(self) -> Gateway | None:
        """The judges' gateway once started (what the run loop checks for refused calls)."""
        return self.gateways.judges

    @asynccontextmanager
    async def open(self) -> AsyncIterator[DriverJudges]:
        """Serve the judges for the block (started at the first ``lease``); stop them after."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield self
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[Runtime]:
        """A place on the judges' runtime for the block (``dsh_orchestra.pool.Lease``)."""
        async with self._lock:
            if self._places is None:
                if self._nursery is None:
                    raise RuntimeError("the judges' runtime is not served (DriverJudges.open)")
                self._places = await self._nursery.start(self._serve)
        self.gateways.sync_judges()  # the run's spending as the driver knows it, before the judge's calls
        try:
            async with self._places.lease() as runtime:
                yield runtime
        finally:
            self.gateways.sync_judges()  # and what they spent, before the next item starts

    async def _serve(self, *, task_status: trio.TaskStatus[Places] = trio.TASK_STATUS_IGNORED) -> None:
        gateways = self.gateways
        async with trio.open_nursery() as nursery:
            gateway: Gateway = await nursery.start(serve_gateway, gateways.judges_name, gateways.config, self.api_key,
                                                   gateways.coordinator)
            options = gateway.options
            spec = routed_to(self.spec, base_url=gateway.base_url, token=gateway.token,
                             api_key_env=options.api_key_env, api_key=self.api_key)
            try:
                async with open_places(spec, 1, max_sessions=JUDGE_SESSIONS, gateway=None,
                                       max_sessions_per_runtime=self.max_sessions_per_runtime,
                                       max_runtime_rss_mib=self.max_runtime_rss_mib) as places:
                    gateways.judges = gateway
                    gateways.sync_judges()
                    log.info("the judges' runtime runs on the driver, through the model gateway %s", gateway.base_url)
                    task_status.started(places)
                    await trio.sleep_forever()
            finally:
                nursery.cancel_scope.cancel()

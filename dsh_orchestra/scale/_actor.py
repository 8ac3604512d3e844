"""HostActor: the class the driver wraps with ``ray.remote`` (a threaded actor, not an async one).

Ray calls its sync methods from a pool of ``max_concurrency`` threads; each ``process`` call
hands its item to the PoolHost's trio thread and blocks that Ray thread until the attempt
is done. Trio never runs on Ray's event loop. Ray is imported only inside ``start``, so
importing this module does not import Ray.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from ..batch import Attempt, BatchItem
from ._host import HostConfig, HostInfo, PoolHost
from ._portable import RemoteError


class HostActor:
    """One Ray actor: one PoolHost (its runtimes live as long as the actor)."""

    def __init__(self, config: HostConfig) -> None:
        self._config = config
        self._host: PoolHost | None = None

    def pid(self) -> int:
        """This actor's OS process id."""
        return os.getpid()

    def node_id(self) -> str:
        """The id of the Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def start(self, secrets_box: list[Any], route_box: list[Any] | None = None) -> HostInfo:
        """Start the pool. ``secrets_box`` holds one object reference to the secrets mapping
        (boxed in a list, so the value is fetched here, never inlined in a task's arguments);
        ``route_box`` likewise the node gateway's ``GatewayRoute`` (None: no gateway).

        Raises:
            RemoteError: the pool could not start (``.local()`` on the driver rebuilds the error).
        """
        import ray

        secrets = ray.get(secrets_box[0]) if secrets_box else {}
        route = ray.get(route_box[0]) if route_box else None
        if self._host is None:
            self._host = PoolHost(self._config, secrets, route=route)
        try:
            info = self._host.start()
        except BaseException as exc:
            raise RemoteError.of(exc) from None
        return attrs.evolve(info, node_id=ray.get_runtime_context().get_node_id())

    def process(self, item: BatchItem, session_id: str, workspace: str | None = None, alone: bool = False) -> Attempt:
        """One attempt at ``item`` (see ``PoolHost.process``)."""
        if self._host is None:
            raise RemoteError("HostFailedError", "the actor was not started")
        try:
            return self._host.process(item, session_id, workspace, alone)
        except Exception as exc:  # sent back by value: our errors do not survive plain pickling
            raise RemoteError.of(exc) from None

    def statistics(self) -> dict[str, Any]:
        """The pool's statistics (``PoolStatistics`` as a dict)."""
        return self._host.statistics() if self._host is not None else {}

    def close(self) -> None:
        """Close the pool and its runtimes (every process reaped)."""
        if self._host is not None:
            self._host.close()

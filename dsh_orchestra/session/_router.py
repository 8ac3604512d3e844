"""Session-tree routing: one sink on the connection, bounded subscriptions per root session.

Owns: the child -> parent map (recorded from ``subagent.started`` before anything is
delivered) and fan-out of each notification to the subscriptions of every root whose tree
holds it. Must not know about pools or workflows.
"""

from __future__ import annotations

from typing import Any

from ..protocol import SUBAGENT_FINISHED, SUBAGENT_STARTED, TransportClosedError
from ..transport import DEFAULT_CAPACITY, Notification, Subscription

MAX_DEPTH = 64


class SessionRouter:
    """Routes a runtime's notifications to the session trees that hold them."""

    def __init__(self) -> None:
        self.parents: dict[str, str] = {}
        self._subscriptions: dict[str, list[Subscription]] = {}
        self._error: TransportClosedError | None = None

    def subscribe(self, root: str, *, name: str | None = None, capacity: int = DEFAULT_CAPACITY) -> Subscription:
        """A bounded subscription to ``root``'s tree, descendants included, in wire order."""
        subscription = Subscription(name or f"session {root!r}", capacity=capacity, on_close=self._remover(root))
        if self._error is not None:
            subscription.fail(self._error)
            return subscription
        self._subscriptions.setdefault(root, []).append(subscription)
        return subscription

    def _remover(self, root: str) -> Any:
        def remove(subscription: Subscription) -> None:
            subscriptions = self._subscriptions.get(root)
            if subscriptions and subscription in subscriptions:
                subscriptions.remove(subscription)
                if not subscriptions:
                    del self._subscriptions[root]

        return remove

    def root_of(self, session_id: str) -> str:
        """The topmost known ancestor of ``session_id`` (itself when it has no parent)."""
        seen = 0
        while session_id in self.parents and seen < MAX_DEPTH:
            session_id = self.parents[session_id]
            seen += 1
        return session_id

    def push(self, notification: Notification) -> None:
        """The connection sink: record edges, then deliver to every subscribed ancestor."""
        params = notification.params
        method = notification.method
        if method == SUBAGENT_STARTED or method == SUBAGENT_FINISHED:
            parent = params.get("parentSessionId")
            child = params.get("childSessionId")
            if method == SUBAGENT_STARTED and isinstance(parent, str) and isinstance(child, str) and parent and child and parent != child:
                self.parents.setdefault(child, parent)
            start = parent
            extra = child
        else:
            start = params.get("sessionId")
            extra = None
        subscriptions = self._subscriptions
        if not subscriptions or not isinstance(start, str):
            return
        session: str | None = start
        depth = 0
        while session is not None and depth < MAX_DEPTH:
            targets = subscriptions.get(session)
            if targets:
                for subscription in tuple(targets):
                    subscription.push(notification)
            session = self.parents.get(session)
            depth += 1
        if extra is not None and extra in subscriptions and extra != start:
            for subscription in tuple(subscriptions[extra]):
                subscription.push(notification)

    def fail(self, error: TransportClosedError) -> None:
        """The connection closed: every subscription drains, then raises ``error``."""
        self._error = error
        for subscriptions in list(self._subscriptions.values()):
            for subscription in list(subscriptions):
                subscription.fail(error)

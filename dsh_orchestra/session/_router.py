"""Session-tree routing: one sink on the connection, bounded subscriptions per root session.

Owns: the child -> parent map (recorded from ``subagent.started`` before anything is
delivered) and fan-out of each notification to the subscriptions of every root whose tree
holds it. Must not know about pools or workflows.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Protocol, cast

from ..protocol import EDGE_METHODS, SESSION_ID, SUBAGENT_STARTED, TransportClosedError, routing_key, session_of
from ..transport import DEFAULT_CAPACITY, Connection, Notification, Subscription

MAX_DEPTH = 64
_NO_RUN = object()  # push_many: no run of one session's notifications under way


def _each(targets: Target | list[Target]) -> tuple[Target, ...]:
    """One root's targets (kept alone or in a list), copied: a target may detach while fed."""
    return tuple(targets) if isinstance(targets, list) else (targets,)


class Target(Protocol):
    """What the router delivers to: a Subscription, or any object with these two methods.

    ``push`` runs in the connection's reader, in wire order: it must not block or raise.
    """

    def push(self, notification: Notification) -> None: ...

    def fail(self, error: TransportClosedError) -> None: ...


class SessionRouter:
    """Routes a runtime's notifications to the session trees that hold them."""

    def __init__(self, source: Callable[[], Connection | None] | None = None) -> None:
        self.source = source
        """The connection the runtime reads now (None while there is none): subscriptions read
        it themselves when their buffer is empty and nobody else reads (``Connection.pump``)."""
        self.parents: dict[str, str] = {}
        self._children: dict[str, list[str]] = {}  # parent -> children, to prune with forget()
        # root -> its one target, or a list of them when it has several (a lone run's
        # collector needs no list: 10,000 runs in flight, docs/benchmarks.md)
        self._subscriptions: dict[str, Target | list[Target]] = {}
        self._error: TransportClosedError | None = None

    def subscribe(self, root: str, *, name: str | None = None, capacity: int = DEFAULT_CAPACITY) -> Subscription:
        """A bounded subscription to ``root``'s tree, descendants included, in wire order."""
        subscription = Subscription(
            name or f"session {root!r}", capacity=capacity, on_close=self._remover(root),
            lender=self if self.source is not None else None,
        )
        if self._error is not None:
            subscription.fail(self._error)
            return subscription
        self.add(root, subscription)
        return subscription

    async def pump(self, subscription: Subscription) -> bool:
        """Lend the current connection's reading to ``subscription`` (see ``Lender``)."""
        connection = self.source() if self.source is not None else None
        return connection is not None and await connection.pump(subscription)

    def interrupt_pump(self) -> None:
        """End a subscription's wait in ``pump`` (see ``Lender``)."""
        connection = self.source() if self.source is not None else None
        if connection is not None:
            connection.interrupt_pump()

    def attach(self, root: str, target: Target) -> Callable[[], None]:
        """Deliver ``root``'s tree to ``target`` directly (no buffer); returns the detacher.

        For consumers that keep up by construction, such as a run's turn collector.
        """
        self.add(root, target)
        return partial(self.detach, root, target)

    def add(self, root: str, target: Target) -> None:
        """``attach`` without making a detacher: undo it with ``detach(root, target)``.

        What ``Session.run`` uses: a detacher object per run in flight is memory it can do
        without (10,000 concurrent runs, docs/benchmarks.md).
        """
        if self._error is not None:
            target.fail(self._error)
            return
        targets = self._subscriptions.get(root)
        if targets is None:
            self._subscriptions[root] = target
        elif isinstance(targets, list):
            targets.append(target)
        else:
            self._subscriptions[root] = [targets, target]

    def detach(self, root: str, target: Target) -> None:
        """Stop delivering ``root``'s tree to ``target`` (what ``attach``'s detacher does)."""
        targets = self._subscriptions.get(root)
        if targets is None:
            return
        if not isinstance(targets, list):
            if targets is target:
                del self._subscriptions[root]
            return
        if target in targets:
            targets.remove(target)
            if len(targets) == 1:
                self._subscriptions[root] = targets[0]

    def _remover(self, root: str) -> Any:
        return partial(self.detach, root)

    def root_of(self, session_id: str) -> str:
        """The topmost known ancestor of ``session_id`` (itself when it has no parent)."""
        seen = 0
        while session_id in self.parents and seen < MAX_DEPTH:
            session_id = self.parents[session_id]
            seen += 1
        return session_id

    def push(self, notification: Notification) -> None:
        """The connection sink: record edges, then deliver to every subscribed ancestor."""
        method = notification.method
        params = notification.params
        subscriptions = self._subscriptions
        if method not in EDGE_METHODS:  # the hot path: a session's own notification
            start = params.get(SESSION_ID)
            if type(start) is not str:
                start = session_of(params)
                if start is None:
                    return
            targets = subscriptions.get(start)
            if targets is not None:
                if not isinstance(targets, list):  # the usual case: one target
                    targets.push(notification)
                else:
                    for subscription in tuple(targets):
                        subscription.push(notification)
            if self.parents:
                parent = self.parents.get(start)
                if parent is not None:
                    self._push_up(notification, parent, 1)
            return
        start, extra = routing_key(method, params)
        if method == SUBAGENT_STARTED and start and extra and start != extra and extra not in self.parents:
            self.parents[extra] = start
            self._children.setdefault(start, []).append(extra)
        if not subscriptions or start is None:
            return
        self._push_up(notification, start, 0)
        if extra is not None and extra != start:
            targets = subscriptions.get(extra)
            if targets is not None:
                for subscription in _each(targets):
                    subscription.push(notification)

    def push_many(self, notifications: list[Notification]) -> None:
        """The connection's batch sink: ``push`` each of ``notifications`` (one read's, in wire
        order). A run of one session's own notifications goes to each of its subscriptions in
        one call (``Subscription.push_many``) when they are all it has to reach."""
        run: Any = _NO_RUN  # the session of notifications[start:index]
        start = 0
        for index, notification in enumerate(notifications):
            if notification.method in EDGE_METHODS:
                session: Any = _NO_RUN
            else:
                session = notification.params.get(SESSION_ID)
                if session == run:  # the hot path: the run goes on
                    continue
            if run is not _NO_RUN:
                self._push_run(run, notifications, start, index)
                run = _NO_RUN
            if type(session) is str:
                run, start = session, index
            else:
                self.push(notification)
        if run is not _NO_RUN:
            self._push_run(run, notifications, start, len(notifications))

    def _push_run(self, session: str, notifications: list[Notification], start: int, stop: int) -> None:
        """``push`` notifications[start:stop], all ``session``'s own."""
        targets = self._subscriptions.get(session)
        if not (self.parents and session in self.parents):  # else its ancestors get them too
            if targets is None:
                return
            if not isinstance(targets, list):  # the usual case: one target
                if type(targets) is Subscription:
                    targets.push_many(notifications if stop - start == len(notifications) else notifications[start:stop])
                    return
            elif all(type(target) is Subscription for target in targets):
                run = notifications if stop - start == len(notifications) else notifications[start:stop]
                for target in tuple(targets):
                    cast(Subscription, target).push_many(run)
                return
        for notification in notifications[start:stop]:  # others get them one at a time, as ever
            self.push(notification)

    def _push_up(self, notification: Notification, session: str | None, depth: int) -> None:
        """Deliver to ``session``'s subscribers and its ancestors' (``depth`` levels done)."""
        subscriptions = self._subscriptions
        parents = self.parents
        while session is not None and depth < MAX_DEPTH:
            targets = subscriptions.get(session)
            if targets is not None:
                for subscription in _each(targets):
                    subscription.push(notification)
            session = parents.get(session)
            depth += 1

    def forget(self, root: str) -> set[str]:
        """Drop the recorded edges of ``root``'s tree and return the descendants dropped.

        For callers done with a settled session for good (a batch item): without it the
        edge map grows by one entry per subagent for the runtime's whole life. Events of a
        forgotten descendant are no longer attributed to ``root``.
        """
        dropped: set[str] = set()
        pending = [root]
        while pending:
            for child in self._children.pop(pending.pop(), ()):
                if child not in dropped:
                    dropped.add(child)
                    self.parents.pop(child, None)
                    pending.append(child)
        return dropped

    def fail(self, error: TransportClosedError) -> None:
        """The connection closed: every subscription drains, then raises ``error``."""
        self._error = error
        for targets in list(self._subscriptions.values()):
            for subscription in _each(targets):
                subscription.fail(error)

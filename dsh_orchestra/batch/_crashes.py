"""Finding the item that kills runtimes (a poison item) without failing its neighbours.

When a runtime dies, every item in flight on it fails the same way, and only one of them (or
none: an OOM kill, a bug of the runtime) did it. Each item counts the runtime deaths it was
in flight at. Below ``ALONE_AFTER`` deaths it is only a suspect: it runs again at once,
spending none of its retries. From ``ALONE_AFTER`` deaths on, every attempt of it runs alone
(no other session on its runtime): a crash then is its own doing and spends a retry; once its
retries are spent its line is an error of type ``RUNTIME_CRASHED`` with the runtime's exit
status and stderr tail.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import attrs

from ._executor import RuntimeCrash

log = logging.getLogger("dsh_orchestra.batch")

RUNTIME_CRASHED = "RuntimeCrashed"
"""``error.type`` of an item whose runtime died under it while it ran alone, every retry."""

ALONE_AFTER = 2
"""Deaths an item may be in flight at beside others before its attempts run alone."""

_TAIL_CHARS = 2000  # of the stderr tail kept in a result line's message


@attrs.define
class Deaths:
    """Runtime deaths seen by this run (each logged once, however many items report it)."""

    limit: int = 1024  # incarnations remembered (enough to log each death once)
    _seen: OrderedDict[str, list[str]] = attrs.field(factory=OrderedDict, init=False)

    def note(self, item_id: str, crash: RuntimeCrash, *, alone: bool) -> None:
        """``item_id`` was in flight (``alone`` or not) when ``crash`` happened."""
        items = self._seen.get(crash.runtime)
        if items is None:
            items = self._seen[crash.runtime] = []
            if len(self._seen) > self.limit:
                self._seen.popitem(last=False)
            status = "unknown" if crash.exit_status is None else crash.exit_status
            if alone:
                log.warning("runtime %s died (exit status %s) running item %r alone", crash.runtime, status, item_id)
            else:
                log.warning("runtime %s died (exit status %s); the items in flight on it run again without "
                            "spending a retry (after %d such deaths, alone)", crash.runtime, status, ALONE_AFTER)
        items.append(item_id)
        if not alone:
            log.info("item %r was in flight when runtime %s died: it runs again without spending a retry",
                     item_id, crash.runtime)


def crashed_error(item_id: str, crashes: int, alone: int, crash: RuntimeCrash) -> dict[str, str]:
    """The ``error`` of an item that killed its runtime ``alone`` times running alone (and was
    in flight at ``crashes`` deaths in all); ``crash`` is the last."""
    described = crash.describe()
    if len(described) > _TAIL_CHARS:
        described = "..." + described[-_TAIL_CHARS:]
    message = (f"item {item_id!r} was in flight at {crashes} runtime deaths, {alone} of them running alone "
               f"(no other session on the runtime); last: runtime {crash.runtime} {described}")
    return {"type": RUNTIME_CRASHED, "message": message}

"""A notification as the reader hands it on; no trio here (the state machine builds them).

Owns: the Notification record and the reader's fast way to build one.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs


@attrs.frozen(slots=True)
class Notification:
    """One notification as received: its method, its params object (plain JSON) and, when it
    was read from a wire, ``raw``: the frame's line exactly as received (without its
    newline), to keep or forward it without encoding it again (see ``protocol.event_json``).
    ``raw`` takes no part in equality or ``repr``."""

    method: str
    params: dict[str, Any]
    raw: bytes | None = attrs.field(default=None, eq=False, repr=False)


class OpenNotification(Notification):
    """A Notification being built by the reader, never handed out: the same slots, set by
    plain assignment, then ``__class__ = Notification`` (allowed between layout-identical
    classes), which makes it exactly a Notification (type, equality, repr, frozenness).

    Why: the frozen ``__init__`` (or setting the slots through their descriptors) costs
    about 5,100 (3,300) instructions per notification, this about 2,000 (docs/benchmarks.md,
    W1); plain assignment needs the generic ``__setattr__``, which the frozen class replaces.
    """

    __slots__ = ()
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


NotificationFilter = Callable[[Notification], bool]

"""When to try again, and how long to wait first: one answer for every retry loop.

``retryable`` decides whether a failure is worth another attempt (the runtime went away or
a bound elapsed: yes; the runtime rejected the request, sent nonsense, or the pool is
closing: no). ``Backoff`` is the pause before the next attempt or restart: exponential from
``first``, capped at ``cap``, jittered downward so that many waiters do not wake together.
Used by the pool's and the Ray actors' supervisors, the batch item loop and workflow steps.
"""

from __future__ import annotations

import random

import attrs
import trio

from .._params import Check, Param, ParamValueError
from ..protocol import (
    JsonRpcResponseError,
    OrchestraError,
    RequestTimeoutError,
    SdkProtocolError,
    SubscriberOverflowError,
    TransportClosedError,
)


class PoolClosedError(TransportClosedError):
    """The pool is closing (or closed) and takes no more work."""


class SessionBusyError(OrchestraError):
    """A session id is still held by another runtime process (one being recycled): retryable."""


_NEVER = (JsonRpcResponseError, SdkProtocolError, PoolClosedError)
_TRANSIENT = (TransportClosedError, RequestTimeoutError, SubscriberOverflowError, SessionBusyError,
              trio.TooSlowError, TimeoutError)


def retryable(exc: BaseException) -> bool:
    """True when another attempt may succeed: the runtime was lost (``TransportClosedError``),
    a bound elapsed (``trio.TooSlowError``, ``TimeoutError``, ``RequestTimeoutError``), a
    subscriber fell behind, or the session is held elsewhere for now (``SessionBusyError``).

    Never for a rejection by the runtime (``JsonRpcResponseError``), malformed data
    (``SdkProtocolError``), a closing pool (``PoolClosedError``) or anything else (a bug, a
    bad argument). A group is retryable when every error in it is.
    """
    if isinstance(exc, BaseExceptionGroup):
        return all(retryable(e) for e in exc.exceptions)
    if isinstance(exc, _NEVER):
        return False
    return isinstance(exc, _TRANSIENT)


_non_negative = Check(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0, "a number >= 0")


@attrs.define
class Backoff:
    """Pauses between attempts: ``first * 2**n`` before the (n+1)-th retry, at most ``cap``,
    each shortened by a random fraction of at most ``jitter`` (never longer than the plain
    figure). ``seed`` fixes the random fraction (tests).
    """

    first: float = attrs.field(default=0.5, validator=_non_negative)
    cap: float = attrs.field(default=30.0, validator=_non_negative)
    jitter: float = attrs.field(default=0.1, validator=_non_negative)
    seed: int | None = attrs.field(default=None, kw_only=True)
    _random: random.Random = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.first > self.cap:
            raise ParamValueError(Param("backoff", (self.first, self.cap), spelled="backoff"),
                                  f" must be (first, cap) with 0 <= first <= cap, not {(self.first, self.cap)!r}")
        if self.jitter > 1:
            raise ParamValueError(Param("jitter", self.jitter, spelled="jitter"), f" must be a fraction between 0 and 1, not {self.jitter!r}")
        self._random = random.Random(self.seed)

    @classmethod
    def of(cls, value: Backoff | tuple[float, float], *, jitter: float = 0.1) -> Backoff:
        """``value`` itself, or a ``(first, cap)`` pair as a Backoff."""
        if isinstance(value, Backoff):
            return value
        try:
            first, cap = value
        except (TypeError, ValueError):
            raise ParamValueError(Param("backoff", value, spelled="backoff"),
                                  f" must be (first, cap) with 0 <= first <= cap, not {value!r}") from None
        return cls(first, cap, jitter)

    def delay(self, retry: int) -> float:
        """Seconds before retry number ``retry`` (0 for the first retry)."""
        plain = min(self.first * 2.0 ** min(retry, 64), self.cap)
        return plain * (1.0 - self.jitter * self._random.random())

    async def sleep(self, retry: int, *, until: trio.Event | None = None) -> None:
        """Wait ``delay(retry)`` seconds, or less when ``until`` is set first."""
        with trio.move_on_after(self.delay(retry)):
            if until is None:
                await trio.sleep_forever()
            await until.wait()

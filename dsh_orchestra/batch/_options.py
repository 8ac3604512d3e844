"""BatchOptions: how to run a batch; BatchUsageError: a batch that cannot start as asked."""

from __future__ import annotations

import math
import os
from typing import Any

import attrs
from attrs import validators as v


class BatchUsageError(ValueError):
    """The batch cannot start as asked (for example: results exist and ``resume`` is False)."""


def _count(minimum: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{attribute.name} must be an integer >= {minimum}, not {value!r}")

    return check


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds (finite), not {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name} must be a finite number >= 0, not {value!r}")


@attrs.frozen(kw_only=True)
class BatchOptions:
    """How to run a batch (see ``run_batch``).

    ``runtimes`` and ``concurrency`` size the default (local pool) executor; ``timeout``
    bounds each attempt's session work; ``retries`` more attempts for retryable failures,
    after ``retry_backoff`` seconds doubling each time (at most ``retry_backoff_max``,
    jittered by up to ``retry_jitter`` of the pause, downward).
    """

    runtimes: int = attrs.field(default=1, validator=_count(1))
    concurrency: int | None = attrs.field(default=None, validator=v.optional(_count(1)))
    timeout: float | None = attrs.field(default=None, validator=v.optional(_seconds))
    retries: int = attrs.field(default=2, validator=_count(0))
    retry_backoff: float = attrs.field(default=0.5, validator=_non_negative)
    retry_backoff_max: float = attrs.field(default=30.0, validator=_non_negative)
    retry_jitter: float = attrs.field(default=0.1, validator=_non_negative)
    resume: bool = False
    shard: tuple[int, int] | None = None
    policy: Any = None
    answerer: Any = None
    audit: str | os.PathLike[str] | None = None
    summary: str | os.PathLike[str] | None = None
    progress: str = "auto"
    transcripts: str | os.PathLike[str] | None = None  # a directory: per-item notifications (see _transcripts)

    def __attrs_post_init__(self) -> None:
        if self.retry_jitter > 1:
            raise ValueError(f"retry_jitter must be a fraction between 0 and 1, not {self.retry_jitter!r}")

    @property
    def in_flight(self) -> int:
        """Items in flight at once on the local pool."""
        return self.concurrency or self.runtimes * 4

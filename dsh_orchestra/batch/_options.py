"""BatchOptions: how to run a batch; BatchUsageError: a batch that cannot start as asked."""

from __future__ import annotations

import os
from typing import Any, Sequence

import attrs
from attrs import validators as v

from .._params import Check, Param, ParamError, integer, non_negative, one_of, positive
from ..eval import SCORER_TIMEOUT, SCORER_WORKERS
from ..gateway import DEFAULT_GATEWAY, GatewayOptions
from ..pool import SESSIONS_PER_RUNTIME
from ..runtime import SANDBOX_MODES


class BatchUsageError(ParamError, ValueError):
    """The batch cannot start as asked (for example: results exist and ``resume`` is False).

    ``.param`` names the parameter at fault (``out``, ``summary``, ``audit``, ``shard``, ...)
    and ``.value`` its value, when the message is about one.
    """


def _count(minimum: int) -> Check:
    return integer(minimum).raising(BatchUsageError)


_seconds = positive("a positive number of seconds (finite)", finite=True).raising(BatchUsageError)
_non_negative = non_negative().raising(BatchUsageError)
_mib = positive("a positive number of MiB (finite)", finite=True).raising(BatchUsageError)
_optional_count: Any = v.optional(_count(1))  # Any: the field's default is an int, its type int | None
_optional_seconds: Any = v.optional(_seconds)  # Any: the same, for a float

MAX_SESSIONS_PER_RUNTIME = SESSIONS_PER_RUNTIME
"""Sessions a runtime serves before the batch recycles it (``pool.SESSIONS_PER_RUNTIME``)."""


@attrs.frozen(kw_only=True)
class BatchOptions:
    """How to run a batch (see ``run_batch``).

    ``runtimes`` and ``concurrency`` size the default (local pool) executor; ``timeout``
    bounds each attempt's session work; ``retries`` more attempts for retryable failures,
    after ``retry_backoff`` seconds doubling each time (at most ``retry_backoff_max``,
    jittered by up to ``retry_jitter`` of the pause, downward).

    Evaluation (docs/evaluation.md): ``scorers`` (scorer SPECs), ``scoring`` (a scoring file),
    ``epochs`` sessions per item reduced by ``epoch_reducer``, ``group_by`` a metadata key,
    ``cluster_by`` a metadata key (clustered standard errors), ``seed`` of the bootstrap, ``prices`` (a prices file) for ``cost_usd``, the budgets
    ``max_total_tokens`` / ``max_total_cost``, per-item copies of ``workspace_template``
    (kept with ``keep_workspaces``). ``module:attr`` scorers run in ``scorer_workers`` worker
    processes (0: in this process, unprotected), each call bounded by ``scorer_timeout`` seconds.

    ``sandbox`` (``auto``, ``bwrap``, ``none``; None: the spec's) runs the runtimes under
    bubblewrap: the run's outputs hidden from them, the workspaces writable (docs/runtime.md#sandbox).

    Long runs: a runtime is recycled (no new items; a replacement starts at once; closed once
    its items in flight have finished, none cut or retried) after ``max_sessions_per_runtime``
    sessions (default 500; None: never) or once its process tree's resident memory passes
    ``max_runtime_rss_mib`` MiB (default None: no limit).
    """

    runtimes: int = attrs.field(default=1, validator=_count(1))
    concurrency: int | None = attrs.field(default=None, validator=_optional_count)
    timeout: float | None = attrs.field(default=None, validator=v.optional(_seconds))
    retries: int = attrs.field(default=2, validator=_count(0))
    retry_backoff: float = attrs.field(default=0.5, validator=_non_negative)
    retry_backoff_max: float = attrs.field(default=30.0, validator=_non_negative)
    retry_jitter: float = attrs.field(default=0.1, validator=_non_negative)
    resume: bool = False
    retry_errors: bool = False  # with resume: run again the items whose line is an error (the file rewritten without them)
    shard: tuple[int, int] | None = None
    policy: Any = None
    answerer: Any = None
    audit: str | os.PathLike[str] | None = None
    summary: str | os.PathLike[str] | None = None
    progress: str = "auto"
    transcripts: str | os.PathLike[str] | None = None  # a directory: per-item notifications (see _transcripts)
    # evaluation (docs/evaluation.md): scorers are SPEC strings, eval.ScorerSpec or callables
    scorers: Sequence[Any] = attrs.field(default=(), converter=tuple)
    scoring: str | os.PathLike[str] | None = None
    epochs: int = attrs.field(default=1, validator=_count(1))
    epoch_reducer: str = "mean"
    group_by: str | None = None
    cluster_by: str | None = None  # a metadata key: clustered stderr and ci95 (docs/evaluation.md)
    seed: int = attrs.field(default=0, validator=_count(0))
    prices: Any = None  # a prices TOML path, or an eval.Prices
    max_total_tokens: int | None = attrs.field(default=None, validator=v.optional(_count(0)))
    max_total_cost: float | None = attrs.field(default=None, validator=v.optional(_non_negative))
    # user code in a box (docs/evaluation.md): module:attr scorers in worker processes (0: in-process)
    scorer_workers: int = attrs.field(default=SCORER_WORKERS, validator=_count(0))
    scorer_timeout: float | None = attrs.field(default=SCORER_TIMEOUT, validator=_optional_seconds)
    workspace_template: str | os.PathLike[str] | None = None
    keep_workspaces: bool = False
    argv: Sequence[str] | None = None  # recorded in the summary's run object (default sys.argv)
    approval_relay: str | None = None  # auto | on | off; None: the spec's (auto by default; docs/approvals.md)
    # long runs: recycle a runtime after this many sessions / past this resident memory (None: never)
    max_sessions_per_runtime: int | None = attrs.field(default=MAX_SESSIONS_PER_RUNTIME, validator=_optional_count)
    max_runtime_rss_mib: float | None = attrs.field(default=None, validator=v.optional(_mib))
    # the real dsh's model calls go through one model gateway of the run (docs/gateway.md); None: none
    gateway: GatewayOptions | None = DEFAULT_GATEWAY
    # the runtimes under bubblewrap (docs/runtime.md#sandbox): auto | bwrap | none; None: the spec's (auto by default)
    sandbox: str | None = attrs.field(default=None, validator=v.optional(one_of(*SANDBOX_MODES).raising(BatchUsageError)))
    control: bool = False  # listen on a control socket (pause, resume, stop, status, concurrency: `dsh-orchestra ctl`)

    def __attrs_post_init__(self) -> None:
        if self.retry_errors and not self.resume:
            raise BatchUsageError(Param("retry_errors", spelled="retry_errors=True"), " needs ", Param("resume", spelled="resume=True"),
                                  " (it runs again the error lines of an existing results file)")
        if self.retry_jitter > 1:
            raise BatchUsageError(Param("retry_jitter", self.retry_jitter, spelled="retry_jitter"),
                                  f" must be a fraction between 0 and 1, not {self.retry_jitter!r}")

    @property
    def in_flight(self) -> int:
        """Items in flight at once on the local pool."""
        return self.concurrency or self.runtimes * 4

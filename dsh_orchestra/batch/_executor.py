"""The executor protocol: where ``run_batch`` runs item attempts, and what an attempt returns.

``run_batch`` owns everything about a batch but placement: the dataset, resume, sharding, the
results file, retries and their backoff, progress, the tally and the summary (and, as they
come, scoring, epochs and budgets). An **executor** only runs one attempt at one item
somewhere and says how many it can run at once:

* ``Executor.open(spec, options)`` starts whatever runs the items (a pool of runtimes, Ray
  actors, SLURM jobs, ...) and yields an ``AttemptRunner`` once it can take work; leaving
  the block stops it and leaves nothing behind.
* ``AttemptRunner.capacity`` is how many attempts the run loop keeps in flight at once;
  ``AttemptRunner.attempt(item, session_id)`` runs one attempt (the per-item timeout applies
  to the session's work, not to waiting for a place) and returns an ``Attempt``: plain,
  picklable data, whatever machine it ran on. When the runtime the attempt ran on died under
  it, ``Attempt.crash`` says which runtime incarnation and how (the run loop finds the item
  that kills runtimes from that); ``attempt(..., alone=True)`` runs an attempt with no other
  session on its runtime.
* ``SharedPlaces`` (optional members of a runner): the ``lease`` judge scorers share the
  batch's runtimes through, and the runtime's ``server_version`` for the summary. The run
  loop asks for these, never which executor it has.

Two executors ship: ``PoolExecutor`` (a local ``RuntimePool``, the default) and
``dsh_orchestra.scale.RayExecutor``. docs/architecture.md explains how to write another.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ..pool import Lease
from ..runtime import RuntimeSpec
from ..session import TurnResult
from ._dataset import BatchItem

if TYPE_CHECKING:
    from ._options import BatchOptions


def error_of(exc: BaseException) -> dict[str, str]:
    """The ``error`` object of a result line for ``exc``: its type name and message."""
    return {"type": type(exc).__name__, "message": str(exc)}


@attrs.frozen(kw_only=True)
class RuntimeCrash:
    """The runtime an attempt ran on died under it (exited on its own: a crash, a kill, OOM).

    ``runtime``: an identifier of that runtime incarnation (a restarted runtime gets a new
    one), the same for every attempt that was in flight on it. ``exit_status``: the process's
    exit status (negative: the signal), when known. ``stderr_tail``: its last stderr lines,
    secrets redacted.
    """

    runtime: str
    exit_status: int | None = None
    stderr_tail: str = ""

    def describe(self) -> str:
        """``exit status 3`` (or ``exit status unknown``), then the stderr tail when there is one."""
        status = "unknown" if self.exit_status is None else str(self.exit_status)
        text = f"exit status {status}"
        return f"{text}; stderr tail:\n{self.stderr_tail}" if self.stderr_tail else text


@attrs.frozen(kw_only=True)
class Attempt:
    """What one attempt at one item produced.

    ``turn``: the item's whole ``TurnResult`` (final response, finish reason, events,
    subagents, approvals) when the prompt got a turn, whether it finished ok or not; None when
    the attempt failed before (then ``error`` says why). ``retryable``: another attempt may
    succeed (``dsh_orchestra.pool.retryable`` of the failure). ``lost``: the place the attempt
    ran on went away (a Ray actor died): not the item's fault, so it runs again elsewhere
    without spending a retry, at most ``AttemptRunner.max_lost`` times. ``crash``: the
    runtime died under the attempt (set with ``error``); the run loop decides from it whether
    the item is the one killing runtimes or a neighbour of it. ``model``: the session's model
    calls as the ``model`` object of a result line, and ``cut``: the budget refused one of its
    calls (no line), when a model gateway elsewhere counted them (Ray's node gateways).
    """

    session_id: str
    turn: TurnResult | None = None
    error: dict[str, str] | None = None
    retryable: bool = False
    lost: bool = False
    crash: RuntimeCrash | None = None
    model: dict[str, Any] | None = None
    cut: bool = False

    @classmethod
    def failed(cls, session_id: str, exc: BaseException, *, retryable: bool, lost: bool = False,
               crash: RuntimeCrash | None = None) -> Attempt:
        """An attempt that ended in ``exc`` before its turn settled."""
        return cls(session_id=session_id, error=error_of(exc), retryable=retryable, lost=lost, crash=crash)


@runtime_checkable
class AttemptRunner(Protocol):
    """An open executor: runs attempts, ``capacity`` of them at once."""

    @property
    def capacity(self) -> int:
        """Attempts the run loop keeps in flight at once (>= 1)."""
        ...

    @property
    def max_lost(self) -> int:
        """How often one item may lose its place (``Attempt.lost``) before it is given up."""
        ...

    async def attempt(self, item: BatchItem, session_id: str, *, workspace: str | None = None,
                      alone: bool = False) -> Attempt:
        """Run one attempt at ``item`` in the session ``session_id`` (with ``workspace`` as the
        session's working directory, when given); never raises for the item's own failures
        (they are in the Attempt). With ``alone``, no other session runs on the runtime while
        this one does (the run loop asks for it for an item suspected of killing runtimes;
        it is passed only then). Raises only when the executor itself can go on no more (the
        run stops; results so far are kept)."""
        ...

    def pending_approvals(self) -> int:
        """Approval requests waiting for a decision right now (for the progress display)."""
        ...


@runtime_checkable
class SharedPlaces(Protocol):
    """What an ``AttemptRunner`` may also offer the run loop (optional: a runner without these
    members counts as having None; the shipped runners have both)."""

    @property
    def lease(self) -> Lease | None:
        """Hold a place on one of this executor's runtimes for a block, in this process (what
        judge scorers without a runtime of their own run on), or None when it has none here
        (they then open their own)."""
        ...

    @property
    def server_version(self) -> str | None:
        """The runtime's ``serverInfo.version`` for the summary, when known here."""
        ...


def executor_in_process(executor: Executor) -> bool:
    """``executor.in_process``: its runtimes run in this process (the local pool), so what the
    run loop opens here for them (the model gateway) reaches them. False for an executor
    without it (Ray actors open their own)."""
    return bool(getattr(executor, "in_process", False))


def runner_lease(runner: AttemptRunner) -> Lease | None:
    """``runner.lease`` (``SharedPlaces``), or None for a runner without it."""
    lease: Lease | None = getattr(runner, "lease", None)
    return lease


def runner_server_version(runner: AttemptRunner) -> str | None:
    """``runner.server_version`` (``SharedPlaces``), or None for a runner without it."""
    version: str | None = getattr(runner, "server_version", None)
    return version


@runtime_checkable
class Executor(Protocol):
    """Where a batch's attempts run (see the module docstring)."""

    def open(self, spec: RuntimeSpec | None, options: BatchOptions) -> AbstractAsyncContextManager[AttemptRunner]:
        """Start running; yield an AttemptRunner once work can be taken; stop on exit.

        ``spec`` None means the simulator (each executor decides where its DSH_HOME lives).
        Raises before yielding when nothing could start (e.g. RuntimeStartError, bare), and
        ``DatasetError``/``BatchUsageError`` free: it is called after the dataset was checked.
        """
        ...


def runner_extra(runner: AttemptRunner, name: str) -> Any:
    """``runner.<name>`` for what a remote runner may hold of the run's model gateways
    (``call_budget``, ``model``, ``model_totals``, ``tag``, ``judge_gateway``: Ray's node
    gateways and the driver's for the judges), or None."""
    return getattr(runner, name, None)

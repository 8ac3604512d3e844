"""WorkflowOptions: how to run a workflow, shared by ``run_workflow`` and ``open_workflow``.

Owns: the options record and the deprecated keyword path onto it. Must not know about
datasets or the CLI.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any

import attrs

from ..approvals import AuditLog
from ..runtime import RuntimeSpec
from ._engine import FailurePolicy, Statistics
from ._interrupts import Answers

from ..gateway import DEFAULT_GATEWAY, GatewayOptions

if TYPE_CHECKING:
    from ..pool import RuntimePool
    from ..session import Runtime


@attrs.frozen(kw_only=True)
class WorkflowOptions:
    """How to run a workflow (see ``run_workflow``); the twin of ``batch.BatchOptions``.

    Runtimes, when the run opens them itself (no target): one from ``spec`` (the simulator
    process when None), or a pool of ``runtimes`` (``spec`` required); ``approvals`` (a
    policy), ``answerer`` and ``audit`` apply to every session; ``approval_relay`` (``auto``,
    ``on``, ``off``; None: the spec's). The run: ``inputs``; ``concurrency`` bounds sessions in
    flight in the workflow, ``runtime_limit`` per runtime; ``failure`` ("fail-fast" or
    "collect"); ``statistics`` collects counters; ``checkpoint`` journals the run, ``resume``
    continues it; ``answers`` answer interrupts. ``gateway``: the real ``dsh``'s model calls
    go through a model gateway (docs/gateway.md; None: none). Checked when the run starts.
    """

    spec: RuntimeSpec | None = None
    runtimes: int = 1
    approvals: Any = None
    answerer: Any = None
    audit: AuditLog | str | os.PathLike[str] | None = None
    approval_relay: str | None = None
    inputs: dict[str, Any] | None = None
    concurrency: int | None = None
    runtime_limit: int | None = None
    failure: FailurePolicy = "fail-fast"
    statistics: Statistics | None = attrs.field(default=None, eq=False)
    checkpoint: str | os.PathLike[str] | None = None
    resume: bool = False
    answers: Answers | None = attrs.field(default=None, eq=False)
    gateway: GatewayOptions | None = DEFAULT_GATEWAY


FIELDS = frozenset(field.name for field in attrs.fields(WorkflowOptions))


def resolve(
    caller: str,
    target: Runtime | RuntimePool | WorkflowOptions | None,
    options: WorkflowOptions | None,
    keywords: dict[str, Any],
) -> tuple[Runtime | RuntimePool | None, WorkflowOptions]:
    """The target and the options of a ``run_workflow``/``open_workflow`` call: ``options``
    may come second in the target's place; the keywords of before 0.x (WorkflowOptions'
    fields) still work, with a DeprecationWarning.

    Raises:
        TypeError: an unknown keyword, or options given twice.
    """
    if isinstance(target, WorkflowOptions):
        if options is not None:
            raise TypeError(f"{caller}() got WorkflowOptions twice")
        target, options = None, target
    options = options if options is not None else WorkflowOptions()
    if keywords:
        unknown = sorted(set(keywords) - FIELDS)
        if unknown:
            raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
        warnings.warn(
            f"{caller}(workflow, {', '.join(f'{k}=...' for k in keywords)}) is deprecated: "
            f"pass {caller}(workflow, WorkflowOptions({', '.join(f'{k}=...' for k in keywords)}))",
            DeprecationWarning, stacklevel=3,
        )
        options = attrs.evolve(options, **keywords)
    return target, options

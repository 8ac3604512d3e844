"""Opening the places a job runs on: one runtime, or a pool, from a spec, for a workflow, a
batch or a judge scorer.

Owns: what every job does before its runtimes start (the simulator in a scratch DSH_HOME when
no spec is given, the approval relay setting, the configuration warnings reported once for the
job rather than once per runtime, the audit log opened from a path) and the ``Places`` handed
to the job. Must not know about workflows, datasets or scorers.
"""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Callable, Iterator

import attrs

from .._scratch import scratch_dir
from ..approvals import AuditLog
from ..gateway import DEFAULT_GATEWAY, GatewayOptions
from ..runtime import RuntimeSpec
from ..session import Runtime, configuration_warnings, open_runtime, report_warnings, warnings_reported
from ._pool import RuntimePool, open_pool

Lease = Callable[[], AbstractAsyncContextManager[Runtime]]
"""``places.lease`` (``RuntimePool.lease`` for a pool): hold a place on a runtime for a block."""


@contextmanager
def job_warnings(spec: RuntimeSpec | None, *, approvals: bool, answerer: bool) -> Iterator[list[str]]:
    """Report what ``spec``'s runtimes cannot honour of the job's configuration once (see
    ``session.configuration_warnings``), yield those messages, and keep every runtime opened
    inside the block from reporting them again."""
    warnings = configuration_warnings(spec, approvals=approvals, answerer=answerer)
    report_warnings(warnings)
    with warnings_reported():
        yield warnings


@attrs.frozen
class Places:
    """Where a job's sessions run: ``runtime`` (one, unpooled) or ``pool``; exactly one is set."""

    runtime: Runtime | None = None
    pool: RuntimePool | None = None

    @property
    def target(self) -> Runtime | RuntimePool:
        """The runtime or the pool (what ``run_workflow`` takes as its target)."""
        found = self.pool if self.pool is not None else self.runtime
        assert found is not None
        return found

    def lease(self) -> AbstractAsyncContextManager[Runtime]:
        """Hold a place on a runtime for a block (``RuntimePool.lease``; the runtime itself when unpooled)."""
        if self.pool is not None:
            return self.pool.lease()
        return _held(self.target)


@asynccontextmanager
async def _held(runtime: Any) -> AsyncIterator[Runtime]:
    yield runtime


@asynccontextmanager
async def open_places(
    spec: RuntimeSpec | None = None,
    runtimes: int = 1,
    *,
    pooled: bool = True,
    approvals: Any = None,
    answerer: Any = None,
    audit: AuditLog | str | os.PathLike[str] | None = None,
    approval_relay: str | None = None,
    scratch: str = "places",
    gateway: GatewayOptions | None = DEFAULT_GATEWAY,
    **pool_options: Any,
) -> AsyncIterator[Places]:
    """Open ``runtimes`` runtimes from ``spec`` for one job; yield its ``Places``; close them on exit.

    ``spec`` None: the simulator, as processes in a scratch DSH_HOME (named after ``scratch``,
    lower-case letters)
    removed on exit. ``pooled=False`` with one runtime opens it alone (``open_runtime``: no
    pool, no restarts); otherwise a ``RuntimePool`` of ``runtimes`` (``pool_options``: the
    pool's own, e.g. ``max_sessions``, ``max_sessions_per_runtime``, ``max_runtime_rss_mib``).
    ``approvals`` (a policy), ``answerer`` and ``audit`` (an AuditLog or a path, opened here
    with the spec's secrets) apply to every session; ``approval_relay`` overrides the spec's.
    Configuration a runtime cannot honour is warned about once for the job (``job_warnings``).
    ``gateway``: the real ``dsh``'s model calls go through one model gateway (None: none).

    Raises:
        RuntimeStartError: no runtime could be started (raised bare).
    """
    if not pooled and runtimes == 1:
        async with open_runtime(spec, approvals=approvals, answerer=answerer, audit=audit,
                                approval_relay=approval_relay, gateway=gateway) as runtime:
            yield Places(runtime=runtime)
        return
    with ExitStack() as stack:
        if spec is None:
            home = stack.enter_context(scratch_dir(scratch))
            spec = RuntimeSpec.simulator(dsh_home=home, cwd=os.getcwd())
        if approval_relay is not None:
            spec = spec.evolve(approval_relay=approval_relay)
        stack.enter_context(job_warnings(spec, approvals=approvals is not None, answerer=answerer is not None))
        if audit is not None and not isinstance(audit, AuditLog):
            audit = stack.enter_context(AuditLog(audit, secrets=spec.secrets()))
        async with open_pool(spec, runtimes, approvals=approvals, answerer=answerer, audit=audit, gateway=gateway,
                             **pool_options) as pool:
            yield Places(pool=pool)

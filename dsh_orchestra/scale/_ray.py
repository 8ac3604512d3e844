"""run_batch_ray: one batch over Ray actors, with the results of a single machine.

Owns: connecting to Ray (or starting a local instance), one supervisor per actor slot
(start, feed, replace a lost actor with backoff, give up after repeated failed starts),
feeding items to actors and waiting for their lines from trio (an ObjectRef's future wakes
the trio task; no thread per item), closing every actor. The results file, resume, the
summary and the progress display are the batch's own (``dsh_orchestra.batch``), written by
this driver only.

Ray is imported lazily (``ray`` is an optional extra): importing this module does not.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

import attrs
import orjson
import trio

from ..batch import (
    BatchItem,
    BatchOptions,
    BatchSummary,
    BatchUsageError,
    Counters,
    Progress,
    ResultsWriter,
    Tally,
    iter_dataset,
    prepare_resume,
)
from ..protocol import OrchestraError
from ..runtime import RuntimeSpec
from ._dispatch import Ledger
from ._host import HostConfig, HostInfo
from ._local import LOCAL_OBJECT_STORE, LocalRay, LocalRayError, supported as supported_local
from ._portable import RemoteError, split_spec

log = logging.getLogger("dsh_orchestra.scale")

RAY_MISSING = "--ray needs Ray: pip install 'dsh-orchestra[ray]' (or pip install 'ray>=2.9')"
CONTROL_CALLS = 3
"""Threads of an actor kept free for start/pid/statistics/close next to its items."""


class ScaleError(OrchestraError):
    """The Ray run cannot go on (every actor slot kept failing to start); results so far are kept."""


@attrs.frozen(kw_only=True)
class RayPlan:
    """How a run spreads over Ray (see ``run_batch_ray``); derived, validated, logged."""

    actors: int
    runtimes_per_actor: int
    per_actor: int  # items in flight per actor
    num_cpus: float
    start_timeout: float
    max_start_failures: int
    backoff: tuple[float, float]

    def __attrs_post_init__(self) -> None:
        for name in ("actors", "runtimes_per_actor", "per_actor", "max_start_failures"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
        if not self.start_timeout > 0:
            raise ValueError(f"start_timeout must be a positive number of seconds, not {self.start_timeout!r}")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise BatchUsageError(RAY_MISSING) from exc
    return ray


@attrs.define
class RayConnection:
    """What ``connect`` did: ``initialized`` (it called ``ray.init``), ``local`` (the local head it started)."""

    initialized: bool = False
    local: LocalRay | None = None

    def close(self) -> None:
        """Disconnect (if ``connect`` connected) and stop the local head (if it started one). Idempotent."""
        if self.initialized:
            self.initialized = False
            _import_ray().shutdown()
        if self.local is not None:
            local, self.local = self.local, None
            local.stop()


def connect(address: str | None, *, num_cpus: int | None = None, **init_options: Any) -> RayConnection:
    """Make sure this process is a Ray driver.

    ``address`` None or ``""``: start a new local instance for this process (``LocalRay``:
    it cannot outlive it; ``num_cpus`` CPUs, default this machine's); anything else
    (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``) connects to that cluster. Already connected
    (``ray.init`` was called before): nothing changes. ``close()`` the result when done.

    Raises:
        BatchUsageError: Ray is not installed, or it cannot start or connect (the message says why).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return RayConnection()
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    connection = RayConnection()
    if not address:
        if supported_local():
            connection.local = LocalRay(num_cpus=num_cpus or os.cpu_count() or 1)
            try:
                options["address"] = connection.local.start()
            except LocalRayError as exc:
                connection.close()
                raise BatchUsageError(f"--ray: cannot start a local Ray instance: {exc}") from exc
            _share_auth_mode(connection.local.auth_mode)
        else:
            options.update(address="local", include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE)
            if num_cpus is not None:
                options["num_cpus"] = num_cpus
    else:
        options["address"] = address
    options.update(init_options)
    try:
        ray.init(**options)
    except Exception as exc:  # a bad address, no cluster there, a version mismatch: say which
        connection.close()
        where = f"connect to Ray at {address!r}" if address else "connect to the local Ray instance"
        raise BatchUsageError(f"--ray: cannot {where}: {type(exc).__name__}: {exc}") from exc
    connection.initialized = True
    return connection


def _share_auth_mode(mode: str) -> None:
    """Make this driver use the local head's token-auth mode.

    With ``RAY_AUTH_MODE`` unset, ``ray start`` enables token auth when a token exists but
    ``ray.init(address=...)`` does not, and cannot connect. Ray's own local ``ray.init()``
    resolves this in-process (this same helper); older Ray has no token auth at all.
    """
    if mode != "token" or os.environ.get("RAY_AUTH_MODE"):
        return  # the head inherited this process's explicit mode (or has no auth)
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


async def _wait_ref(ref: Any) -> Any:
    """The value of an ObjectRef, awaited from trio (raises what ``ray.get`` would raise)."""
    token = trio.lowlevel.current_trio_token()
    ready = trio.Event()

    def wake(_: object) -> None:
        try:
            token.run_sync_soon(ready.set)
        except trio.RunFinishedError:  # the driver already left trio: nobody waits any more
            pass

    future = ref.future()
    future.add_done_callback(wake)
    await ready.wait()
    return future.result()


@attrs.define
class _Slot:
    index: int
    generation: int = 0
    failures: int = 0  # consecutive failed starts
    started: int = 0
    lost: str | None = None  # why the current actor is considered lost
    infos: list[HostInfo] = attrs.field(factory=list)


class _Driver:
    """The slots of one run and what they share."""

    def __init__(self, ray: Any, ledger: Ledger, plan: RayPlan, configs: list[HostConfig], *,
                 secrets_box: list[Any], actor_options: dict[str, Any], run_id: str) -> None:
        from ._actor import HostActor

        self.ray = ray
        self.ledger = ledger
        self.plan = plan
        self.configs = configs
        self.secrets_box = secrets_box
        self.actor_options = actor_options
        self.run_id = run_id
        self.remote_class = ray.remote(HostActor)
        self.slots = [_Slot(i) for i in range(plan.actors)]
        self.first_failures: list[BaseException] = []
        self.fatal: BaseException | None = None
        self.replacements = 0
        self.any_started = False
        self.cancel_scope = trio.CancelScope()
        self.live: dict[str, Any] = {}  # actor name -> handle, until killed

    # ---- errors ------------------------------------------------------------------------

    def _classify(self, exc: BaseException) -> tuple[str, BaseException | None]:
        """("lost", None): the actor is gone or its host failed (hand its items out again);
        ("error", cause): something else went wrong inside it (stop the run)."""
        exceptions = self.ray.exceptions
        if isinstance(exc, exceptions.RayTaskError):
            cause = getattr(exc, "cause", None)
            if isinstance(cause, RemoteError) and cause.type_name == "HostFailedError":
                return "lost", None
            return "error", cause.local() if isinstance(cause, RemoteError) else (cause or exc)
        if isinstance(exc, exceptions.RayError):
            return "lost", None
        return "error", exc

    # ---- one slot ------------------------------------------------------------------------

    async def run_slot(self, slot: _Slot) -> None:
        delay = self.plan.backoff[0]
        while not self.ledger.finished.is_set():
            slot.generation += 1
            name = f"dsh-orchestra-{self.run_id}-{slot.index}.{slot.generation}"
            actor = self.remote_class.options(
                name=name, max_concurrency=self.plan.per_actor + CONTROL_CALLS, max_restarts=0,
                **self.actor_options,
            ).remote(self.configs[slot.index])
            self.live[name] = actor
            info: HostInfo | None = None
            failure: BaseException | None = None
            began = time.monotonic()
            with trio.move_on_after(self.plan.start_timeout) as timer:
                async with trio.open_nursery() as race:  # stop waiting for a start once all is written
                    race.start_soon(_cancel_when_set, self.ledger.finished, race.cancel_scope)
                    try:
                        info = await _wait_ref(actor.start.remote(self.secrets_box))
                    except Exception as exc:
                        failure = exc
                    race.cancel_scope.cancel()
            if timer.cancelled_caught:
                failure = ScaleError(
                    f"actor {name} did not start within {self.plan.start_timeout:g} s (not enough resources in "
                    f"the cluster for {self.plan.num_cpus:g} CPU per actor, or a slow runtime_env?)"
                )
            if info is None:
                self._kill(name)
                if failure is None:  # everything was written while it started
                    return
                kind, cause = self._classify(failure)
                reason = cause if cause is not None else failure
                slot.failures += 1
                log.warning("actor %s failed to start (%d in a row): %s", name, slot.failures, reason)
                if slot.started == 0 and slot.failures == 1:
                    self.first_failures.append(reason)
                    if not self.any_started and len(self.first_failures) == len(self.slots):
                        first = self.first_failures[0]  # nothing ever started: the first error, bare
                        self.fatal = first if isinstance(first, OrchestraError) else ScaleError(
                            f"no Ray actor could start: {type(first).__name__}: {first}")
                        self.cancel_scope.cancel(reason="no Ray actor could start")
                        return
                if slot.failures >= self.plan.max_start_failures:
                    log.error("actor slot %d gave up after %d failed starts", slot.index, slot.failures)
                    self._maybe_all_gave_up(reason)
                    return
                with trio.move_on_after(delay):
                    await self.ledger.finished.wait()
                delay = min(delay * 2, self.plan.backoff[1])
                continue
            slot.failures = 0
            slot.started += 1
            slot.infos.append(info)
            self.any_started = True
            delay = self.plan.backoff[0]
            log.info("actor %s started on %s (node %s, pid %d) in %.2f s (runtimes %.2f s)", name, info.hostname,
                     info.node_id[:12], info.pid, time.monotonic() - began, info.startup_s)
            slot.lost = None
            async with trio.open_nursery() as feeders:
                for _ in range(self.plan.per_actor):
                    feeders.start_soon(self._feed, slot, actor, feeders.cancel_scope)
            if slot.lost is None:
                await self._close(name)
                return
            log.warning("actor %s lost (%s); starting a replacement", name, slot.lost)
            self.replacements += 1
            self._kill(name)

    def _maybe_all_gave_up(self, reason: BaseException) -> None:
        if all(s.failures >= self.plan.max_start_failures for s in self.slots) and not self.ledger.finished.is_set():
            self.fatal = ScaleError(f"every Ray actor slot failed {self.plan.max_start_failures} starts in a row "
                                    f"(last: {reason}); results written so far are kept: run again with --resume")
            self.cancel_scope.cancel(reason="every actor slot gave up")

    async def _feed(self, slot: _Slot, actor: Any, scope: trio.CancelScope) -> None:
        while True:
            item = await self.ledger.next_item()
            if item is None:
                return
            line: dict[str, Any] | None = None
            try:
                line, _ = await _wait_ref(actor.process.remote(item))
            except Exception as exc:
                kind, cause = self._classify(exc)
                if kind == "error":
                    raise cause if cause is not None else exc
                slot.lost = slot.lost or f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                scope.cancel(reason="the actor was lost")
            finally:
                if line is None:  # lost with its actor, or cancelled because its actor was lost
                    self.ledger.take_back(item, slot.lost or "the run was cancelled")
            if line is None:
                return
            self.ledger.finish(item, line)

    def _kill(self, name: str) -> None:
        actor = self.live.pop(name, None)
        if actor is None:
            return
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception as exc:  # already gone
            log.debug("ray.kill(%s): %s", name, exc)

    def kill_all(self) -> None:
        """End every actor still alive (a run that stops part-way leaves none behind)."""
        for name in list(self.live):
            self._kill(name)

    async def _close(self, name: str) -> None:
        """Close the actor's pool (its runtimes are reaped), then end the actor."""
        actor = self.live.get(name)
        if actor is None:
            return
        with trio.move_on_after(30):
            try:
                await _wait_ref(actor.close.remote())
            except Exception as exc:
                log.warning("closing actor %s failed: %s", name, exc)
        self._kill(name)


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _plan(options: BatchOptions, actors: int, runtimes_per_actor: int | None, num_cpus: float,
          start_timeout: float, max_start_failures: int, backoff: tuple[float, float]) -> RayPlan:
    runtimes = options.runtimes if runtimes_per_actor is None else runtimes_per_actor
    if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
        raise ValueError(f"actors must be an integer >= 1, not {actors!r}")
    if isinstance(runtimes, bool) or not isinstance(runtimes, int) or runtimes < 1:
        raise ValueError(f"runtimes_per_actor must be an integer >= 1, not {runtimes!r}")
    total = options.concurrency or actors * runtimes * 4
    return RayPlan(actors=actors, runtimes_per_actor=runtimes, per_actor=max(1, math.ceil(total / actors)),
                   num_cpus=num_cpus, start_timeout=start_timeout, max_start_failures=max_start_failures,
                   backoff=backoff)


def _check_portable(ray: Any, options: BatchOptions) -> None:
    """Policies and answerers travel to the actors pickled (cloudpickle): refuse those that cannot."""
    for name, value in (("--policy", options.policy), ("--answerer", options.answerer)):
        if value is None:
            continue
        try:
            ray.cloudpickle.dumps(value)
        except Exception as exc:
            raise BatchUsageError(
                f"{name} {getattr(value, 'source', '') or value!r} cannot be sent to Ray actors ({type(exc).__name__}: "
                f"{exc}); use a TOML file or a module:attr that the actors can import"
            ) from exc


async def run_batch_ray(
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    spec: RuntimeSpec | None = None,
    options: BatchOptions | None = None,
    *,
    address: str | None = None,
    actors: int = 2,
    runtimes_per_actor: int | None = None,
    temp_home: bool | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    num_cpus: float = 1.0,
    actor_options: Mapping[str, Any] | None = None,
    start_timeout: float = 600.0,
    max_start_failures: int = 5,
    max_handouts: int = 3,
    backoff: tuple[float, float] = (0.5, 15.0),
    init_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> BatchSummary:
    """``run_batch`` over Ray actors: the same results file, resume, shards and summary.

    Each of ``actors`` Ray actors hosts a runtime pool of ``runtimes_per_actor`` runtimes
    (default ``options.runtimes``) on a trio thread of its own and runs the items this driver
    hands it; only this driver writes the results. ``options.concurrency`` is the number of
    items in flight in total (default 4 per runtime), split evenly over the actors.

    ``address``: None or ``""`` starts a local Ray instance for the run (and stops it after);
    ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` connects to a cluster. A process that
    already called ``ray.init`` keeps its connection (``address`` is ignored).
    ``temp_home``: each actor uses a private temporary DSH_HOME (default: only when ``spec``
    is None); otherwise ``spec.dsh_home``, with ``{actor}`` replaced by the actor's slot.
    ``runtime_env`` is merged into each actor's (``pip``, ``working_dir``, ``env_vars``...);
    ``num_cpus`` and ``actor_options`` (``resources``, ``scheduling_strategy``, ...; default
    strategy ``"SPREAD"``) place the actors. An actor that is lost is replaced (backoff
    ``backoff``); its items go out again, at most ``max_handouts`` times each.

    Raises:
        DatasetError, BatchUsageError: as ``run_batch`` (nothing ran); BatchUsageError also
            when Ray is not installed or a policy cannot be pickled.
        RuntimeStartError: no actor could start its runtimes (raised bare; nothing ran).
        ScaleError: every actor slot kept failing to start; the results so far are kept.
    """
    options = options or BatchOptions(**kwargs)
    plan = _plan(options, actors, runtimes_per_actor, num_cpus, start_timeout, max_start_failures, backoff)
    out = Path(out)
    check, tally, done = prepare_resume(dataset, out, options)
    total = len(check.ids)
    resumed = len(done)
    todo = total - resumed
    if spec is None:
        spec = RuntimeSpec.simulator(dsh_home=tempfile.gettempdir(), cwd=os.getcwd())  # the home is per actor
        temp_home = True if temp_home is None else temp_home
    try:
        actor_spec, settings, secrets = split_spec(spec, temp_home=bool(temp_home))
    except ValueError as exc:
        raise BatchUsageError(str(exc)) from exc
    counters = Counters(total=total, done=resumed, resumed=resumed)
    progress = Progress(counters, mode=options.progress, clock=trio.current_time)
    started = trio.current_time()
    ray = _import_ray() if todo else None
    connection = RayConnection()
    try:
        with ResultsWriter(out) as writer:
            if todo:
                _check_portable(ray, options)
                connection = connect(address, num_cpus=max(os.cpu_count() or 1, math.ceil(plan.actors * plan.num_cpus)),
                                     **dict(init_options or {}))
                await _drive(ray, check, done, writer, tally, counters, progress, options, plan, actor_spec,
                             settings, secrets, runtime_env, actor_options, todo, max_handouts)
    finally:
        progress.close()
        connection.close()
    duration = trio.current_time() - started
    summary = tally.summary(total=total, resumed=resumed, processed=todo, duration_s=duration, retries=counters.retries)
    if options.summary is not None:
        Path(options.summary).write_bytes(orjson.dumps(summary.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    return summary


async def _drive(ray: Any, check: Any, done: set[str], writer: ResultsWriter, tally: Tally, counters: Counters,
                 progress: Progress, options: BatchOptions, plan: RayPlan, actor_spec: Any, settings: dict[str, str],
                 secrets: dict[str, str], runtime_env: Mapping[str, Any] | None,
                 actor_options: Mapping[str, Any] | None, todo: int, max_handouts: int) -> None:
    env = dict(runtime_env or {})
    env["env_vars"] = {**settings, **dict(env.get("env_vars") or {})}
    chosen: dict[str, Any] = {"num_cpus": plan.num_cpus, "scheduling_strategy": "SPREAD", "runtime_env": env}
    chosen.update(actor_options or {})
    configs = [HostConfig.for_items(actor_spec, options, slot=i, runtimes=plan.runtimes_per_actor, in_flight=plan.per_actor)
               for i in range(plan.actors)]
    secrets_box = [ray.put(secrets)]  # in the object store; actors fetch it (never inlined in arguments)
    ledger = Ledger(iter_dataset(check, skip=done), writer, tally, counters, progress, todo=todo,
                    max_handouts=max_handouts)
    driver = _Driver(ray, ledger, plan, configs, secrets_box=secrets_box, actor_options=chosen,
                     run_id=uuid.uuid4().hex[:8])
    log.info("ray run %s: %d actor(s) x %d runtime(s), %d item(s) in flight per actor, %d item(s) to run",
             driver.run_id, plan.actors, plan.runtimes_per_actor, plan.per_actor, todo)
    try:
        with driver.cancel_scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(progress.run)
                async with trio.open_nursery() as slots:
                    for slot in driver.slots:
                        slots.start_soon(driver.run_slot, slot)
                nursery.cancel_scope.cancel(reason="every actor slot finished")
    finally:
        driver.kill_all()
    if driver.fatal is not None:
        raise driver.fatal
    if ledger.written < todo:
        raise ScaleError(f"{todo - ledger.written} item(s) were not run; results written so far are kept: "
                         "run again with --resume")

"""RayExecutor: a batch's item attempts on Ray actors, each hosting a trio loop with a pool.

Holds only what is Ray: connecting to Ray (or starting a local instance), hosting the pools
in actors (``_actor``/``_host``), placing attempts on the actor with the most free places,
supervising the actors (one ``Supervisor`` per actor slot: start, replace a lost actor after
a backoff, give up after repeated failed starts), and closing every actor. The results file,
resume, retries, the summary and the progress display are the batch's own run loop
(``dsh_orchestra.batch.run_batch``); an attempt whose actor was lost comes back as
``Attempt(lost=True)`` and the run loop runs it again.

Ray is imported lazily (``ray`` is an optional extra): importing this module does not.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Mapping, Sequence

import attrs
import trio

from .._params import Param, ParamValueError, integer, positive
from ..batch import Attempt, BatchItem, BatchOptions, BatchSummary, BatchUsageError, run_batch
from ..pool import Backoff, Ended, Supervisor, serving
from ..protocol import OrchestraError
from ..runtime import RuntimeSpec
from ._host import HostConfig, HostInfo
from ._local import LOCAL_OBJECT_STORE, LocalRay, LocalRayError, supported as supported_local
from ..gateway import Gateway, GatewayOptions, api_key_of, needs_gateway, upstream_of
from ..pool import Lease
from ._gateways import NodeGatewayConfig, NodeGateways, NodeGatewayGone, host_secrets
from ._judges import DriverJudges
from ._portable import API_KEY, RemoteError, split_spec
from ._refs import wait_ref as _wait_ref

log = logging.getLogger("dsh_orchestra.scale")

RAY_MISSING = "Ray is not installed: pip install 'dsh-orchestra[ray]' (or pip install 'ray>=2.9')"
CONTROL_CALLS = 3
"""Threads of an actor kept free for start/pid/statistics/close next to its items."""
CLOSE_WAIT = 30.0
"""Seconds an actor gets to close its pool (its runtimes reaped) before it is killed."""


class ScaleError(OrchestraError):
    """The Ray run cannot go on (every actor slot kept failing to start); results so far are kept."""


_at_least_one = integer(1)
_positive = positive()


def _resources_per_slot(value: Any) -> tuple[dict[str, float], ...] | None:
    """``actor_resources`` as a tuple of plain dicts (one mapping alone: every actor's)."""
    if value is None:
        return None
    entries = [value] if isinstance(value, Mapping) else value
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence) or not entries:
        raise ParamValueError(Param("actor_resources", value, spelled="actor_resources"),
                              f" must be a mapping or a non-empty list of mappings, not {value!r}")
    out = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not all(
                isinstance(k, str) and k and not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0
                for k, v in entry.items()):
            raise ParamValueError(Param("actor_resources", value, spelled="actor_resources"),
                                  f": each entry must map resource names to positive numbers, not {entry!r}")
        out.append({k: float(v) for k, v in entry.items()})
    return tuple(out)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BatchUsageError(RAY_MISSING) from None
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
                raise BatchUsageError(f"cannot start a local Ray instance: {exc}") from exc
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
        problem = f"{type(exc).__name__}: {exc}"
        if address:
            raise BatchUsageError("cannot connect to Ray at ", Param("address", address), f": {problem}") from exc
        raise BatchUsageError(f"cannot connect to the local Ray instance: {problem}") from exc
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


@attrs.define
class _Slot:
    index: int
    supervisor: Supervisor
    actor: Any = None  # the started actor taking attempts, or None
    name: str = ""
    generation: int = 0
    in_flight: int = 0
    retire: trio.Event = attrs.field(factory=trio.Event)
    lost: str | None = None  # why the current actor is considered lost
    infos: list[HostInfo] = attrs.field(factory=list)


class RayRunner:
    """An open ``RayExecutor``: the actor slots of one run, and attempts placed on them."""

    def __init__(self, ray: Any, executor: RayExecutor, configs: list[HostConfig], per_actor: int, *,
                 secrets_box: list[Any], actor_options: dict[str, Any], run_id: str | None = None,
                 gateways: NodeGateways | None = None) -> None:
        """``actor_options``: Ray's options of every actor; slot ``i`` adds ``executor.actor_resources``'s
        entry ``i`` (cycled) to their ``resources``. ``gateways``: the node gateways the hosts'
        runtimes use (None: no gateway)."""
        from ._actor import HostActor

        self.ray = ray
        self.executor = executor
        self.configs = configs
        self.per_actor = per_actor
        self.secrets_box = secrets_box
        self.actor_options = actor_options
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.gateways = gateways
        self.remote_class = ray.remote(HostActor)
        self.stop = trio.Event()
        backoff = Backoff.of(executor.backoff, jitter=0.1)
        self.slots = [_Slot(i, Supervisor(backoff, self.stop, max_failures=executor.max_start_failures,
                                          on_change=self._notify)) for i in range(len(configs))]
        self.first_failures: list[BaseException] = []
        self.replacements = 0
        self.live: dict[str, Any] = {}  # actor name -> handle, until killed
        self.model_totals: dict[str, Any] | None = None  # the node gateways' totals, once the run ended
        self.judges: DriverJudges | None = None  # the judges' runtime on the driver, through a gateway of the run
        self.epochs: dict[str, int] | None = None  # session -> epoch, when the node gateways' cache keys need it
        self._changed = trio.Event()

    @property
    def model(self) -> Any:
        """The run's model concurrency (``RunModelLimit``: ``ctl concurrency`` sets the quota
        coordinator's total), or None without node gateways."""
        return self.gateways.model if self.gateways is not None else None

    @property
    def call_budget(self) -> Any:
        """The run's budget as the node gateways last told it (``NodeBudget``), or None without one."""
        return self.gateways.call_budget if self.gateways is not None else None

    @property
    def capacity(self) -> int:
        return self.per_actor * len(self.slots)

    @property
    def max_lost(self) -> int:
        return self.executor.max_handouts

    def pending_approvals(self) -> int:
        return 0  # decided inside the actors; not polled over Ray

    @property
    def lease(self) -> Lease | None:
        """The judges' place: a runtime on the driver whose calls go through a gateway of the
        run (``DriverJudges``), or None without node gateways (judges then open their own here)."""
        return self.judges.lease if self.judges is not None else None

    @property
    def judge_gateway(self) -> Gateway | None:
        """The gateway of the judges' calls once they started (the run loop reads its refused calls)."""
        return self.judges.gateway if self.judges is not None else None

    def tag(self, session_id: str, *, epoch: int) -> None:
        """The item's epoch of ``session_id``'s coming attempt: its node's gateway keys the cache
        of its calls by it (``Gateway.tag``), as the local gateway does."""
        if self.epochs is not None:
            self.epochs[session_id] = epoch

    @property
    def server_version(self) -> None:
        """None: the actors greet their runtimes on their own nodes."""
        return None

    def slot_options(self, index: int) -> dict[str, Any]:
        """Ray's options for the actor of slot ``index``: every actor's, with the slot's own resources."""
        options = dict(self.actor_options)
        per_slot = self.executor.actor_resources
        if per_slot:
            options["resources"] = {**dict(options.get("resources") or {}), **per_slot[index % len(per_slot)]}
        return options

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ---- attempts ----------------------------------------------------------------------

    async def attempt(self, item: BatchItem, session_id: str, *, workspace: str | None = None,
                      alone: bool = False) -> Attempt:
        slot = await self._acquire()
        actor = slot.actor
        node = slot.infos[-1].node_id if slot.infos else ""
        epoch = self.epochs.pop(session_id, None) if self.epochs is not None else None
        try:
            if epoch is not None and self.gateways is not None:  # before the session's first model call
                await self.gateways.tag(node, session_id, epoch)
            # ``alone``: a runtime of the actor's pool to itself
            attempt: Attempt = await _wait_ref(actor.process.remote(item, session_id, workspace, alone))
            if self.gateways is not None:  # the session's model calls, as its node's gateway counted them
                taken = await self.gateways.take(node, session_id)
                if taken is not None:
                    attempt = attrs.evolve(attempt, model=taken["model"], cut=taken["cut"])
            return attempt
        except Exception as exc:
            kind, cause = self._classify(exc)
            if kind == "error":
                if cause is None:
                    raise
                raise cause from cause.__cause__  # the actor's own error, bare: not chained to Ray's wrapper
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if slot.actor is actor:
                slot.lost = slot.lost or reason
                slot.retire.set()
            return Attempt.failed(session_id, _Lost(reason), retryable=False, lost=True)
        finally:
            slot.in_flight -= 1
            self._notify()

    async def _acquire(self) -> _Slot:
        """A place on the started actor with the most free places (wait for one)."""
        while True:
            if self.stop.is_set():
                raise ScaleError("the Ray executor is closing")
            best: _Slot | None = None
            for slot in self.slots:
                if slot.actor is not None and slot.lost is None and slot.in_flight < self.per_actor and (
                        best is None or slot.in_flight < best.in_flight):
                    best = slot
            if best is not None:
                best.in_flight += 1
                return best
            await self._changed.wait()

    def _classify(self, exc: BaseException) -> tuple[str, BaseException | None]:
        """("lost", None): the actor is gone or its host failed, or its node's gateway is gone
        (run the item again); ("error", cause): something else went wrong inside it (stop the run)."""
        if isinstance(exc, (NodeGatewayGone, trio.TooSlowError)):
            return "lost", None
        exceptions = self.ray.exceptions
        if isinstance(exc, exceptions.RayTaskError):
            cause = getattr(exc, "cause", None)
            if isinstance(cause, RemoteError) and cause.type_name == "HostFailedError":
                return "lost", None
            return "error", cause.local() if isinstance(cause, RemoteError) else (cause or exc)
        if isinstance(exc, exceptions.RayError):
            return "lost", None
        return "error", exc

    # ---- the actor slots -----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[RayRunner] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise every slot until ``stop``; started() once one actor is ready.

        Raises:
            OrchestraError: no actor could start (the first start error, bare, e.g.
                RuntimeStartError); or later every slot gave up (ScaleError).
        """
        started = False
        failure: OrchestraError | None = None

        async def supervise(slot: _Slot) -> None:
            if await slot.supervisor.run(lambda: self._run_slot(slot)) is Ended.FAILED:
                log.error("actor slot %d gave up after %d failed starts", slot.index, slot.supervisor.failures)

        async with trio.open_nursery() as nursery:
            for slot in self.slots:
                nursery.start_soon(supervise, slot)
            if self.gateways is not None:
                nursery.start_soon(self._follow_model)
            while not self.stop.is_set():
                if not started and any(s.actor is not None for s in self.slots):
                    started = True
                    task_status.started(self)
                if not started and len(self.first_failures) == len(self.slots):
                    first = self.first_failures[0]  # nothing ever started: the first error, bare
                    failure = first if isinstance(first, OrchestraError) else ScaleError(
                        f"no Ray actor could start: {type(first).__name__}: {first}")
                elif all(s.supervisor.gave_up for s in self.slots):
                    failure = ScaleError(f"every Ray actor slot failed {self.executor.max_start_failures} starts "
                                         "in a row; results written so far are kept: run again to resume")
                if failure is not None:
                    self.close()
                    nursery.cancel_scope.cancel(reason=str(failure))
                    break
                await self._changed.wait()
        if failure is not None:
            raise failure

    async def _follow_model(self) -> None:
        """Keep the run's model limit (``ctl status``) current until the run stops."""
        assert self.gateways is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_when_set, self.stop, nursery.cancel_scope)
            await self.gateways.model.follow()

    async def _run_slot(self, slot: _Slot) -> Ended:
        """Start the slot's actor and serve until it is lost or the run ends."""
        plan = self.executor
        slot.generation += 1
        slot.retire = trio.Event()
        slot.lost = None
        name = f"dsh-orchestra-{self.run_id}-{slot.index}.{slot.generation}"
        actor = self.remote_class.options(
            name=name, max_concurrency=self.per_actor + CONTROL_CALLS, max_restarts=0, **self.slot_options(slot.index),
        ).remote(self.configs[slot.index])
        self.live[name] = actor
        began = time.monotonic()
        failure: BaseException | None = None
        info: HostInfo | None = None
        with trio.move_on_after(plan.start_timeout) as timer:
            async with trio.open_nursery() as race:  # stop waiting for a start once the run is over
                race.start_soon(_cancel_when_set, self.stop, race.cancel_scope)
                try:
                    route_box = None
                    if self.gateways is not None:  # the model gateway of the node the actor landed on
                        route_box = await self.gateways.route_box(await _wait_ref(actor.node_id.remote()))
                    info = await _wait_ref(actor.start.remote(self.secrets_box, route_box))
                except Exception as exc:
                    failure = exc
                race.cancel_scope.cancel()
        if timer.cancelled_caught:
            wanted = self.slot_options(slot.index).get("resources")
            failure = ScaleError(
                f"actor {name} did not start within {plan.start_timeout:g} s (not enough resources in "
                f"the cluster for {plan.num_cpus:g} CPU per actor{f' and {wanted}' if wanted else ''}, "
                "or a slow runtime_env?)"
            )
        if info is None:
            self._kill(name)
            if failure is None or self.stop.is_set():
                return Ended.DONE
            kind, cause = self._classify(failure)
            reason = cause if cause is not None else failure
            log.warning("actor %s failed to start (%d in a row): %s", name, slot.supervisor.failures + 1, reason)
            if not slot.supervisor.ready_once and slot.supervisor.failures == 0:
                self.first_failures.append(reason)
            return Ended.FAILED
        slot.supervisor.ready()
        slot.infos.append(info)
        log.info("actor %s started on %s (node %s, pid %d) in %.2f s (runtimes %.2f s)", name, info.hostname,
                 info.node_id[:12], info.pid, time.monotonic() - began, info.startup_s)
        slot.actor, slot.name = actor, name
        self._notify()
        try:
            await slot.retire.wait()
        finally:
            slot.actor = None
            self._notify()
        if slot.lost is None:  # the run is over: close the pool (its runtimes reaped), then end the actor
            await self._close(name)
            return Ended.DONE
        log.warning("actor %s lost (%s); starting a replacement", name, slot.lost)
        self.replacements += 1
        self._kill(name)
        return Ended.CRASHED

    def close(self) -> None:
        """Stop taking attempts; every slot closes its actor."""
        self.stop.set()
        for slot in self.slots:
            slot.retire.set()
        self._notify()

    def _kill(self, name: str) -> None:
        actor = self.live.pop(name, None)
        if actor is None:
            return
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception as exc:  # already gone
            log.debug("ray.kill(%s): %s", name, exc)

    def kill_all(self) -> None:
        """End every actor still alive (a run that stops part-way leaves none behind), the node
        gateways and the quota coordinator last."""
        for name in list(self.live):
            self._kill(name)
        if self.gateways is not None:
            self.gateways.close()

    async def _close(self, name: str) -> None:
        actor = self.live.get(name)
        if actor is None:
            return
        with trio.move_on_after(CLOSE_WAIT):
            try:
                await _wait_ref(actor.close.remote())
            except Exception as exc:
                log.warning("closing actor %s failed: %s", name, exc)
        self._kill(name)


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


class _Lost(OrchestraError):
    """The actor running an attempt went away (its ``error.type`` in a result line: ActorLostError)."""


def _check_portable(ray: Any, options: BatchOptions) -> None:
    """Policies and answerers travel to the actors pickled (cloudpickle): refuse those that cannot."""
    for name, value in (("policy", options.policy), ("answerer", options.answerer)):
        if value is None:
            continue
        try:
            ray.cloudpickle.dumps(value)
        except Exception as exc:
            raise BatchUsageError(
                Param(name, getattr(value, "source", "") or value), f" cannot be sent to Ray actors ({type(exc).__name__}: "
                f"{exc}); use a TOML file or a module:attr that the actors can import"
            ) from exc


@attrs.frozen(kw_only=True)
class RayExecutor:
    """Run a batch's attempts on ``actors`` Ray actors, each hosting a runtime pool of
    ``runtimes_per_actor`` runtimes (default ``options.runtimes``) on a trio thread of its own.

    ``options.concurrency`` is the number of items in flight in total (default 4 per runtime),
    split evenly over the actors. ``address``: None or ``""`` starts a local Ray instance for
    the run (and stops it after); ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` connects
    to a cluster; a process that already called ``ray.init`` keeps its connection.
    ``temp_home``: each actor uses a private temporary DSH_HOME (default: only when the spec
    is None); otherwise ``spec.dsh_home``, with ``{actor}`` replaced by the actor's slot.
    ``runtime_env`` is merged into each actor's (``pip``, ``working_dir``, ``env_vars``...);
    ``num_cpus`` and ``actor_options`` (``resources``, ``scheduling_strategy``, ...; default
    strategy ``"SPREAD"``) place the actors; ``actor_resources`` gives actor slot ``i`` the
    custom resources ``actor_resources[i % len]`` (one mapping: every actor's), e.g.
    ``[{"node_a": 1}, {"node_b": 1}]`` puts the actors on the nodes that offer them, in turn. A lost actor is replaced after ``backoff``; its
    items run again, at most ``max_handouts`` times each. The audit log and transcripts are
    written by the actors, on their nodes.
    """

    address: str | None = None
    actors: int = attrs.field(default=2, validator=_at_least_one)
    runtimes_per_actor: int | None = attrs.field(default=None, validator=attrs.validators.optional(_at_least_one))
    temp_home: bool | None = None
    runtime_env: Mapping[str, Any] | None = None
    num_cpus: float = attrs.field(default=1.0, validator=_positive)
    actor_options: Mapping[str, Any] | None = None
    actor_resources: tuple[dict[str, float], ...] | None = attrs.field(default=None, converter=_resources_per_slot)
    start_timeout: float = attrs.field(default=600.0, validator=_positive)
    max_start_failures: int = attrs.field(default=5, validator=_at_least_one)
    max_handouts: int = attrs.field(default=3, validator=_at_least_one)
    backoff: Backoff | tuple[float, float] = (0.5, 15.0)
    init_options: Mapping[str, Any] | None = None

    @asynccontextmanager
    async def open(self, spec: RuntimeSpec | None, options: BatchOptions) -> AsyncIterator[RayRunner]:
        """Connect to Ray, start the actors; yield once one actor is ready; close every actor.

        Raises:
            BatchUsageError: Ray is not installed or cannot connect, a policy cannot be
                pickled, or the spec cannot run in another process.
            RuntimeStartError: no actor could start its runtimes (raised bare).
        """
        runtimes = options.runtimes if self.runtimes_per_actor is None else self.runtimes_per_actor
        per_actor = max(1, math.ceil((options.concurrency or self.actors * runtimes * 4) / self.actors))
        temp_home = self.temp_home
        if spec is None:
            spec = RuntimeSpec.simulator(dsh_home=tempfile.gettempdir(), cwd=os.getcwd())  # the home is per actor
            temp_home = True if temp_home is None else temp_home
        judge_spec = spec  # the judges' runtime on the driver, routed through a gateway of the run
        gateway = options.gateway if needs_gateway(spec) else None  # one per node, not one per actor
        try:
            actor_spec, settings, secrets = split_spec(spec, temp_home=bool(temp_home))
        except ValueError as exc:
            raise BatchUsageError(str(exc)) from exc
        api_key = None
        if gateway is not None:  # the key goes to the node gateways only
            api_key = api_key_of(spec, gateway)
            names = {"DEEPSEEK_API_KEY", gateway.api_key_env}
            secrets = host_secrets(secrets, api_key, names, API_KEY)
            settings = host_secrets(settings, api_key, names, API_KEY)
            actor_spec = attrs.evolve(actor_spec, secret_names=tuple(n for n in actor_spec.secret_names if n in secrets),
                                      env_names=tuple(n for n in actor_spec.env_names if n in settings))
        ray = _import_ray()
        _check_portable(ray, options)
        connection = connect(self.address, num_cpus=max(os.cpu_count() or 1, math.ceil(self.actors * self.num_cpus)),
                             **dict(self.init_options or {}))
        try:
            env = dict(self.runtime_env or {})
            env["env_vars"] = {**settings, **dict(env.get("env_vars") or {})}
            chosen: dict[str, Any] = {"num_cpus": self.num_cpus, "scheduling_strategy": "SPREAD", "runtime_env": env}
            chosen.update(self.actor_options or {})
            configs = [HostConfig.for_items(actor_spec, options, slot=i, runtimes=runtimes, in_flight=per_actor)
                       for i in range(self.actors)]
            run_id = uuid.uuid4().hex[:8]
            gateways = None
            if gateway is not None:
                config = NodeGatewayConfig(options=_absolute_cache(gateway), upstream=upstream_of(spec, gateway))
                gateways = NodeGateways(ray, run_id, config, api_key, actor_options=chosen)
            runner = RayRunner(ray, self, configs, per_actor, secrets_box=[ray.put(secrets)], actor_options=chosen,
                               run_id=run_id, gateways=gateways)
            if gateways is not None:
                runner.judges = DriverJudges(judge_spec, gateways, api_key,
                                             max_sessions_per_runtime=options.max_sessions_per_runtime,
                                             max_runtime_rss_mib=options.max_runtime_rss_mib)
                if gateways.config.options.cache is not None and gateways.config.options.cache_epochs != "shared":
                    runner.epochs = {}  # the cache key holds the item's epoch: each node gateway is told it
            log.info("ray run %s: %d actor(s) x %d runtime(s), %d item(s) in flight per actor", runner.run_id,
                     self.actors, runtimes, per_actor)

            async def close() -> None:
                runner.close()

            try:
                async with _judges_served(runner.judges), serving(runner.run, close):
                    yield runner
                if gateways is not None:  # the run ended: its model totals, before the gateways go
                    with trio.move_on_after(60):
                        runner.model_totals = await gateways.summary()
            finally:
                runner.kill_all()
        finally:
            connection.close()


@asynccontextmanager
async def _judges_served(judges: DriverJudges | None) -> AsyncIterator[None]:
    """Serve the judges' runtime for the block (when the run has node gateways)."""
    if judges is None:
        yield
        return
    async with judges.open():
        yield


def _absolute_cache(options: GatewayOptions) -> GatewayOptions:
    """``options`` with its cache directory made absolute here, on the driver."""
    if options.cache is None:
        return options
    return attrs.evolve(options, cache=os.path.abspath(options.cache))


async def run_batch_ray(
    dataset: Any,
    out: Any,
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
    actor_resources: Sequence[Mapping[str, float]] | Mapping[str, float] | None = None,
    start_timeout: float = 600.0,
    max_start_failures: int = 5,
    max_handouts: int = 3,
    backoff: tuple[float, float] = (0.5, 15.0),
    init_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> BatchSummary:
    """``run_batch(dataset, out, spec, options, executor=RayExecutor(...))``: kept for callers
    of earlier releases; the keyword arguments are ``RayExecutor``'s."""
    executor = RayExecutor(
        address=address, actors=actors, runtimes_per_actor=runtimes_per_actor, temp_home=temp_home,
        runtime_env=runtime_env, num_cpus=num_cpus, actor_options=actor_options, actor_resources=actor_resources,
        start_timeout=start_timeout,
        max_start_failures=max_start_failures, max_handouts=max_handouts, backoff=backoff, init_options=init_options,
    )
    return await run_batch(dataset, out, spec, options, executor=executor, **kwargs)

"""One model gateway per Ray node, and one quota coordinator for the run.

Owns: the node gateway actor (``NodeGatewayActor``: a ``Gateway`` on a trio thread of its own,
pinned to its node with ``NodeAffinitySchedulingStrategy``; the runtimes of every host actor on
that node use it as ``DEEPSEEK_BASE_URL`` over loopback), the quota coordinator actor
(``QuotaCoordinator``: the ``QuotaLedger`` of the run; each node gateway reports to it every
``REPORT_EVERY`` seconds and takes its share back), and the driver's side (``NodeGateways``:
start a node's gateway the first time a host actor lands there, hand the host its route,
kill them all with the run).

Security (docs/gateway.md): the real key reaches only the node gateways (through the object
store, never an actor's creation arguments or environment); the host actors get the per-run
token and the gateway's loopback URL (also through the object store), and their runtimes'
environments carry the token, never the key.

Ray is imported lazily: importing this module does not.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import attrs
import trio

from .._logging import register_secrets
from ..gateway import (
    AdaptiveLimiter, CallStats, Gateway, GatewayOptions, QuotaGrant, QuotaLedger, QuotaReport, ResponseCache, follow_quota, routed_to,
)
from ..runtime import RuntimeSpec
from ._budget import BudgetLedger, NodeBudget, RunSpending, Spending, follow_budget, share_views
from ._refs import wait_ref

log = logging.getLogger("dsh_orchestra.scale")

START_WAIT = 120.0
"""Seconds a node gateway gets to start (its actor scheduled, its port bound, its first share)."""
TAKE_WAIT = 30.0
"""Seconds the driver waits for a node gateway's or the coordinator's answer (counts, status)."""
TRACE_MAX = 20_000
"""Grants the coordinator remembers for ``snapshot()`` (tests and the summary)."""


class NodeGatewayGone(RuntimeError):
    """A node's model gateway is not there (any more): its host's attempts cannot call the model."""


@attrs.frozen(kw_only=True)
class GatewayRoute:
    """Where a host actor's runtimes send their model calls: a node gateway's URL and token."""

    base_url: str
    token: str = attrs.field(repr=False)
    api_key_env: str = "DEEPSEEK_API_KEY"
    node_id: str = ""


@attrs.frozen(kw_only=True)
class NodeGatewayConfig:
    """What a node gateway needs but the key: the options and the provider's URL."""

    options: GatewayOptions
    upstream: str


class QuotaCoordinator:
    """The Ray actor holding the run's ``QuotaLedger`` and ``BudgetLedger`` (calls are serialised:
    one at a time)."""

    def __init__(self, concurrency: int | str, rate: float | None, budget: BudgetLedger | None = None) -> None:
        self.ledger = QuotaLedger(concurrency, rate=rate)
        self.budget = budget
        self.started = time.monotonic()
        self.trace: list[tuple[float, str, int, float | None, int]] = []  # (t, node, limit, rate, in_flight)
        self.in_flight: dict[str, int] = {}  # each node's calls in flight, as last reported

    def report(self, name: str, report: QuotaReport) -> QuotaGrant:
        """A node gateway's report; its grant."""
        now = time.monotonic() - self.started
        self.in_flight[name] = report.in_flight
        grant = self.ledger.report(name, report, now)
        if len(self.trace) < TRACE_MAX:
            self.trace.append((round(now, 4), name, grant.limit, grant.rate, report.in_flight))
        return grant

    def leave(self, name: str) -> None:
        """A node gateway closed: its share is freed."""
        self.ledger.leave(name)
        self.in_flight.pop(name, None)

    def spend(self, name: str, spending: Spending) -> RunSpending | None:
        """A node gateway's spending; the run's (None: the run has no budget)."""
        return self.budget.report(name, spending) if self.budget is not None else None

    def set_total(self, total: int, adaptive: bool | None = None) -> dict[str, Any]:
        """Set the run's concurrency limit (``QuotaLedger.set_total``; ``adaptive=False``: fixed
        there, as ``ctl concurrency`` does); the ``status()`` after it.

        Raises:
            ValueError: ``total`` below 1.
        """
        self.ledger.set_total(total, time.monotonic() - self.started)
        if adaptive is not None:
            self.ledger.adaptive = adaptive
        return self.status()

    def status(self) -> dict[str, Any]:
        """The run's concurrency limit now, whether it adapts, and the calls in flight on every node."""
        self.ledger.expire(time.monotonic() - self.started)
        live = self.ledger.members
        return {"total": self.ledger.total, "adaptive": self.ledger.adaptive,
                "in_flight": sum(n for name, n in self.in_flight.items() if name in live)}

    def snapshot(self) -> dict[str, Any]:
        """The ledger now: total, rate, window, learned gap, members' grants and bounds, the limit's history, the grants so far."""
        ledger = self.ledger
        return {"total": ledger.total, "rate": ledger.rate, "window": ledger.window, "adaptive": ledger.adaptive, "gap": ledger.gap,
                "members": {name: {"limit": m.limit, "reserved": m.reserved, "demand": m.demand,
                                   "reserved_rate": m.reserved_rate} for name, m in ledger.members.items()},
                "history": list(ledger.history), "trace": list(self.trace),
                "budget": None if self.budget is None else {
                    "members": {name: attrs.asdict(s) for name, s in self.budget.members.items()},
                    "reached_with": self.budget.reached_with}}


class NodeGatewayActor:
    """The Ray actor serving one node's model gateway (a threaded actor; trio on its own thread)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._gateway: Gateway | None = None
        self._failure: BaseException | None = None

    def ping(self) -> str:
        """This actor's node id (it answers: it is alive)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def start(self, config: NodeGatewayConfig, key_box: list[Any], coordinator: Any) -> list[Any]:
        """Start the gateway; return ``[ref]``: a reference to its ``GatewayRoute`` in the object store.

        Raises:
            RuntimeError: it could not start (the message says why).
        """
        import ray

        if self._thread is None:
            api_key = ray.get(key_box[0]) if key_box else None
            self._thread = threading.Thread(target=self._main, args=(config, api_key, coordinator),
                                            name="dsh-orchestra-node-gateway", daemon=True)
            self._thread.start()
        self._ready.wait()
        if self._gateway is None or self._failure is not None:
            raise RuntimeError(f"the node gateway did not start: {type(self._failure).__name__}: {self._failure}")
        gateway = self._gateway
        route = GatewayRoute(base_url=gateway.base_url, token=gateway.token, api_key_env=config.options.api_key_env,
                             node_id=self.ping())
        return [ray.put(route)]

    def stats(self) -> dict[str, Any]:
        """``gateway_stats`` of this node's gateway ({} before it started)."""
        gateway = self._gateway
        return {} if gateway is None else gateway_stats(gateway, self.ping())

    def tag(self, session_id: str, epoch: int) -> None:
        """Key the cache of ``session_id``'s calls (its subagents' too) by ``epoch``
        (``Gateway.tag``: what the local run loop does before each attempt)."""
        token = self._token
        if token is None:
            raise RuntimeError(f"the node gateway {self.name} is not serving")
        gateway = self._gateway
        assert gateway is not None
        trio.from_thread.run_sync(lambda: gateway.tag(session_id, epoch=epoch), trio_token=token)

    def take(self, session_id: str) -> dict[str, Any]:
        """A finished item's session: its ``model`` record (``Gateway.take``: its subagents' calls
        included, forgotten here), ``cut`` (the budget refused one of its calls) and ``run`` (the
        run's budget spending as this node knows it; None without a budget)."""
        token = self._token
        if token is None:
            return {"model": None, "cut": False, "run": None}
        return trio.from_thread.run(self._take, session_id, trio_token=token)

    async def _take(self, session_id: str) -> dict[str, Any]:
        gateway = self._gateway
        assert gateway is not None
        await gateway.settled(session_id)
        budget = gateway.budget
        cut = session_id in budget.cut
        run = RunSpending(tokens=budget.run_tokens, cost=budget.run_cost, reached=budget.reached) \
            if isinstance(budget, NodeBudget) else None
        return {"model": gateway.take(session_id).to_json(), "cut": cut, "run": run}

    def close(self) -> None:
        """Stop the gateway (it leaves the coordinator first). Idempotent."""
        token, stop = self._token, self._stop
        if token is not None and stop is not None:
            try:
                trio.from_thread.run_sync(stop.set, trio_token=token)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(30)

    def _main(self, config: NodeGatewayConfig, api_key: str | None, coordinator: Any) -> None:
        try:
            trio.run(self._serve, config, api_key, coordinator)
        except BaseException as exc:  # reported to start(); the thread ends
            self._failure = exc
            log.warning("node gateway %s stopped: %s: %s", self.name, type(exc).__name__, exc)
        finally:
            self._token = None
            self._ready.set()

    async def _serve(self, config: NodeGatewayConfig, api_key: str | None, coordinator: Any) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._gateway = await nursery.start(serve_gateway, self.name, config, api_key, coordinator)
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()


def gateway_stats(gateway: Gateway, node: str) -> dict[str, Any]:
    """A gateway's counters and its limiter: peak in flight, the limit (its share) over time;
    ``counts``: its run totals as raw ``CallStats`` fields (summed over the gateways by the
    driver); ``spending``: its own budget spending (None without a budget)."""
    limiter = gateway.limiter
    start = limiter.history[0][0]
    budget = gateway.budget
    return {"node": node, "peak_in_flight": limiter.peak_in_flight, "limit": limiter.limit,
            "rate": limiter.rate, "successes": limiter.successes, "limited": limiter.limited,
            "gap": limiter.gap, "shared_gap": limiter.shared_gap,
            "limits": [[round(t - start, 4), limit] for t, limit in limiter.history],
            "totals": gateway.totals.to_json(), "summary": gateway.summary(), "counts": attrs.asdict(gateway.totals),
            "spending": attrs.asdict(budget.spending()) if isinstance(budget, NodeBudget) else None}


async def serve_gateway(name: str, config: NodeGatewayConfig, api_key: str | None, coordinator: Any, *,
                        task_status: trio.TaskStatus[Gateway] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve one member gateway of the run (a node's, or the driver's for its judges) until
    cancelled: its share of the run's quota and, with a budget, the run's budget, both from
    the quota ``coordinator`` (reported to as ``name``); ``task_status.started(gateway)`` once
    it listens. It leaves the coordinator when it ends."""
    options = config.options
    cache = ResponseCache(options.cache) if options.cache is not None else None
    limiter = AdaptiveLimiter(0, adaptive=False, minimum=0, maximum=1_000_000)  # the coordinator sets it
    limiter.learn_pacing = True  # paces after its own 429s at once; the coordinator shares the run's gap
    gateway = Gateway(options, upstream=config.upstream, api_key=api_key, cache=cache, limiter=limiter)
    budget = None
    if gateway.budget.limited:  # the run's budget: this gateway's calls plus the others' (the coordinator sums)
        budget = gateway.budget = NodeBudget(options.max_total_tokens, options.max_total_cost, options.price)
    register_secrets([v for v in (api_key, gateway.token) if v])

    async def spend(spending: Spending) -> RunSpending | None:
        try:
            run: RunSpending | None = await wait_ref(coordinator.spend.remote(name, spending))
        except Exception as exc:  # noqa: BLE001 - unreachable: keep counting here, ask again
            log.warning("model gateway %s: the quota coordinator did not take its spending: %s", name, exc)
            return None
        return run

    async def exchange(report: QuotaReport) -> QuotaGrant | None:
        try:
            grant: QuotaGrant = await wait_ref(coordinator.report.remote(name, report))
        except Exception as exc:  # noqa: BLE001 - the coordinator is unreachable: keep the last share
            log.warning("model gateway %s: the quota coordinator did not answer: %s", name, exc)
            return None
        return grant

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(gateway.run)
            await nursery.start(follow_quota, limiter, exchange)
            if budget is not None:
                await nursery.start(follow_budget, budget, spend)
            task_status.started(gateway)
            await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            with trio.move_on_after(5):  # its share is freed
                try:
                    await wait_ref(coordinator.leave.remote(name))
                except Exception as exc:  # noqa: BLE001 - the coordinator is gone already
                    log.debug("model gateway %s: leaving the quota coordinator: %s", name, exc)
            if cache is not None:
                cache.close()


@attrs.define
class _Node:
    actor: Any
    name: str
    ready: trio.Event = attrs.field(factory=trio.Event)
    route_box: list[Any] | None = None
    failure: BaseException | None = None


class NodeGateways:
    """The driver's side: one node gateway per node a host actor landed on, and the coordinator.

    ``key``: the real key (None: none is sent upstream); it goes to the node gateways through
    the object store. ``actor_options``: Ray options the gateway actors share with the hosts
    (``runtime_env``); their placement is their node's (``NodeAffinitySchedulingStrategy``).
    """

    def __init__(self, ray: Any, run_id: str, config: NodeGatewayConfig, key: str | None, *,
                 actor_options: dict[str, Any]) -> None:
        self.ray = ray
        self.run_id = run_id
        self.config = config
        self.key_box = [ray.put(key)]
        self.actor_options = {k: v for k, v in actor_options.items() if k == "runtime_env"}
        options = config.options
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = _head_node(ray)  # the run ends with the head node anyway
        self.coordinator = ray.remote(QuotaCoordinator).options(
            name=f"dsh-orchestra-{run_id}-quota", num_cpus=0, max_restarts=0, max_concurrency=1,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False), **self.actor_options,
        ).remote(options.model_concurrency, options.model_rate, _budget_ledger(options))
        self.nodes: dict[str, _Node] = {}
        self.model = RunModelLimit(self.coordinator, _first_total(options), adaptive=options.model_concurrency == "auto")
        self.call_budget: NodeBudget | None = None  # the driver's view of the run's budget (as the nodes tell it)
        if options.max_total_tokens is not None or options.max_total_cost is not None:
            self.call_budget = NodeBudget(options.max_total_tokens, options.max_total_cost, options.price)
        self.judges_name = f"dsh-orchestra-{run_id}-gw-driver"
        self.judges: Gateway | None = None  # the driver's gateway for the judges' calls, once they started (_judges)

    async def tag(self, node_id: str, session_id: str, epoch: int) -> None:
        """``NodeGatewayActor.tag`` on ``node_id``'s gateway, before the session's first call.

        Raises:
            NodeGatewayGone: that node has no gateway serving (it did not start, or is gone).
            trio.TooSlowError: it did not answer within ``TAKE_WAIT`` seconds.
        """
        node = self.nodes.get(node_id)
        if node is None or node.route_box is None:
            raise NodeGatewayGone(f"node {node_id[:12]} has no model gateway")
        with trio.fail_after(TAKE_WAIT):
            await wait_ref(node.actor.tag.remote(session_id, epoch))

    async def take(self, node_id: str, session_id: str) -> dict[str, Any] | None:
        """``NodeGatewayActor.take`` of ``node_id``'s gateway (None: it is not there or did not
        answer); the run's spending it reports updates :attr:`call_budget`."""
        node = self.nodes.get(node_id)
        if node is None or node.route_box is None:
            return None
        try:
            with trio.fail_after(TAKE_WAIT):
                taken: dict[str, Any] = await wait_ref(node.actor.take.remote(session_id))
        except Exception as exc:  # noqa: BLE001 - the node's gateway is gone (with its counts): no record
            log.info("the model gateway %s did not give session %s's counts: %s", node.name, session_id, exc)
            return None
        run = taken.get("run")
        if self.call_budget is not None and run is not None:
            self.call_budget.learn(run)
            self.sync_judges()
        return taken

    def sync_judges(self) -> None:
        """Tell the judges' gateway (in this process) what the driver knows of the run's budget,
        and the driver what it spent: as on one gateway, a judge's call is refused once an
        item's call reached the budget, and no item starts once a judge's call reached it."""
        judges, view = self.judges, self.call_budget
        if judges is None or view is None or not isinstance(judges.budget, NodeBudget):
            return
        share_views(view, judges.budget)

    async def summary(self) -> dict[str, Any] | None:
        """The run's model totals over every node gateway (the shape of ``Gateway.summary()``):
        counts summed over the gateways still there, the run's concurrency limit over time (the
        coordinator's), the run's budget (None: no node gateway answered)."""
        names = {node.name: node for node in self.nodes.values() if node.route_box is not None}
        stats: dict[str, dict[str, Any]] = {}
        for name, node in names.items():
            try:
                with trio.fail_after(TAKE_WAIT):
                    stats[name] = await wait_ref(node.actor.stats.remote())
            except Exception as exc:  # noqa: BLE001 - gone: its counts with it
                log.info("the model gateway %s did not give its totals: %s", name, exc)
        if self.judges is not None:  # the judges' calls count as on one machine
            stats[self.judges_name] = gateway_stats(self.judges, "driver")
        snapshot = await self.snapshot()
        return model_summary(self.config.options, stats, snapshot, driver=self.judges_name)

    async def route_box(self, node_id: str) -> list[Any]:
        """``[ref]`` to the ``GatewayRoute`` of ``node_id``'s gateway (started here the first time).

        Raises:
            RuntimeError: the node's gateway could not start.
        """
        node = self.nodes.get(node_id)
        if node is not None and node.ready.is_set() and not await self._alive(node):
            self._kill(node)  # it died (its node is gone, or it was killed): a new one
            node = None
        if node is None:
            await self._start(node_id)
            node = self.nodes[node_id]
        await node.ready.wait()
        if node.route_box is None:
            failure = node.failure
            if self.nodes.get(node_id) is node:
                del self.nodes[node_id]
            raise RuntimeError(f"the model gateway of node {node_id[:12]} did not start: {failure}")
        return node.route_box

    async def _start(self, node_id: str) -> None:
        """Start ``node_id``'s gateway (the first host actor there waits for it; the others on its event)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        name = f"dsh-orchestra-{self.run_id}-gw-{node_id[:16]}"
        actor = self.ray.remote(NodeGatewayActor).options(
            name=name, num_cpus=0, max_restarts=0, max_concurrency=8,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False), **self.actor_options,
        ).remote(name)
        node = self.nodes[node_id] = _Node(actor, name)
        try:
            with trio.fail_after(START_WAIT):
                boxed = await wait_ref(actor.start.remote(self.config, self.key_box, self.coordinator))
            node.route_box = list(boxed)
            log.info("model gateway %s started on node %s", name, node_id[:12])
        except Exception as exc:
            node.failure = exc
            self._kill(node)
        finally:  # also when cancelled: whoever waits for this node is told
            if node.route_box is None and node.failure is None:
                node.failure = RuntimeError("its start was cancelled")
                self._kill(node)
            node.ready.set()

    async def _alive(self, node: _Node) -> bool:
        with trio.move_on_after(30):
            try:
                await wait_ref(node.actor.ping.remote())
                return True
            except Exception:  # noqa: BLE001 - any failure: gone
                return False
        return False

    def _kill(self, node: _Node) -> None:
        try:
            self.ray.kill(node.actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - already gone
            log.debug("ray.kill(%s): %s", node.name, exc)

    async def snapshot(self) -> dict[str, Any]:
        """The coordinator's ``snapshot()`` (tests, the benchmark)."""
        snap: dict[str, Any] = await wait_ref(self.coordinator.snapshot.remote())
        return snap

    def close(self) -> None:
        """End every node gateway and the coordinator (nothing of the run's gateways is left)."""
        for node in list(self.nodes.values()):
            try:
                node.actor.close.remote()
            except Exception:  # noqa: BLE001 - gone already
                pass
        for node in self.nodes.values():
            self._kill(node)
        self.nodes.clear()
        try:
            self.ray.kill(self.coordinator, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - gone already
            log.debug("ray.kill(quota coordinator): %s", exc)


class RunModelLimit:
    """The run's model concurrency under Ray, for ``ctl concurrency``/``ctl status`` (what the local
    run's ``AdaptiveLimiter`` offers there): ``set_limit`` sends the coordinator its new total
    (fixed; it shares it out again), ``limit`` and ``in_flight`` are the coordinator's as last heard
    (:meth:`follow` asks every ``every`` seconds)."""

    def __init__(self, coordinator: Any, limit: int, *, adaptive: bool) -> None:
        self.coordinator = coordinator
        self.limit = limit
        self.in_flight = 0
        self.adaptive = adaptive

    def set_limit(self, limit: int, *, adaptive: bool | None = None) -> None:
        """Ask the coordinator for a run limit of ``limit`` (answered in order: later ``follow``
        answers already carry it).

        Raises:
            ValueError: ``limit`` below 1.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"the limit must be an integer >= 1, not {limit!r}")
        self.coordinator.set_total.remote(limit, adaptive)
        self.limit = limit
        if adaptive is not None:
            self.adaptive = adaptive

    def apply(self, status: dict[str, Any]) -> None:
        """The coordinator's ``status()``."""
        self.limit, self.in_flight, self.adaptive = status["total"], status["in_flight"], status["adaptive"]

    async def follow(self, *, every: float = 0.5) -> None:
        """Keep :attr:`limit` and :attr:`in_flight` current until cancelled."""
        while True:
            try:
                with trio.fail_after(TAKE_WAIT):
                    self.apply(await wait_ref(self.coordinator.status.remote()))
            except Exception as exc:  # noqa: BLE001 - not heard this time: keep the last
                log.debug("the quota coordinator's status: %s", exc)
            await trio.sleep(every)


def _first_total(options: GatewayOptions) -> int:
    """The run's model concurrency limit at the start (``auto``: AIMD's start)."""
    return QuotaLedger(options.model_concurrency).total


def _budget_ledger(options: GatewayOptions) -> BudgetLedger | None:
    if options.max_total_tokens is None and options.max_total_cost is None:
        return None
    return BudgetLedger(options.max_total_tokens, options.max_total_cost, priced=options.price is not None)


def model_summary(options: GatewayOptions, stats: dict[str, dict[str, Any]],
                  snapshot: dict[str, Any], *, driver: str | None = None) -> dict[str, Any]:
    """``Gateway.summary()``'s shape for a Ray run: ``stats`` (each node gateway's ``stats()``,
    and the ``driver``'s judges' gateway's, by name) summed, the coordinator's limit history and
    budget (``snapshot``); ``nodes``: how many node gateways gave their counts (the driver's
    gateway not counted)."""
    priced = options.price is not None
    totals = CallStats(cost_usd=0.0 if priced else None, saved_cost_usd=0.0 if priced else None)
    for node in stats.values():
        for field, value in node["counts"].items():
            if value is not None:
                setattr(totals, field, (getattr(totals, field) or 0) + value)
    history = [(0.0, _first_total(options)), *((t, limit) for t, limit in snapshot["history"])]
    start = history[0][0]
    budget = None
    if snapshot.get("budget") is not None and _budget_ledger(options) is not None:
        ledger = _budget_ledger(options)
        assert ledger is not None
        for name, spent in snapshot["budget"]["members"].items():
            ledger.members[name] = Spending(**spent)
        for name, node in stats.items():  # fresher than the last report
            if node.get("spending") is not None:
                ledger.members[name] = Spending(**node["spending"])
        ledger.reached_with = snapshot["budget"]["reached_with"]
        budget = ledger.to_json()
        budget["nodes"] = sum(1 for name in ledger.members if name != driver)
    return {**totals.to_json(), "hit_rate": round(totals.cache_hits / totals.calls, 6) if totals.calls else None,
            "concurrency": {"mode": "auto" if snapshot["adaptive"] else "fixed", "final": snapshot["total"],
                            "min": min(limit for _, limit in history), "max": max(limit for _, limit in history),
                            "changes": [[round(t - start, 3), limit] for t, limit in history[-100:]]},
            "budget": budget, "nodes": sum(1 for name in stats if name != driver)}


def _head_node(ray: Any) -> str:
    """The head node's id (it holds Ray's control store: the run ends with it), else the driver's node."""
    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in (node.get("Resources") or {}):
            return str(node["NodeID"])
    return str(ray.get_runtime_context().get_node_id())


def host_secrets(secrets: dict[str, str], key: str | None, names: set[str], api_key_name: str) -> dict[str, str]:
    """``secrets`` without the key: not the spec's api key (``api_key_name``), not the key
    variables ``names``, not any value holding ``key``."""
    return {name: value for name, value in secrets.items()
            if name != api_key_name and name not in names and not (key and key in value)}


def route_spec(spec: RuntimeSpec, route: GatewayRoute) -> RuntimeSpec:
    """``spec`` sent through the node gateway of ``route`` (its key variables emptied)."""
    return routed_to(spec, base_url=route.base_url, token=route.token, api_key_env=route.api_key_env)

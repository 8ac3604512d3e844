"""Budgets enforced per model call: the batch's side of the gateway's ``CallBudget``.

With a gateway, ``max_total_tokens`` / ``max_total_cost`` are handed to it (with the route's
price) and it refuses every call once they are reached; an item that had a call refused is
cut short: no result line, so ``resume`` runs it again (docs/gateway.md#budgets).
"""

from __future__ import annotations

from typing import Any

import attrs

from ..eval import EvalPlan
from ..gateway import CallBudget, Gateway, GatewayOptions
from ._options import BatchOptions


def budgeted(options: BatchOptions, plan: EvalPlan) -> GatewayOptions | None:
    """``options.gateway`` with the batch's budgets and the route's price (what it did not set)."""
    gateway = options.gateway
    if gateway is None:
        return None
    changes: dict[str, Any] = {}
    if gateway.price is None and plan.prices is not None:
        changes["price"] = plan.price()
    if gateway.max_total_tokens is None and options.max_total_tokens is not None:
        changes["max_total_tokens"] = options.max_total_tokens
    if gateway.max_total_cost is None and options.max_total_cost is not None:
        changes["max_total_cost"] = options.max_total_cost
    return attrs.evolve(gateway, **changes) if changes else gateway


def remote(options: BatchOptions, plan: EvalPlan) -> BatchOptions:
    """``options`` for an executor whose runtimes use gateways of their own (Ray's node
    gateways): its gateway options with the batch's budgets and price (``budgeted``)."""
    gateway = budgeted(options, plan)
    return options if gateway is options.gateway else attrs.evolve(options, gateway=gateway)


def call_budget(gateway: Gateway | None) -> CallBudget | None:
    """The gateway's budget when it holds one (it then replaces the per-item check)."""
    return gateway.budget if gateway is not None and gateway.budget.limited else None


def cut_short(gateway: Gateway | None, session_id: str) -> bool:
    """True when the budget refused a call of ``session_id`` (or of one of its subagents)."""
    return gateway is not None and session_id in gateway.budget.cut


def judges_gateway(gateway: Gateway | None, runner: Any) -> Gateway | None:
    """The gateway the judges' calls go through: the run's, else the runner's ``judge_gateway``
    (Ray: the driver's, once the judges started), else None."""
    if gateway is not None:
        return gateway
    found: Gateway | None = getattr(runner, "judge_gateway", None)
    return found


def refused_calls(gateway: Gateway | None) -> int:
    """How many calls the budget refused so far (0 without a gateway)."""
    return gateway.budget.refused if gateway is not None else 0


def judged_past_budget(gateway: Gateway | None, refused_before: int, fields: dict[str, Any]) -> bool:
    """True when a scorer failed while the budget refused calls during the scoring (a judge's
    call, most likely): the item is cut short like one whose own call was refused."""
    if gateway is None or gateway.budget.refused == refused_before:
        return False
    scores = fields.get("scores")
    return isinstance(scores, dict) and any(isinstance(r, dict) and r.get("error") is True for r in scores.values())

"""One budget for a Ray run: the node gateways' spending summed by the quota coordinator.

Owns ``BudgetLedger`` (the coordinator's side: what each node gateway spent, the run's totals,
the moment the budget was reached and the calls then in flight on all nodes), ``NodeBudget``
(a node gateway's ``CallBudget`` that also counts what the other nodes spent, as of its last
report, and stops forwarding once the run's budget is reached) and ``follow_budget`` (the node
gateway's reporter, every ``REPORT_EVERY`` seconds). Pure logic and trio: no Ray here.

Overshoot bound under Ray (docs/gateway.md#budgets): the calls in flight on every node when the
budget is reached, plus the calls the nodes start within one report interval (a node learns of
the others' spending only when it reports).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import attrs
import trio

from ..gateway import CallBudget

REPORT_EVERY = 0.2
"""Seconds between a node gateway's budget reports to the coordinator."""


@attrs.frozen(kw_only=True)
class Spending:
    """What one node gateway spent so far (its own calls), sent to the coordinator."""

    tokens: int = 0
    cost: float = 0.0
    in_flight: int = 0
    largest_call: int = 0
    refused: int = 0
    cut_sessions: int = 0


@attrs.frozen(kw_only=True)
class RunSpending:
    """The coordinator's answer: the run's totals over every node, and whether the budget is reached."""

    tokens: int
    cost: float
    reached: bool


class BudgetLedger:
    """The run's budget over every node gateway (the quota coordinator holds it)."""

    def __init__(self, max_tokens: int | None, max_cost: float | None, *, priced: bool) -> None:
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.priced = priced
        self.members: dict[str, Spending] = {}
        self.reached_with: dict[str, Any] | None = None

    @property
    def limited(self) -> bool:
        """True when a limit is set."""
        return self.max_tokens is not None or self.max_cost is not None

    def totals(self) -> CallBudget:
        """The run's spending as one ``CallBudget`` (its ``reached``, ``describe``, ``to_json``)."""
        spent = list(self.members.values())
        budget = CallBudget(self.max_tokens, self.max_cost, _PRICED if self.priced else None,
                            tokens=sum(s.tokens for s in spent), cost=sum(s.cost for s in spent),
                            in_flight=sum(s.in_flight for s in spent),
                            largest_call=max((s.largest_call for s in spent), default=0),
                            refused=sum(s.refused for s in spent), reached_with=self.reached_with)
        return budget

    def report(self, name: str, spending: Spending) -> RunSpending:
        """Record ``name``'s spending (a node gateway keeps its counts: they only grow); the run's."""
        self.members[name] = spending
        run = self.totals()
        if run.reached and self.reached_with is None:
            self.reached_with = {"tokens": run.tokens, "cost_usd": round(run.cost, 9) if self.priced else None,
                                 "in_flight": run.in_flight}
        return RunSpending(tokens=run.tokens, cost=run.cost, reached=run.reached)

    def to_json(self) -> dict[str, Any]:
        """The summary's ``model.budget`` for the run (``CallBudget.to_json``, ``cut_sessions`` summed)."""
        out = self.totals().to_json()
        out["cut_sessions"] = sum(s.cut_sessions for s in self.members.values())
        out["nodes"] = len(self.members)
        return out


@attrs.frozen
class _Priced:
    """A price that only says "there is one" (the coordinator sums costs the nodes computed)."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0


_PRICED = _Priced()


@attrs.define
class NodeBudget(CallBudget):
    """A node gateway's budget: its own calls (``tokens``, ``cost``) plus what the other nodes
    spent as of the last report (``others_*``); ``stopped`` once the coordinator says the run's
    budget is reached. Also the driver's view of the run's budget (no calls of its own)."""

    others_tokens: int = 0
    others_cost: float = 0.0
    stopped: bool = False

    @property
    def run_tokens(self) -> int:
        """Tokens of the whole run, as far as this node knows."""
        return self.tokens + self.others_tokens

    @property
    def run_cost(self) -> float:
        """USD of the whole run, as far as this node knows."""
        return self.cost + self.others_cost

    @property
    def reached(self) -> bool:
        """True once the run's budget is reached (as far as this node knows): no further call."""
        return self.stopped or (self.max_tokens is not None and self.run_tokens >= self.max_tokens) or (
            self.max_cost is not None and self.run_cost >= self.max_cost)

    def describe(self) -> str:
        """What the run spent against which limit, for messages."""
        return CallBudget.spent_text(self.run_tokens, self.max_tokens, self.run_cost, self.max_cost)

    def spending(self) -> Spending:
        """This node's own spending, to report."""
        return Spending(tokens=self.tokens, cost=self.cost, in_flight=self.in_flight, largest_call=self.largest_call,
                        refused=self.refused, cut_sessions=len(self.cut))

    def apply(self, sent: Spending, run: RunSpending) -> None:
        """Take the coordinator's answer to ``sent``: the others' spending, and whether the run stopped."""
        self.others_tokens = max(0, run.tokens - sent.tokens)
        self.others_cost = max(0.0, run.cost - sent.cost)
        self.stopped = self.stopped or run.reached

    def learn(self, run: RunSpending) -> None:
        """The driver's view (no calls of its own): the run's totals as a node last saw them."""
        if run.tokens >= self.others_tokens:
            self.others_tokens, self.others_cost = run.tokens, run.cost
        self.stopped = self.stopped or run.reached


def share_views(view: NodeBudget, member: NodeBudget) -> None:
    """The driver's ``view`` of the run's budget and a gateway ``member`` in the driver's own
    process (the judges') tell each other what they know: the member counts the run's spending
    as the view has it (less its own) and stops once the view is reached; the view learns the
    member's run total and whether it was reached."""
    member.others_tokens = max(member.others_tokens, view.run_tokens - member.tokens)
    member.others_cost = max(member.others_cost, view.run_cost - member.cost)
    member.stopped = member.stopped or view.reached
    view.learn(RunSpending(tokens=member.run_tokens, cost=member.run_cost, reached=member.reached))


async def follow_budget(budget: NodeBudget, exchange: Callable[[Spending], Awaitable[RunSpending | None]], *,
                        every: float = REPORT_EVERY,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Report ``budget``'s spending every ``every`` seconds through ``exchange`` (a call to the
    coordinator) and apply the answer (None: not heard, try again). Started once a first answer
    was tried. Runs until cancelled."""
    started = False
    while True:
        sent = budget.spending()
        answer = await exchange(sent)
        if answer is not None:
            budget.apply(sent, answer)
        if not started:
            started = True
            task_status.started()
        await trio.sleep(every)

"""One budget for a Ray run, without Ray: the coordinator's ``BudgetLedger`` sums what the node
gateways spent; a node's ``NodeBudget`` counts its own calls plus the others' (as of its last
report) and refuses once the run's budget is reached; ``follow_budget`` reports on trio's
MockClock; ``model_summary`` adds the node gateways' counts up."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from dsh_orchestra.gateway import CallStats, GatewayOptions
from dsh_orchestra.gateway._sse import Usage
from dsh_orchestra.scale._budget import BudgetLedger, NodeBudget, RunSpending, Spending, follow_budget, share_views
from dsh_orchestra.scale._gateways import model_summary


def call(budget: NodeBudget, tokens: int) -> None:
    """One call of ``tokens`` output tokens charged to ``budget``."""
    budget.charge(Usage(), Usage(output_tokens=tokens))


def test_each_node_refuses_once_the_runs_spending_reaches_the_budget() -> None:
    ledger = BudgetLedger(100, None, priced=False)
    a, b = NodeBudget(100, None), NodeBudget(100, None)
    for _ in range(4):
        call(a, 15)  # 60 on A
    call(b, 15)  # 15 on B
    assert not a.reached and not b.reached  # neither knows of the other yet
    for name, node in (("a", a), ("b", b), ("a", a)):  # A hears of B at its second report
        sent = node.spending()
        node.apply(sent, ledger.report(name, sent))
    assert (a.others_tokens, b.others_tokens) == (15, 60)
    assert a.run_tokens == b.run_tokens == 75 and not a.reached
    b.in_flight = 2
    call(b, 15)
    call(b, 15)  # B alone sees 105 of 100: it stops before it tells anyone
    assert b.reached and not a.reached
    assert b.refuse("item-1").startswith("budget reached (105 of 100 tokens)")
    sent = b.spending()
    answer = ledger.report("b", sent)
    assert answer == RunSpending(tokens=105, cost=0.0, reached=True)
    assert ledger.reached_with == {"tokens": 105, "cost_usd": None, "in_flight": 2}
    sent = a.spending()
    a.apply(sent, ledger.report("a", sent))
    assert a.reached and a.stopped  # A learns at its next report
    out = ledger.to_json()
    assert out["tokens"] == 105 and out["reached"] and out["overshoot"]["tokens"] == 5
    assert out["refused_calls"] == 1 and out["cut_sessions"] == 1 and out["nodes"] == 2


def test_a_cost_budget_sums_the_nodes_costs() -> None:
    ledger = BudgetLedger(None, 1.0, priced=True)
    a = NodeBudget(None, 1.0)
    a.cost = 0.6
    b = NodeBudget(None, 1.0)
    b.cost = 0.5
    sent = a.spending()
    a.apply(sent, ledger.report("a", sent))
    assert not a.reached
    sent = b.spending()
    b.apply(sent, ledger.report("b", sent))
    assert b.reached and b.describe() == "1.100000 of 1 USD"
    assert ledger.to_json()["cost_usd"] == pytest.approx(1.1)


def test_the_drivers_view_learns_the_run_from_the_nodes_answers() -> None:
    view = NodeBudget(100, None)
    view.learn(RunSpending(tokens=60, cost=0.0, reached=False))
    view.learn(RunSpending(tokens=30, cost=0.0, reached=False))  # an older answer from another node
    assert view.run_tokens == 60 and not view.reached
    view.learn(RunSpending(tokens=90, cost=0.0, reached=True))  # the coordinator said so
    assert view.reached and view.describe() == "90 of 100 tokens"


def test_follow_budget_reports_every_interval_and_keeps_counting_when_unheard() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    ledger = BudgetLedger(50, None, priced=False)
    other = Spending(tokens=40)
    ledger.report("other", other)
    node = NodeBudget(50, None)
    sent_at: list[float] = []
    heard = [False, True, True]

    async def exchange(spending: Spending) -> RunSpending | None:
        sent_at.append(trio.current_time())
        if not heard[min(len(sent_at) - 1, 2)]:
            return None  # the coordinator did not answer this time
        return ledger.report("node", spending)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(follow_budget, node, exchange)
            assert node.others_tokens == 0  # not heard yet
            call(node, 5)
            await trio.sleep(0.3)
            assert node.others_tokens == 40 and node.run_tokens == 45 and not node.reached
            call(node, 5)
            await trio.sleep(0.2)
            assert node.reached and node.stopped
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)
    assert [round(t, 3) for t in sent_at] == [0.0, 0.2, 0.4]


def test_model_summary_adds_the_node_gateways_counts_up() -> None:
    def node(calls: int, first: float, duration: float) -> dict[str, object]:
        counts = CallStats(calls=calls, upstream=calls, input_tokens=10 * calls, output_tokens=5 * calls,
                           first_token_s=first, duration_s=duration)
        spending = Spending(tokens=15 * calls, in_flight=0, largest_call=15)
        return {"counts": attrs.asdict(counts), "spending": attrs.asdict(spending)}

    stats = {"gw-a": node(3, 0.3, 0.6), "gw-b": node(1, 0.1, 0.2)}
    snapshot = {"total": 4, "adaptive": False, "history": [[1.5, 4]],
                "budget": {"members": {"gw-a": {"tokens": 0, "cost": 0.0, "in_flight": 0, "largest_call": 0,
                                                "refused": 0, "cut_sessions": 0},
                                       "gw-lost": {"tokens": 30, "cost": 0.0, "in_flight": 0, "largest_call": 15,
                                                   "refused": 2, "cut_sessions": 1}},
                           "reached_with": {"tokens": 90, "cost_usd": None, "in_flight": 1}}}
    options = GatewayOptions(model_concurrency=8, max_total_tokens=80)
    out = model_summary(options, stats, snapshot)
    assert out["calls"] == 4 and out["input_tokens"] == 40 and out["output_tokens"] == 20 and out["nodes"] == 2
    assert out["call_duration_s"] == pytest.approx(0.2) and out["time_to_first_token_s"] == pytest.approx(0.1)
    assert out["concurrency"] == {"mode": "fixed", "final": 4, "min": 4, "max": 8, "changes": [[0.0, 8], [1.5, 4]]}
    budget = out["budget"]
    assert budget["tokens"] == 45 + 15 + 30  # the fresh counts of A and B, the lost node's last report
    assert budget["refused_calls"] == 2 and budget["cut_sessions"] == 1 and budget["reached_with"]["in_flight"] == 1
    assert model_summary(GatewayOptions(), stats, {**snapshot, "budget": None})["budget"] is None
    # the driver's gateway (the judges' calls): counted in the totals and the budget, not a node
    driven = model_summary(options, {**stats, "gw-driver": node(2, 0.2, 0.4)}, snapshot, driver="gw-driver")
    assert driven["calls"] == 6 and driven["input_tokens"] == 60 and driven["nodes"] == 2
    assert driven["budget"]["tokens"] == 45 + 15 + 30 + 30 and driven["budget"]["nodes"] == 3  # A, B, the lost one


def test_the_drivers_view_and_the_judges_gateway_share_what_they_know() -> None:
    view = NodeBudget(max_tokens=20)
    judges = NodeBudget(max_tokens=20)
    view.learn(RunSpending(tokens=15, cost=0.0, reached=False))  # an item's call, as its node told the driver
    share_views(view, judges)
    assert judges.others_tokens == 15 and judges.run_tokens == 15 and not judges.reached
    judges.charge(Usage(), Usage(input_tokens=10, output_tokens=5))  # the judge's call
    assert judges.reached and judges.run_tokens == 30
    share_views(view, judges)
    assert view.reached and view.run_tokens == 30  # no new item starts
    share_views(view, judges)
    assert judges.others_tokens == 15 and judges.run_tokens == 30  # its own tokens are not counted twice

    item_first = NodeBudget(max_tokens=10)
    judges = NodeBudget(max_tokens=10)
    item_first.learn(RunSpending(tokens=15, cost=0.0, reached=True))
    share_views(item_first, judges)
    assert judges.stopped and judges.reached  # the judge's call is refused

"""CallBudget: a run's limit on model tokens and cost, counted per call as the calls stream.

Owns the spent counters, the moment the limit was reached (and the calls then in flight: what
may still overshoot it) and which sessions had a call refused. No I/O (docs/gateway.md#budgets).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from ._sse import Usage


class PerMtok(Protocol):
    """A price: USD per million input and output tokens (``dsh_orchestra.eval.Price`` is one)."""

    @property
    def input_per_mtok(self) -> float:
        """USD per million input tokens."""
        ...

    @property
    def output_per_mtok(self) -> float:
        """USD per million output tokens."""
        ...


def call_tokens(usage: Usage) -> int:
    """The tokens one call counts: input, output, cache read and cache creation."""
    return usage.total


def call_cost(usage: Usage, price: PerMtok | None) -> float:
    """The USD of one call at ``price`` (0.0 without one): every input token, cached ones
    included, at the input price, the output tokens at the output price."""
    if price is None:
        return 0.0
    inputs = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    return (inputs * price.input_per_mtok + usage.output_tokens * price.output_per_mtok) / 1e6


@attrs.define
class CallBudget:
    """``max_tokens`` / ``max_cost`` (USD at ``price``) over every call forwarded upstream.

    ``charge`` is called as a call's usage grows; once :attr:`reached`, the gateway forwards no
    further call (``refuse``). Cache hits are never charged.
    """

    max_tokens: int | None = None
    max_cost: float | None = None
    price: PerMtok | None = None
    tokens: int = 0
    cost: float = 0.0
    in_flight: int = 0  # calls forwarded upstream and not finished
    largest_call: int = 0  # the most tokens one call counted
    reached_with: dict[str, Any] | None = None  # spent and calls in flight when the limit was reached
    refused: int = 0  # calls not forwarded because the limit was reached
    cut: set[str] = attrs.field(factory=set)  # sessions (items) that had a call refused

    @property
    def limited(self) -> bool:
        """True when a limit is set."""
        return self.max_tokens is not None or self.max_cost is not None

    @property
    def reached(self) -> bool:
        """True once a limit is reached: no further call is forwarded."""
        return (self.max_tokens is not None and self.tokens >= self.max_tokens) or (
            self.max_cost is not None and self.cost >= self.max_cost)

    def charge(self, before: Usage, after: Usage) -> None:
        """Count what a call's usage grew by, from ``before`` to ``after``."""
        tokens = call_tokens(after) - call_tokens(before)
        if tokens <= 0:
            return
        was = self.reached
        self.tokens += tokens
        self.cost += call_cost(after, self.price) - call_cost(before, self.price)
        self.largest_call = max(self.largest_call, call_tokens(after))
        if not was and self.reached and self.reached_with is None:
            cost = round(self.cost, 9) if self.price is not None else None
            self.reached_with = {"tokens": self.tokens, "cost_usd": cost, "in_flight": self.in_flight}

    def refuse(self, session: str) -> str:
        """Count a refused call of ``session`` (its item is cut short); the error text."""
        self.refused += 1
        self.cut.add(session)
        return f"budget reached ({self.describe()}): no further model call is forwarded"

    def describe(self) -> str:
        """What was spent against which limit, for messages."""
        return self.spent_text(self.tokens, self.max_tokens, self.cost, self.max_cost)

    @staticmethod
    def spent_text(tokens: int, max_tokens: int | None, cost: float, max_cost: float | None) -> str:
        """``"T of M tokens, C of L USD"``, each part only with its limit (every budget's messages)."""
        parts = []
        if max_tokens is not None:
            parts.append(f"{tokens} of {max_tokens} tokens")
        if max_cost is not None:
            parts.append(f"{cost:.6f} of {max_cost:g} USD")
        return ", ".join(parts)

    def overshoot(self) -> dict[str, Any]:
        """Spent beyond the limits (0 when not reached)."""
        return {"tokens": max(0, self.tokens - self.max_tokens) if self.max_tokens is not None else None,
                "cost_usd": round(max(0.0, self.cost - self.max_cost), 9) if self.max_cost is not None else None}

    def to_json(self) -> dict[str, Any]:
        """The summary's ``model.budget``: limits, spent, reached, overshoot and its bound's inputs."""
        return {"max_total_tokens": self.max_tokens, "max_total_cost": self.max_cost, "tokens": self.tokens,
                "cost_usd": round(self.cost, 9) if self.price is not None else None, "reached": self.reached,
                "reached_with": self.reached_with, "overshoot": self.overshoot(), "largest_call_tokens": self.largest_call,
                "refused_calls": self.refused, "cut_sessions": len(self.cut)}

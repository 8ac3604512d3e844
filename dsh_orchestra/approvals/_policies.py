"""Built-in policies and combinators.

A *rule* returns a Decision when it applies and None when it does not; ``first_match`` tries
rules in order. Every built-in is itself a policy (None means "default: rejected").
Imports only the protocol layer (and trio for the terminal prompt).
"""

from __future__ import annotations

import fnmatch
import inspect
import math
import sys
from collections import defaultdict
from functools import partial
from typing import Any, Callable, Iterable, TextIO

import regex
import trio

from .._params import Param, ParamValueError
from ._model import ALLOWED_ONCE, OUTCOMES, REJECTED, ApprovalRequest, Decision, Outcome, Policy


INLINE_MATCH_SECONDS = 0.001
"""A reason regex is first matched on the event loop for at most this long (most finish in
microseconds); one that takes longer is matched again in a worker thread (see ``search_bounded``)."""

UNBOUNDED_MATCH_SECONDS = 30.0
"""The bound of a match when no deadline applies (a rule called outside a decision)."""


async def search_bounded(pattern: regex.Pattern[str], text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, without stalling the event loop.

    Matching model-chosen text against a user's regex can backtrack for hours. The ``regex``
    package releases the GIL while matching and stops at a timeout: after a short inline try,
    the match runs in a worker thread bounded by the caller's deadline (the decision deadline
    of ``decide``), so the loop keeps serving every other runtime, the decision fails closed at
    its deadline (the caller is cancelled and abandons the thread), and the thread itself
    stops soon after instead of burning a core.

    Raises:
        TimeoutError: the match did not finish within the bound.
    """
    try:
        return pattern.search(text, timeout=INLINE_MATCH_SECONDS) is not None
    except TimeoutError:
        pass
    remaining = trio.current_effective_deadline() - trio.current_time()
    bound = remaining if math.isfinite(remaining) else UNBOUNDED_MATCH_SECONDS
    search = partial(pattern.search, text, concurrent=True, timeout=max(bound, INLINE_MATCH_SECONDS) + 0.05)
    return await trio.to_thread.run_sync(search, abandon_on_cancel=True) is not None


USER_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit, KeyboardInterrupt, GeneratorExit)
"""What a user's policy may raise and have it be that decision's error (fail closed), not the run's."""


def _is_async(policy: Any) -> bool:
    if inspect.iscoroutinefunction(policy) or (callable(policy) and inspect.iscoroutinefunction(policy.__call__)):
        return True
    inner = getattr(policy, "policy", None)  # a wrapper (LoadedPolicy) calls it: async when it is
    return inner is not None and inner is not policy and callable(inner) and _is_async(inner)


async def call_policy(policy: Policy, request: ApprovalRequest) -> Any:
    """Call a sync or async policy and return what it returned (awaited if needed).

    A sync policy (user code: it may block) runs in a worker thread, abandoned when the caller
    is cancelled (the decision's deadline), so it never stalls the event loop.
    """
    if isinstance(policy, Rule):  # its reason regex is matched off the event loop
        return await policy.decide(request)
    if _is_async(policy):
        value = policy(request)
    else:
        value = await trio.to_thread.run_sync(policy, request, abandon_on_cancel=True)
    if inspect.isawaitable(value):
        value = await value
    return value


def _globs(patterns: Iterable[str] | str) -> tuple[str, ...]:
    if isinstance(patterns, str):
        patterns = (patterns,)
    out = tuple(patterns)
    if not out or not all(isinstance(p, str) and p for p in out):
        raise ValueError(f"expected one or more non-empty glob patterns, not {patterns!r}")
    return out


def _matches(value: str | None, patterns: tuple[str, ...]) -> bool:
    return value is not None and any(fnmatch.fnmatchcase(value, p) for p in patterns)


def _check_outcome(outcome: str) -> Outcome:
    if outcome not in OUTCOMES:
        raise ParamValueError(Param("outcome", outcome, spelled="outcome"), f" must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    return outcome


def _checked(value: Any, who: str) -> Decision | None:
    """``value`` if it is a Decision or None; anything else is the policy's error (fail closed)."""
    if value is None or isinstance(value, Decision):
        return value
    raise TypeError(f"{who} returned {type(value).__name__} {value!r}, not a Decision or None")


class Rule:
    """A named condition on tool, session and reason with the outcome it decides."""

    def __init__(
        self,
        name: str,
        outcome: str,
        *,
        tools: Iterable[str] | str | None = None,
        sessions: Iterable[str] | str | None = None,
        reason: str | None = None,
        note: str = "",
    ) -> None:
        self.name = name
        self.outcome = _check_outcome(outcome)
        self.tools = _globs(tools) if tools is not None else None
        self.sessions = _globs(sessions) if sessions is not None else None
        self.reason = regex.compile(reason) if reason is not None else None  # re's syntax (VERSION0)
        self.note = note

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.outcome!r}, tools={self.tools}, sessions={self.sessions})"

    def _globs_hold(self, request: ApprovalRequest) -> bool:
        if self.tools is not None and not _matches(request.tool_name, self.tools):
            return False
        return self.sessions is None or _matches(request.session_id, self.sessions)

    def applies(self, request: ApprovalRequest) -> bool:
        """True when every condition given holds for ``request`` (blocking: the reason regex is
        matched here, bounded by ``UNBOUNDED_MATCH_SECONDS``; ``applies_async`` never blocks).

        Raises:
            TimeoutError: the reason regex did not finish within the bound.
        """
        if not self._globs_hold(request):
            return False
        return self.reason is None or self.reason.search(request.reason or "", timeout=UNBOUNDED_MATCH_SECONDS) is not None

    async def applies_async(self, request: ApprovalRequest) -> bool:
        """``applies`` without stalling the event loop (``search_bounded``).

        Raises:
            TimeoutError: the reason regex did not finish within the caller's deadline.
        """
        if not self._globs_hold(request):
            return False
        return self.reason is None or await search_bounded(self.reason, request.reason or "")

    def __call__(self, request: ApprovalRequest) -> Decision | None:
        if self.applies(request):
            return Decision(outcome=self.outcome, rule=self.name, note=self.note)
        return None

    async def decide(self, request: ApprovalRequest) -> Decision | None:
        """What ``__call__`` returns, matching the reason off the event loop (``call_policy`` uses it)."""
        if await self.applies_async(request):
            return Decision(outcome=self.outcome, rule=self.name, note=self.note)
        return None


def allow_tools(*patterns: str, name: str = "allow-tools") -> Rule:
    """Allow (once) tools whose name matches a glob."""
    return Rule(name, ALLOWED_ONCE, tools=patterns)


def deny_tools(*patterns: str, name: str = "deny-tools") -> Rule:
    """Reject tools whose name matches a glob."""
    return Rule(name, REJECTED, tools=patterns)


def by_session(pattern: str | Iterable[str], outcome: str, *, name: str = "by-session") -> Rule:
    """Decide ``outcome`` for sessions whose id matches a glob."""
    return Rule(name, outcome, sessions=pattern)


def reason_matches(pattern: str, outcome: str, *, name: str = "reason") -> Rule:
    """Decide ``outcome`` when the request's reason matches ``pattern`` (a search, re syntax)."""
    return Rule(name, outcome, reason=pattern)


def first_match(*rules: Policy, default: str = REJECTED, name: str = "default") -> Policy:
    """Try ``rules`` in order; the first Decision wins; otherwise ``default`` decides."""
    fallback = Decision(outcome=_check_outcome(default), rule=name, note="no rule matched")

    async def policy(request: ApprovalRequest) -> Decision:
        for rule in rules:
            decision = _checked(await call_policy(rule, request), "a rule")
            if decision is not None:
                return decision
        return fallback

    return policy


def all_of(*policies: Policy, name: str = "all-of") -> Policy:
    """Allow only when every policy allows, asked in order; stops at the first that does not.

    That one's decision is returned (a policy that does not decide, None, rejects).
    """
    if not policies:
        raise ParamValueError("all_of needs at least one ", Param("policies", spelled="policy"))

    async def policy(request: ApprovalRequest) -> Decision:
        rules = []
        for p in policies:
            decision = _checked(await call_policy(p, request), "a policy of all_of")
            if decision is None:
                return Decision(outcome=REJECTED, rule=name, note="a policy did not decide")
            if not decision.allowed:
                return decision
            rules.append(decision.rule)
        return Decision(outcome=ALLOWED_ONCE, rule=name, note=" & ".join(rules))

    return policy


def any_of(*policies: Policy, name: str = "any-of") -> Policy:
    """Allow when any policy allows (the first that does wins); otherwise the first decision (or None)."""
    if not policies:
        raise ParamValueError("any_of needs at least one ", Param("policies", spelled="policy"))

    async def policy(request: ApprovalRequest) -> Decision | None:
        first: Decision | None = None
        for p in policies:
            decision = _checked(await call_policy(p, request), "a policy of any_of")
            if decision is not None:
                if decision.allowed:
                    return decision
                first = first or decision
        return first

    return policy


def budget(policy: Policy, limit: int, *, tools: Iterable[str] | str = "*", name: str = "budget") -> Policy:
    """At most ``limit`` approvals per session for matching tools, then reject.

    ``budget(allow_tools("bash"), 3, tools="bash")``: three bash approvals per session. Once a
    session's budget is used up, matching requests are rejected without asking ``policy``
    (a wrapped ``Rule`` that does not apply still passes: None). The count lives in this
    policy object, so one object shared by several runtimes counts across all of them.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ParamValueError("budget ", Param("limit", limit, spelled="limit"), f" must be an integer >= 0, not {limit!r}")
    patterns = _globs(tools)
    used: dict[str, int] = defaultdict(int)

    async def wrapped(request: ApprovalRequest) -> Decision | None:
        if not _matches(request.tool_name, patterns):
            return _checked(await call_policy(policy, request), "the policy of budget")
        if isinstance(policy, Rule) and not await policy.applies_async(request):
            return None
        if used[request.session_id] >= limit:
            return Decision(outcome=REJECTED, rule=name, note=f"budget of {limit} approvals used up")
        decision = _checked(await call_policy(policy, request), "the policy of budget")
        if decision is not None and decision.allowed:
            used[request.session_id] += 1
        return decision

    return wrapped


def callback(fn: Callable[[ApprovalRequest], Any], *, name: str = "callback") -> Policy:
    """Adapt the user's function: True allows, False rejects, a Decision or outcome string as is."""

    async def policy(request: ApprovalRequest) -> Decision | None:
        value = await call_policy(fn, request)
        if isinstance(value, Decision):
            return value
        if value is None:
            return None
        if value is True:
            return Decision(outcome=ALLOWED_ONCE, rule=name)
        if value is False:
            return Decision(outcome=REJECTED, rule=name)
        if isinstance(value, str):
            return Decision(outcome=_check_outcome(value), rule=name)
        raise TypeError(f"callback returned {type(value).__name__} {value!r}; return a bool, an outcome or a Decision")

    return policy


def ask_terminal(*, stream_in: TextIO | None = None, stream_out: TextIO | None = None, name: str = "terminal") -> Policy:
    """Ask a human on the terminal (for attended runs): y allows once, anything else rejects."""
    lock = trio.Lock()

    def ask(request: ApprovalRequest) -> str:
        out = stream_out or sys.stderr
        out.write(
            f"\napproval requested by session {request.session_id} on {request.runtime or 'runtime'}:\n"
            f"  tool: {request.tool_name}\n  reason: {request.reason or '-'}\nallow once? [y/N] "
        )
        out.flush()
        line = (stream_in or sys.stdin).readline()
        return line.strip().lower()

    async def policy(request: ApprovalRequest) -> Decision:
        async with lock:  # one question at a time on one terminal
            answer = await trio.to_thread.run_sync(ask, request, abandon_on_cancel=True)
        if answer in ("y", "yes"):
            return Decision(outcome=ALLOWED_ONCE, rule=name, note="approved on the terminal")
        return Decision(outcome=REJECTED, rule=name, note="rejected on the terminal")

    return policy

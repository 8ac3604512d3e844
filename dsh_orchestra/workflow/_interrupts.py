"""Interrupts: a step asks a person, and its branch waits for the answer (or for a later resume).

Answers come, in this order, from the checkpoint (answered before), the ``answers=`` mapping,
or an answerer callable (the terminal one only asks when stdin is a TTY). With no answer to be
had in this run, the interrupt stays pending: the branch ends ``interrupted``, the rest of the
workflow goes on, and a resume with the answer runs that branch again. ``escalate`` turns an
approval policy's undecided requests into interrupts of the step whose session asked.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any, Awaitable, Callable, Mapping, TextIO, Union

import trio

from .._params import Param, ParamValueError, positive
from ..approvals import ApprovalRequest, Decision, allow, reject
from ..protocol import OrchestraError
from ._answers import typed_answer
from ._events import EventHub
from ._journal import Journal
from ._result import Interrupt


Answerer = Callable[[Interrupt], Union[str, None, Awaitable[Union[str, None]]]]
Answers = Union[Mapping[str, str], Answerer]
"""``answers=``: a mapping of interrupt id to answer, or a callable (sync or async) that returns
the answer, or None to leave the interrupt pending."""


class InterruptPending(OrchestraError):
    """Raised by ``ctx.interrupt`` when no answer can be had in this run (the branch ends
    ``interrupted``; resume with the answer). A step that catches it still ends interrupted."""

    def __init__(self, interrupt: Interrupt) -> None:
        super().__init__(f"interrupt {interrupt.id!r} waits for an answer: {interrupt.question}")
        self.interrupt = interrupt


def check_answer(interrupt: Interrupt, answer: Any, kind: type | None = None) -> str:
    """``answer`` as the interrupt's answer (text that reads as ``kind``, when given: see
    ``_answers.typed_answer``).

    Raises:
        ValueError: not a string, not one of the interrupt's choices, or not a ``kind``.
    """
    if not isinstance(answer, str):
        raise ValueError(f"the answer to interrupt {interrupt.id!r} must be a string, not {type(answer).__name__}")
    if interrupt.choices and answer not in interrupt.choices:
        raise ValueError(
            f"the answer {answer!r} to interrupt {interrupt.id!r} is not one of its choices: {', '.join(interrupt.choices)}"
        )
    typed_answer(interrupt.id, kind, answer)
    return answer


class Interrupts:
    """The run's interrupts: answer look-up, journaling, pending ones."""

    def __init__(self, journal: Journal | None, answers: Answers | None, events: EventHub) -> None:
        if answers is not None and not (isinstance(answers, Mapping) or callable(answers)):
            raise ParamValueError(Param("answers", answers, spelled="answers"), f" must be a mapping of interrupt id to answer, or a callable, not {answers!r}")
        self.journal = journal
        self.answers = answers
        self.events = events
        self.pending: dict[str, Interrupt] = {}

    def _settle(self, interrupt: Interrupt, answer: str) -> str:
        if self.journal is not None:
            self.journal.put_interrupt(interrupt.id, interrupt.question, interrupt.choices, answer)
        self.pending.pop(interrupt.id, None)
        return answer

    async def ask(self, interrupt: Interrupt, timeout: float | None, kind: type | None = None) -> str | None:  # noqa: ASYNC109 - the answerer's time only
        """The answer, or None when none can be had in this run (the interrupt is pending).
        ``kind``: the type the answer must read as (the asking step's ``-> int``/``float``/``bool``).

        Raises:
            TimeoutError: the answerer gave no answer within ``timeout`` seconds.
            ValueError: the answer is not a string, not among the choices, or not a ``kind``.
        """
        if self.journal is not None:
            known = self.journal.answers.get(interrupt.id)
            if known is not None and known[0] == interrupt.question and known[1] is not None:
                return check_answer(interrupt, known[1], kind)
        if isinstance(self.answers, Mapping) and interrupt.id in self.answers:
            return self._settle(interrupt, check_answer(interrupt, self.answers[interrupt.id], kind))
        self.pending[interrupt.id] = interrupt
        if self.journal is not None:
            self.journal.put_interrupt(interrupt.id, interrupt.question, interrupt.choices, None)
        self.events.emit("interrupted", interrupt.step, interrupt=interrupt)
        if self.answers is None or isinstance(self.answers, Mapping):
            return None
        try:
            with trio.fail_after(timeout) if timeout is not None else _forever():
                value = self.answers(interrupt)
                if inspect.isawaitable(value):
                    value = await value
        except trio.TooSlowError:
            self.pending.pop(interrupt.id, None)
            raise TimeoutError(f"interrupt {interrupt.id!r} was not answered within {timeout:g} s") from None
        if value is None:
            return None
        return self._settle(interrupt, check_answer(interrupt, value, kind))


class _forever:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


def answer_on_terminal(*, stream_in: TextIO | None = None, stream_out: TextIO | None = None) -> Answerer:
    """An answerer that asks on the terminal, one question at a time; an empty line leaves
    the interrupt pending. (``dsh-orchestra run`` uses it only when stdin is a TTY.)"""
    lock = trio.Lock()

    def ask(interrupt: Interrupt) -> str | None:
        out = stream_out or sys.stderr
        options = f" [{'/'.join(interrupt.choices)}]" if interrupt.choices else ""
        while True:
            out.write(f"\n{interrupt.id}: {interrupt.question}{options}\n(empty: answer later) > ")
            out.flush()
            line = (stream_in or sys.stdin).readline()
            answer = line.strip()
            if not answer:
                return None
            if not interrupt.choices or answer in interrupt.choices:
                return answer
            out.write(f"choose one of: {', '.join(interrupt.choices)}\n")

    async def answerer(interrupt: Interrupt) -> str | None:
        async with lock:
            return await trio.to_thread.run_sync(ask, interrupt, abandon_on_cancel=True)

    return answerer


APPROVE = ("allow", "reject")
"""The choices of an escalated approval."""

Owner = Callable[[ApprovalRequest], Any]


class Escalation:
    """An approval policy that asks a person (an interrupt) when ``policy`` leaves a request
    undecided (returns None). Build it with ``escalate``."""

    def __init__(self, policy: Callable[[ApprovalRequest], Any], timeout: float) -> None:
        if not callable(policy):
            raise ParamValueError(Param("policy", policy, spelled="policy"), f" must be an approval policy (a callable), not {policy!r}")
        positive("a positive number of seconds").check("timeout", timeout)
        self.policy = policy
        self.timeout = float(timeout)
        inner = getattr(policy, "deadline", None)
        self.deadline = self.timeout + (float(inner) if inner is not None else 10.0)
        self.owners: list[Owner] = []

    async def __call__(self, request: ApprovalRequest) -> Any:
        value = self.policy(request)
        if inspect.isawaitable(value):
            value = await value
        if value is not None:
            return value
        for owner in list(self.owners):
            asker = owner(request)
            if asker is not None:
                return await asker(request, self.timeout)
        return reject("escalate", "the policy left it undecided and no workflow step owns the session")


def escalate(policy: Callable[[ApprovalRequest], Any], *, timeout: float) -> Escalation:
    """An approval policy: ``policy`` decides first; a request it leaves undecided (None)
    becomes an interrupt of the workflow step whose session asked (choices ``allow`` and
    ``reject``); no answer within ``timeout`` seconds rejects.

    Give it to the runtimes as their policy (``run_workflow(approvals=...)``, ``open_runtime``,
    ``open_pool``); the workflows running on them answer its interrupts. With no answer source
    in the run the request is rejected at once and the step ends interrupted, so a resume with
    answering ``ID=allow`` runs it again and the answer decides.
    """
    return Escalation(policy, timeout)


def decision_of(interrupt: Interrupt, answer: str | None, *, pending: bool) -> Decision:
    """The approval decision an escalated interrupt's answer makes."""
    if answer == "allow":
        return allow("escalate", f"allowed by the answer to {interrupt.id}")
    if pending:
        return reject("escalate", f"no answer yet to {interrupt.id} (the step waits for it)")
    return reject("escalate", f"rejected by the answer to {interrupt.id}")

"""The tools a simulated model calls, and the results the simulated runtime gives back.

Owns the planning of a scripted step's tool calls (subagents, generic tools, approvals,
questions), the approval path (``approval/asked`` -> client or fail-closed ->
``approval/decided``), the question path (``user-question/ask`` or ``NO_PROVIDER``), the few
tools that really do something (``read`` reads a file, ``working_directory`` reports or
changes the directory, ``subagent`` spawns a child) and the error results of the rest.
Nothing here runs a command or writes a file.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..protocol import (
    ApprovalAsked,
    ApprovalAskedData,
    ApprovalDecided,
    ApprovalDecidedData,
    ModelMessage,
    TextBlock,
    ToolError,
    ToolResult,
    ToolResultData,
    WorkingDirectoryChange,
    WorkingDirectoryChangeData,
)
from ._script import ApprovalSpec, Behaviour, QuestionSpec, SpawnSpec
from ._sim_content import QUESTION_TOOL, REQUIRED_ARGS, TOOL_NAMES

if TYPE_CHECKING:  # the agents call the tools, and the tools call back into the agents
    from ._sim_agent import Agent, Intent

READ_LIMIT = 2000
NO_CHANNEL = 'Error: sandbox escalation to "{mode}" requires approval, but no approval channel is available'
ESCALATION = "danger-full-access"


@attrs.frozen(kw_only=True)
class QuestionReply:
    """How the host answered ``user-question/ask``.

    ``kind``: ``answers`` (valid, in ``answers``), ``cancelled`` (the user dismissed),
    ``invalid`` (a bad answer batch), ``error`` (an error reply or transport failure),
    ``timeout`` (the simulator stopped waiting and sent ``user-question.cancelled``).
    """

    kind: Literal["answers", "cancelled", "invalid", "error", "timeout"]
    answers: tuple[dict[str, Any], ...] = ()
    detail: str = ""


@attrs.frozen(kw_only=True)
class PlannedCall:
    """One tool call of a scripted step."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    spawn: SpawnSpec | None = None
    approval: ApprovalSpec | None = None
    question: QuestionSpec | None = None


@attrs.frozen(kw_only=True)
class _Outcome:
    text: str
    is_error: bool = False
    error: ToolError | None = None
    meta: Any = None


def plan_calls(agent: Agent, behaviour: Behaviour) -> list[PlannedCall]:
    """The calls of a behaviour's first step: spawns, then tools, then approval, then question."""
    host = agent.host
    calls = [PlannedCall(call_id=host.next_call_id(), name="subagent", spawn=spawn,
                         arguments={"description": spawn.description, "prompt": spawn.prompt})
             for spawn in behaviour.spawn]
    calls += [PlannedCall(call_id=host.next_call_id(), name=tool.name, arguments=dict(tool.input))
              for tool in behaviour.tools]
    if behaviour.approval is not None:
        spec = behaviour.approval
        justification = spec.reason or "The scenario asks for approval."
        arguments: dict[str, Any] = {"sandbox_permissions": ESCALATION, "justification": justification}
        if spec.tool == "bash":
            arguments = {"description": "Run a command that needs wider access", "command": "true", **arguments}
        calls.append(PlannedCall(call_id=host.next_call_id(), name=spec.tool, arguments=arguments, approval=spec))
    if behaviour.question is not None:
        calls.append(PlannedCall(call_id=host.next_call_id(), name=QUESTION_TOOL, question=behaviour.question,
                                 arguments={"questions": [question_json(behaviour.question)]}))
    return calls


def question_json(spec: QuestionSpec) -> dict[str, Any]:
    """The wire form of one scripted question (``user-question/ask`` ``questions[]``)."""
    question: dict[str, Any] = {"id": spec.id, "question": spec.question}
    if spec.detail is not None:
        question["detail"] = spec.detail
    if spec.header is not None:
        question["header"] = spec.header
    if spec.options:
        question["options"] = [{"label": label} for label in spec.options]
    if spec.multi_select:
        question["multiSelect"] = True
    return question


async def execute(agent: Agent, turn: int, step: int, call: PlannedCall, call_seq: int, intent: Intent,
                  values: dict[str, str]) -> None:
    """Run one call and commit its ``tool/result`` (citing the ``tool/call`` seq)."""
    outcome = await _run(agent, call, intent, values)
    message = ModelMessage(id=str(uuid.uuid4()), role="tool", content=[TextBlock(text=outcome.text)],
                           source={"kind": "tool", "callId": call.call_id}, tool_call_id=call.call_id,
                           is_error=outcome.is_error)
    agent.emit(ToolResult, "tool/result", ToolResultData(turn=turn, step=step, message=message, error=outcome.error,
                                                         meta=outcome.meta), surface=True, sources=[call_seq])


def _failed(text: str, name: str, code: str) -> _Outcome:
    return _Outcome(text=f"Error: {text}", is_error=True, error=ToolError(name=name, code=code))


async def _run(agent: Agent, call: PlannedCall, intent: Intent, values: dict[str, str]) -> _Outcome:
    name, arguments = call.name, call.arguments
    if isinstance(arguments.get("sandbox_permissions"), str):
        return await _approval(agent, call, values)
    if name == QUESTION_TOOL:
        return await _question(agent, call, values)
    if name not in TOOL_NAMES:
        return _failed(f'unknown tool "{name}"', "UnknownToolError", "UNKNOWN_TOOL")
    missing = [arg for arg in REQUIRED_ARGS.get(name, ()) if arg not in arguments]
    if missing:
        return _failed(f"invalid arguments for {name}: missing required argument {missing[0]!r}",
                       "ToolInputError", "INVALID_ARGS")
    if name in ("subagent", "subagent_fork"):
        description, prompt = str(arguments["description"]), str(arguments["prompt"])
        behaviour = call.spawn.behaviour if call.spawn is not None else None
        child = agent.spawn_child(description, prompt, behaviour, intent)
        return _Outcome(text=f"started subagent {child.id}")
    if name == "read":
        return _read(agent, arguments)
    if name == "working_directory":
        return _working_directory(agent, arguments)
    return _Outcome(text=f"[simulated {name}] done")


def _read(agent: Agent, arguments: dict[str, Any]) -> _Outcome:
    path = os.path.normpath(os.path.join(agent.record.cwd, str(arguments["file_path"])))
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        return _failed(f"file not found: {path}", "FsError", "FS_NOT_FOUND")
    except IsADirectoryError:
        return _failed(f"is a directory: {path}", "FsError", "FS_IS_DIRECTORY")
    except OSError as exc:
        return _failed(f"cannot read {path}: {exc.strerror}", "FsError", "FS_ERROR")
    offset = arguments.get("offset", 1)
    limit = arguments.get("limit", READ_LIMIT)
    offset = offset if isinstance(offset, int) and offset >= 1 else 1
    limit = limit if isinstance(limit, int) and limit >= 1 else READ_LIMIT
    shown = [{"number": number, "text": text}
             for number, text in enumerate(lines[offset - 1:offset - 1 + limit], start=offset)]
    body = "\n".join(f"{line['number']}: {line['text']}" for line in shown)
    text = (f"<path>{path}</path>\n<type>file</type>\n<content>\n{body}\n\n"
            f"(End of file - total {len(lines)} lines)\n</content>")
    return _Outcome(text=text, meta={"path": path, "offset": offset, "lines": shown, "totalLines": len(lines)})


def _working_directory(agent: Agent, arguments: dict[str, Any]) -> _Outcome:
    target = arguments.get("cd")
    if not isinstance(target, str):
        return _Outcome(text=agent.record.cwd)
    path = os.path.normpath(os.path.join(agent.record.cwd, target))
    if not target or not os.path.isdir(path):
        return _failed(f"directory does not exist: {json.dumps(target)}", "FsError", "FS_NOT_FOUND")
    if path != agent.record.cwd:
        agent.record.cwd = path
        agent.emit(WorkingDirectoryChange, "working-directory/change", WorkingDirectoryChangeData(cwd=path))
    return _Outcome(text=path)


async def _approval(agent: Agent, call: PlannedCall, values: dict[str, str]) -> _Outcome:
    host = agent.host
    mode = str(call.arguments.get("sandbox_permissions"))
    justification = str(call.arguments.get("justification", ""))
    reason = f"escalate sandbox to {mode}: {justification}" if justification else f"escalate sandbox to {mode}"
    approval_id = str(uuid.uuid4())
    agent.emit(ApprovalAsked, "approval/asked", ApprovalAskedData(
        id=approval_id, tool_name=call.name, call_id=call.call_id, reason=reason))
    if host.approvals_enabled:
        timeout = call.approval.timeout if call.approval is not None else None
        timeout = host.options.ask_timeout if timeout is None else timeout
        outcome = await host.ask_approval(agent, call.name, call.call_id, reason, timeout)
    else:
        outcome = "unavailable"  # the in-runtime answerer chain has no channel: fail closed
    agent.emit(ApprovalDecided, "approval/decided", ApprovalDecidedData(id=approval_id, outcome=outcome))
    values["outcome"] = outcome
    if outcome == "allowed-once":
        return _Outcome(text=f"[simulated {call.name}] ran with {mode} access")
    if outcome == "unavailable":
        return _Outcome(text=NO_CHANNEL.format(mode=mode), is_error=True)
    return _Outcome(text=f'Error: sandbox escalation to "{mode}" was {outcome}', is_error=True)


def _answer_text(questions: list[dict[str, Any]], answers: tuple[dict[str, Any], ...]) -> str:
    by_id = {answer["id"]: answer for answer in answers}
    parts = []
    for question in questions:
        answer = by_id[question["id"]]
        chosen = [*answer["selected"], *([answer["custom"]] if answer.get("custom") else [])]
        parts.append(", ".join(chosen))
    return "; ".join(parts)


async def _question(agent: Agent, call: PlannedCall, values: dict[str, str]) -> _Outcome:
    host = agent.host
    questions = call.arguments.get("questions")
    if not isinstance(questions, list) or not questions or not all(
            isinstance(q, dict) and isinstance(q.get("id"), str) and isinstance(q.get("question"), str)
            for q in questions):
        return _failed(f"invalid arguments for {QUESTION_TOOL}: 'questions' must list {{id, question}} objects",
                       "ToolInputError", "INVALID_ARGS")
    values["answer"] = ""
    if not host.questions_enabled:
        return _failed("no user-questions answerer accepted the request", "UserQuestionError", "NO_PROVIDER")
    timeout = call.question.timeout if call.question is not None else None
    timeout = host.options.ask_timeout if timeout is None else timeout
    reply = await host.ask_question(agent, questions, timeout)
    if reply.kind == "answers":
        values["answer"] = _answer_text(questions, reply.answers)
        return _Outcome(text=json.dumps({"answers": list(reply.answers)}, ensure_ascii=False))
    if reply.kind == "cancelled":
        return _failed("the user dismissed the questions", "UserQuestionError", "ASK_CANCELLED")
    if reply.kind == "invalid":
        return _failed(f"invalid answer batch: {reply.detail}", "UserQuestionError", "BAD_ANSWER")
    if reply.kind == "timeout":
        return _failed(f"no answer within {reply.detail}", "UserQuestionError", "ASK_TIMED_OUT")
    return _failed(f"the question host failed: {reply.detail}", "UserQuestionError", "PROVIDER_ERROR")


def check_answers(result: Any, questions: list[dict[str, Any]]) -> QuestionReply:
    """Classify a ``user-question/ask`` result: every question id exactly once, or cancelled."""
    if isinstance(result, dict) and result.get("cancelled") is True and set(result) == {"cancelled"}:
        return QuestionReply(kind="cancelled")
    answers = result.get("answers") if isinstance(result, dict) else None
    if not isinstance(answers, list):
        return QuestionReply(kind="invalid", detail="expected {answers: [...]} or {cancelled: true}")
    wanted = [question["id"] for question in questions]
    seen: list[str] = []
    for answer in answers:
        if not (isinstance(answer, dict) and isinstance(answer.get("id"), str)
                and isinstance(answer.get("selected"), list)
                and all(isinstance(label, str) for label in answer["selected"])
                and isinstance(answer.get("custom", ""), str)):
            return QuestionReply(kind="invalid", detail=f"malformed answer {answer!r}")
        seen.append(answer["id"])
    if sorted(seen) != sorted(wanted):
        return QuestionReply(kind="invalid", detail=f"answers must name each of {wanted} exactly once, not {seen}")
    return QuestionReply(kind="answers", answers=tuple(answers))

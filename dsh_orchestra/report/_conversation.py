"""An item's session as a conversation: the prompt, assistant text, reasoning, each tool call
with its arguments and result, approvals where they happened, subagents nested under the call
that spawned them.

Built from a transcript file (``transcript_entries``) when there is one, else from the
result line alone (``line_entries``: prompt, subagents, approvals, final response). The
entries are plain JSON; the page renders them with ``textContent``. A conversation is bounded
(``max_chars`` of text per item): past the bound the entries stop and ``cut`` says so.

Entry kinds (``k``): ``user``, ``text``, ``reasoning``, ``tool`` (``name``, ``args``,
``result``, ``is_error``, ``approvals``, ``children``), ``subagent`` (``session``, ``label``,
``status``, ``stop_reason``, ``entries``), ``approval`` (one without a call), ``question``
(``text``, ``options``, ``answer``, ``outcome``, ``answered_by``: the result line's ``questions``
records, under the question tool's call when the transcript has it), ``notice``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

DEFAULT_MAX_CHARS = 50_000  # characters of conversation text embedded per item


class _Budget:
    def __init__(self, limit: int, max_text: int) -> None:
        self.left = limit
        self.max_text = max_text
        self.cut = False

    def text(self, value: Any) -> str | None:
        """``value`` as text, clipped; None once the budget is spent."""
        if value is None:
            return ""
        text = value if isinstance(value, str) else str(value)
        if self.left <= 0:
            self.cut = True
            return None
        if len(text) > self.max_text:
            text = text[: self.max_text] + f"… [{len(text) - self.max_text} more characters]"
        self.left -= len(text)
        return text


_EMPTY: Mapping[str, Any] = {}


def _map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is an object, else an empty one."""
    return value if isinstance(value, dict) else _EMPTY


def _blocks_text(content: Any) -> str:
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts = []
    for block in content:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type', 'block')}]")
    return "\n".join(parts)


class _Session:
    """The entries of one session while its events are read."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.calls: dict[str, dict[str, Any]] = {}
        self.pending: list[dict[str, Any]] = []  # calls without a result yet, in call order
        self.asked: dict[str, dict[str, Any]] = {}


def _approval_rules(line: Mapping[str, Any] | None) -> dict[str, Any]:
    rules: dict[str, Any] = {}
    for approval in (line or {}).get("approvals") or ():
        if isinstance(approval, dict) and approval.get("call_id") is not None:
            rules[str(approval["call_id"])] = approval.get("rule")
    return rules


def question_entry(record: Mapping[str, Any], budget: _Budget | None = None) -> dict[str, Any]:
    """A question record of a result line (``questions``) as an entry: what was asked, the
    options, the answer (the options chosen, or the answerer's own text), the outcome, who."""
    selected = [str(s) for s in record.get("selected") or () if s is not None]
    custom = record.get("custom")
    answer = " | ".join(selected) if selected else custom if isinstance(custom, str) else None
    options = [str(o.get("label")) if isinstance(o, dict) else str(o) for o in record.get("options") or ()]
    text = record.get("question")
    if budget is not None:
        text, answer = budget.text(text) or "", budget.text(answer) if answer is not None else None
    return {"k": "question", "id": record.get("id"), "session": record.get("session"), "text": "" if text is None else str(text),
            "options": options, "answer": answer, "outcome": record.get("outcome"), "answered_by": record.get("answered_by"),
            "error": record.get("error")}


QUESTION_TOOLS = ("ask_user_question", "ask_user", "AskUserQuestion")
"""Names of the question tool: its call holds the question entries of its session."""


def transcript_entries(
    records: Sequence[Mapping[str, Any]], line: Mapping[str, Any] | None = None, *,
    max_chars: int = DEFAULT_MAX_CHARS, max_text: int = 20_000,
) -> dict[str, Any]:
    """The conversation of a transcript's records (``read_transcript``): ``entries``, ``cut``
    (the bound was reached), ``truncated`` (the transcript file itself was cut when written)."""
    budget = _Budget(max_chars, max_text)
    root_id: str | None = None
    truncated: Any = None
    top: list[dict[str, Any]] = []
    sessions: dict[str, _Session] = {}
    rules = _approval_rules(line)
    finished: dict[str, Mapping[str, Any]] = {}

    def session(session_id: str) -> _Session | None:
        nonlocal root_id
        if session_id not in sessions and root_id is None:
            root_id = session_id
            sessions[session_id] = _Session(top)
        return sessions.get(session_id)

    def add(target: _Session, entry: dict[str, Any], *texts: str) -> bool:
        for key in texts:
            value = budget.text(entry.get(key))
            if value is None:
                return False
            entry[key] = value
        target.entries.append(entry)
        return True

    def child(parent_id: str, child_id: str, label: Any) -> None:
        parent = sessions.get(parent_id)
        if parent is None or child_id in sessions:
            return
        node: dict[str, Any] = {"k": "subagent", "session": child_id, "label": label, "status": None, "stop_reason": None, "entries": []}
        sessions[child_id] = _Session(node["entries"])
        # the call that spawned it: the first call of the parent still waiting for its result
        # and without a child yet (the runtime registers the child while the call runs)
        host = next((c for c in parent.pending if not c["children"]), None)
        if host is None:
            host = next((c for c in parent.calls.values() if not c["children"] and child_id in (c.get("result") or "")), None)
        (host["children"] if host is not None else parent.entries).append(node)

    for record in records:
        if "transcript" in record and isinstance(record["transcript"], dict):
            sid = record["transcript"].get("session_id")
            if isinstance(sid, str) and root_id is None:
                session(sid)
            continue
        if "truncated" in record:
            truncated = record["truncated"]
            continue
        cut = record.get("cut_line") or record.get("cut_transcript")
        if isinstance(cut, dict):  # read_transcript_bounded left a line (or the rest) out
            where = f"line {cut.get('line')} of the transcript" if "cut_line" in record else "the rest of the transcript"
            top.append({"k": "notice", "text": f"[{where} ({cut.get('bytes')} bytes) is over the {cut.get('limit')}-byte "
                                                f"bound of what is read: left out]"})
            continue
        method, params = record.get("method"), record.get("params")
        if not isinstance(params, dict):
            continue
        if method == "subagent.started":
            child(str(params.get("parentSessionId")), str(params.get("childSessionId")), None)
            continue
        if method == "subagent.finished":
            finished[str(params.get("childSessionId"))] = params
            continue
        if method != "session.event" or budget.cut:
            continue
        target = session(str(params.get("sessionId")))
        event = params.get("event")
        if target is None or not isinstance(event, dict):
            continue
        kind, data = event.get("type"), event.get("data")
        if not isinstance(data, dict):
            continue
        if kind == "user/message":
            source = _map(data.get("source"))
            if source.get("kind") == "user":
                add(target, {"k": "user", "text": _blocks_text(data.get("content"))}, "text")
            elif source.get("kind") == "subagent-settled":
                add(target, {"k": "notice", "text": _blocks_text(data.get("content"))}, "text")
        elif kind == "assistant/message":
            message = _map(data.get("message"))
            for block in message.get("content") or ():
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "reasoning":
                    add(target, {"k": "reasoning", "text": block.get("text")}, "text")
                elif block.get("type") == "text":
                    add(target, {"k": "text", "text": block.get("text")}, "text")
                elif block.get("type") == "tool-call":
                    call: dict[str, Any] = {"k": "tool", "id": block.get("id"), "name": block.get("name"), "args": block.get("arguments"),
                            "result": None, "is_error": False, "approvals": [], "children": []}
                    if call["name"] in QUESTION_TOOLS:
                        call["questions"], call["asks"] = [], _asked(block.get("arguments"))
                    if add(target, call, "args"):
                        target.calls[str(call["id"])] = call
                        target.pending.append(call)
        elif kind == "tool/result":
            message = _map(data.get("message"))
            call_id = str(message.get("toolCallId") or _map(message.get("source")).get("callId"))
            called = target.calls.get(call_id)
            if called is None:
                continue
            text = budget.text(_blocks_text(message.get("content")))
            called["result"] = text if text is not None else "[cut: the report's bound for this item was reached]"
            called["is_error"] = bool(message.get("isError")) or isinstance(data.get("error"), dict)
            if called in target.pending:
                target.pending.remove(called)
        elif kind == "subagent/catalog":
            child(str(params.get("sessionId")), str(data.get("childId")), data.get("label"))
        elif kind == "approval/asked":
            approval: dict[str, Any] = {"k": "approval", "id": data.get("id"), "tool": data.get("toolName"), "call_id": data.get("callId"),
                        "reason": data.get("reason"), "outcome": None, "rule": rules.get(str(data.get("callId")))}
            target.asked[str(data.get("id"))] = approval
            spawning = target.calls.get(str(data.get("callId")))
            if spawning is not None:
                spawning["approvals"].append(approval)
            else:
                target.entries.append(approval)
        elif kind == "approval/decided":
            asked = target.asked.get(str(data.get("id")))
            if asked is not None:
                asked["outcome"] = data.get("outcome")
        elif kind == "turn/end":
            reason = _map(data.get("reason"))
            if reason.get("kind") not in (None, "completed"):
                error = _map(reason.get("error"))
                detail = f": {error.get('code')}: {error.get('message')}" if error else ""
                add(target, {"k": "notice", "text": f"turn ended: {reason.get('kind')}{detail}"}, "text")
    for child_id, params in finished.items():
        _set_status(top, child_id, params.get("status"), params.get("stopReason"))
    for record in (line or {}).get("questions") or ():
        if not isinstance(record, dict):
            continue
        owner = sessions.get(str(record.get("session"))) or (sessions.get(root_id) if root_id is not None else None)
        entry = question_entry(record, budget)
        asked = next((c for c in (owner.calls.values() if owner else ()) if "asks" in c and len(c["questions"]) < len(c["asks"])), None)
        if asked is not None:
            spec = asked["asks"][len(asked["questions"])]  # what the call asked: the options the line's record leaves out
            if not entry["options"]:
                entry["options"] = [str(o.get("label")) if isinstance(o, dict) else str(o) for o in spec.get("options") or ()]
            asked["questions"].append(entry)
        else:
            (owner.entries if owner is not None else top).append(entry)
    return {"entries": top, "cut": budget.cut, "truncated": truncated, "source": "transcript"}


def _asked(args: Any) -> list[dict[str, Any]]:
    """The questions a question tool's call asks (its ``questions`` argument; one unknown
    question when it cannot be read)."""
    if isinstance(args, str):
        try:
            args = orjson.loads(args)
        except orjson.JSONDecodeError:
            args = None
    asked = args.get("questions") if isinstance(args, dict) else None
    found: list[dict[str, Any]] = [q if isinstance(q, dict) else {} for q in asked] if isinstance(asked, list) else []
    return found or [{}]


def _walk(entries: list[dict[str, Any]]) -> Any:
    for entry in entries:
        yield entry
        if entry["k"] == "tool":
            yield from _walk(entry["children"])
        elif entry["k"] == "subagent":
            yield from _walk(entry["entries"])


def _set_status(top: list[dict[str, Any]], child_id: str, status: Any, stop: Any) -> None:
    for entry in _walk(top):
        if entry["k"] == "subagent" and entry["session"] == child_id:
            entry["status"], entry["stop_reason"] = status, stop


def line_entries(line: Mapping[str, Any], prompt: str | None, *, max_text: int = 20_000) -> dict[str, Any]:
    """The conversation the result line alone gives (no transcript): the prompt, the approvals,
    the subagents with their last text, the final response."""
    budget = _Budget(10 * max_text, max_text)
    entries: list[dict[str, Any]] = []
    if prompt is not None:
        entries.append({"k": "user", "text": budget.text(prompt) or ""})
    for approval in line.get("approvals") or ():
        if isinstance(approval, dict):
            entries.append({"k": "approval", "id": None, "tool": approval.get("tool_name"), "call_id": approval.get("call_id"),
                            "reason": None, "outcome": approval.get("outcome"), "rule": approval.get("rule")})
    for record in line.get("questions") or ():
        if isinstance(record, dict):
            entries.append(question_entry(record, budget))
    for sub in line.get("subagents") or ():
        if isinstance(sub, dict):
            inner = [{"k": "text", "text": budget.text(sub.get("text")) or ""}] if sub.get("text") else []
            entries.append({"k": "subagent", "session": sub.get("child_session_id"), "label": None, "status": sub.get("status"),
                            "stop_reason": sub.get("stop_reason"), "entries": inner})
    if isinstance(line.get("final_response"), str) and line["final_response"]:
        entries.append({"k": "text", "text": budget.text(line["final_response"]) or ""})
    return {"entries": entries, "cut": budget.cut, "truncated": None, "source": "results"}

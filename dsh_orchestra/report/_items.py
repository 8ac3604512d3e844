"""The item table of a batch report: one row per result line (each epoch its own), with a
column per score, previews of the prompt and response, and each row's details (the scores
with their answers and explanations, usage, and the conversation).

Rows are lists in ``columns`` order; ``score:<name>`` columns hold that scorer's value. The
``target`` and ``choices`` columns (from the dataset) are there when an item has them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..batch import transcript_name
from ._common import clip, number, transcript_link
from ._conversation import DEFAULT_MAX_CHARS, line_entries, transcript_entries
from ._evaluation import score_value
from ._transcript import read_transcript_bounded

PREVIEW = 120  # characters of the prompt / response shown in the table
SCORE_PREFIX = "score:"


def transcript_key(line: Mapping[str, Any]) -> str:
    """The name a line's transcript was written under: its id, ``<id>#<epoch>`` with epochs."""
    epoch = line.get("epoch")
    return f"{line.get('id')}#{epoch}" if isinstance(epoch, int) and not isinstance(epoch, bool) else str(line.get("id"))


def expected_text(value: Any) -> str | None:
    """A target or the choices as one line: a list's entries joined by `` | ``."""
    if value is None:
        return None
    if isinstance(value, list):
        return " | ".join(str(v) for v in value)
    return str(value)


def table_columns(
    lines: Sequence[Mapping[str, Any]], scorers: Sequence[str], *, prompts: bool,
    expected: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """The item table's columns for these lines."""
    columns = ["id", "status"]
    if any("epoch" in line for line in lines):
        columns.append("epoch")
    columns += [SCORE_PREFIX + name for name in scorers]
    if prompts:
        columns.append("prompt")
    for key in ("target", "choices"):
        if expected and any(key in fields for fields in expected.values()):
            columns.append(key)
    columns += ["response", "duration_s"]
    if any(isinstance(line.get("usage"), dict) for line in lines):
        columns.append("tokens")
    if any("cost_usd" in line for line in lines):
        columns.append("cost_usd")
    columns.append("finish_reason")
    # the counts only where one tells something (a retry, a subagent, an approval): the details show them all
    if any(isinstance(line.get("attempts"), int) and line["attempts"] > 1 for line in lines):
        columns.append("attempts")
    columns += [key for key in ("subagents", "approvals") if any(line.get(key) for line in lines)]
    return columns + ["error"]


def _scores(line: Mapping[str, Any], scorers: Sequence[str], max_text: int) -> dict[str, Any]:
    scores = line.get("scores") if isinstance(line.get("scores"), dict) else {}
    out = {}
    for name in scorers:
        record = scores.get(name) if isinstance(scores, dict) else None
        if not isinstance(record, dict):
            continue
        out[name] = {
            "value": number(record.get("value")),
            "answer": clip(record.get("answer"), max_text)[0],
            "explanation": clip(record.get("explanation"), max_text)[0],
        }
    return out


def _conversation(
    line: Mapping[str, Any], prompt: str | None, transcripts: Path | None, *, max_text: int, max_transcript: int
) -> dict[str, Any]:
    if transcripts is not None:
        path = transcripts / transcript_name(transcript_key(line))
        if path.is_file():
            try:
                records = read_transcript_bounded(path)
            except (OSError, ValueError, EOFError) as exc:
                fallback = line_entries(line, prompt, max_text=max_text)
                fallback["problem"] = f"the transcript could not be read: {exc}"
                return fallback
            return transcript_entries(records, line, max_chars=max_transcript, max_text=max_text)
    return line_entries(line, prompt, max_text=max_text)


MAX_DETAILS = 20_000
"""Items whose details (drawer: conversation, scores' answers, full texts) a report embeds."""


def detailed_lines(lines: Sequence[Mapping[str, Any]], scorers: Sequence[str], limit: int) -> set[int] | None:
    """The lines (positions) whose details a report of more than ``limit`` lines embeds: those
    not ok first, then those with a scorer's value below 1, then the rest in file order; None
    when every line's are."""
    if len(lines) <= limit:
        return None

    def rank(position: int) -> tuple[int, int]:
        line = lines[position]
        if line.get("status") != "ok":
            return (0, position)
        values = [score_value(line, name) for name in scorers]
        return (1 if any(isinstance(v, (int, float)) and v < 1 for v in values) else 2, position)

    return set(sorted(range(len(lines)), key=rank)[:limit])


def item_table(
    lines: Sequence[Mapping[str, Any]],
    scorers: Sequence[str],
    *,
    prompts: Mapping[str, str] | None,
    transcripts: Path | None,
    out_dir: Path,
    max_text: int,
    max_transcript: int = DEFAULT_MAX_CHARS,
    expected: Mapping[str, Mapping[str, Any]] | None = None,
    max_details: int | None = None,
) -> tuple[list[str], list[list[Any]], list[dict[str, Any] | None]]:
    """The columns, the rows and each row's details (``expected``: the dataset's target and
    choices by item id). Past ``max_details`` items (default ``MAX_DETAILS``) only the worst
    keep their details (``detailed_lines``); the others' are None (their row stays)."""
    columns = table_columns(lines, scorers, prompts=prompts is not None, expected=expected)
    rows: list[list[Any]] = []
    details: list[dict[str, Any] | None] = []
    detailed = detailed_lines(lines, scorers, MAX_DETAILS if max_details is None else max_details)
    for position, line in enumerate(lines):
        item_id = str(line.get("id"))
        error = line.get("error") if isinstance(line.get("error"), dict) else None
        subagents = [s for s in (line.get("subagents") or []) if isinstance(s, dict)]
        approvals = [a for a in (line.get("approvals") or []) if isinstance(a, dict)]
        usage = line.get("usage") if isinstance(line.get("usage"), dict) else None
        prompt_full = prompts.get(item_id) if prompts is not None else None
        response_full = line.get("final_response") if isinstance(line.get("final_response"), str) else None
        fields = (expected or {}).get(item_id) or {}
        cells: dict[str, Any] = {
            "id": item_id,
            "status": str(line.get("status")),
            "epoch": line.get("epoch") if isinstance(line.get("epoch"), int) else None,
            "prompt": clip(prompt_full, PREVIEW)[0],
            "target": clip(expected_text(fields.get("target")), PREVIEW)[0],
            "choices": clip(expected_text(fields.get("choices")), PREVIEW)[0],
            "response": clip(response_full, PREVIEW)[0],
            "duration_s": number(line.get("duration_s")),
            "tokens": number(usage.get("total_tokens")) if usage is not None else None,
            "cost_usd": number(line.get("cost_usd")),
            "finish_reason": line.get("finish_reason") if isinstance(line.get("finish_reason"), str) else None,
            "attempts": line.get("attempts") if isinstance(line.get("attempts"), int) else None,
            "subagents": len(subagents),
            "approvals": len(approvals),
            "error": str(error.get("type")) if error is not None else None,
        }
        for name in scorers:
            cells[SCORE_PREFIX + name] = score_value(line, name)
        rows.append([cells[c] for c in columns])
        if detailed is not None and position not in detailed:
            details.append(None)
            continue
        response, response_cut = clip(response_full, max_text)
        prompt, prompt_cut = clip(prompt_full, max_text)
        detail: dict[str, Any] = {
            "session_id": line.get("session_id"),
            "attempts": cells["attempts"],
            "final_response": response,
            "final_response_cut": response_cut,
            "subagents": [
                {"child_session_id": s.get("child_session_id"), "status": s.get("status"), "stop_reason": s.get("stop_reason"),
                 "text": clip(s.get("text"), max_text)[0]}
                for s in subagents
            ],
            "approvals": [{k: a.get(k) for k in ("tool_name", "call_id", "outcome", "rule")} for a in approvals],
            "error": {"type": error.get("type"), "message": clip(error.get("message"), max_text)[0]} if error is not None else None,
            "metadata": line.get("metadata") if isinstance(line.get("metadata"), dict) else {},
            "transcript": transcript_link(transcripts, out_dir, transcript_key(line)),
            "scores": _scores(line, scorers, max_text),
            "usage": dict(usage) if usage is not None else None,
            "cost_usd": number(line.get("cost_usd")),
            "conversation": _conversation(line, prompt_full, transcripts, max_text=max_text, max_transcript=max_transcript),
            "target": fields.get("target"),
            "choices": fields.get("choices"),
        }
        if prompts is not None:
            detail["prompt"] = prompt
            detail["prompt_cut"] = prompt_cut
        details.append(detail)
    return columns, rows, details

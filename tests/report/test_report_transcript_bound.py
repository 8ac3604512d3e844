"""``report`` bounds what it reads of a transcript: a line longer than the bound is left out
with a note (never held whole), the whole transcript stops at a bound with a note."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from dsh_orchestra.batch._transcripts import transcript_name
from dsh_orchestra.report import build_payload, read_transcript_bounded, transcript_entries


def event(session: str, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"method": "session.event", "params": {"sessionId": session, "event": {"type": kind, "data": data}}}


def user(text: str) -> dict[str, Any]:
    return event("s1", "user/message", {"source": {"kind": "user"}, "content": [{"type": "text", "text": text}]})


def assistant(text: str) -> dict[str, Any]:
    return event("s1", "assistant/message", {"message": {"content": [{"type": "text", "text": text}]}})


def write_transcript(path: Path, records: list[Any]) -> Path:
    """Records (dicts, or raw bytes written as one line), gzip-compressed a line at a time."""
    with gzip.open(path, "wb") as handle:
        for record in records:
            handle.write((record if isinstance(record, bytes) else orjson.dumps(record)) + b"\n")
    return path


def test_a_long_line_is_cut_with_a_note(tmp_path: Path) -> None:
    path = write_transcript(tmp_path / "t.jsonl.gz", [
        {"transcript": {"version": 1, "item": "a", "session_id": "s1"}}, user("the question"),
        assistant("x" * 5000), assistant("the answer"),
    ])
    records = read_transcript_bounded(path, max_line=1000)
    assert records[2] == {"cut_line": {"line": 3, "bytes": len(orjson.dumps(assistant("x" * 5000))) + 1, "limit": 1000}}
    conversation = transcript_entries(records)
    kinds = [(e["k"], e["text"]) for e in conversation["entries"]]
    assert kinds[0] == ("user", "the question") and kinds[-1] == ("text", "the answer")
    assert kinds[1][0] == "notice" and "line 3 of the transcript" in kinds[1][1] and "1000-byte bound" in kinds[1][1]
    # the whole transcript has a bound too
    records = read_transcript_bounded(path, max_line=10_000, max_bytes=300)
    assert "cut_transcript" in records[-1] and all("cut_line" not in r for r in records)
    assert "the rest of the transcript" in transcript_entries(records)["entries"][-1]["text"]


def test_a_huge_line_is_read_past_not_held(tmp_path: Path) -> None:
    """A 64 MiB line (a few KiB compressed) read with a 1 MiB bound: memory stays small."""
    path = tmp_path / "big.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(orjson.dumps(user("first")) + b"\n")
        handle.write(b'{"method": "session.event", "params": {"text": "')
        block = b"y" * (1 << 20)
        for _ in range(64):
            handle.write(block)
        handle.write(b'"}}\n' + orjson.dumps(assistant("after")) + b"\n")
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        records = read_transcript_bounded(path, max_line=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"reading held {peak / 2**20:.1f} MiB"
    assert [next(iter(r)) for r in records] == ["method", "cut_line", "method"]
    assert records[1]["cut_line"]["bytes"] > 64 << 20


def test_the_report_shows_the_note(tmp_path: Path, monkeypatch: Any) -> None:
    """End to end: ``build_payload`` with transcripts, the bound lowered for the test."""
    monkeypatch.setattr("dsh_orchestra.report._transcript.MAX_LINE_BYTES", 2000)
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    write_transcript(transcripts / transcript_name("a"), [
        {"transcript": {"version": 1, "item": "a", "session_id": "s1"}}, user("q"), assistant("z" * 10_000), assistant("done"),
    ])
    results = tmp_path / "results.jsonl"
    results.write_bytes(orjson.dumps({"id": "a", "status": "ok", "session_id": "s1", "final_response": "done", "finish_reason": "completed",
                                      "subagents": [], "approvals": [], "attempts": 1, "duration_s": 0.5, "error": None, "metadata": {}}) + b"\n")
    payload = build_payload(results=results, transcripts=transcripts)
    text = orjson.dumps(payload).decode()
    assert "over the 2000-byte bound of what is read: left out" in text and "z" * 3000 not in text

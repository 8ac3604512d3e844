"""The audit log (JSON Lines, flushed per line, redacted), read_audit and replay."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from dsh_orchestra.approvals import (
    ALLOWED_ONCE,
    REJECTED,
    AuditLog,
    DecisionRecord,
    allow_tools,
    budget,
    deny_tools,
    first_match,
    read_audit,
    redact_text,
    replay,
)


def record(n: int, tool: str = "bash", outcome: str = REJECTED, session: str = "s1", **extra: object) -> DecisionRecord:
    values: dict[str, object] = dict(
        time=f"2026-01-01T00:00:0{n}.000Z", runtime="rt", session_id=session, tool_name=tool, call_id=f"c{n}",
        reason="escalate", outcome=outcome, rule="old-rule", note="", latency_s=0.001 * n,
    )
    values.update(extra)
    return DecisionRecord(**values)  # type: ignore[arg-type]


def test_each_record_is_one_flushed_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.write(record(1))
    assert path.read_bytes().count(b"\n") == 1  # readable before close: flushed per line
    log.write(record(2, outcome=ALLOWED_ONCE))
    first, second = (orjson.loads(line) for line in path.read_bytes().splitlines())
    assert first["call_id"] == "c1" and second["outcome"] == ALLOWED_ONCE
    log.close()
    assert [r.call_id for r in read_audit(path)] == ["c1", "c2"]
    with AuditLog(path) as again:  # appends
        again.write(record(3))
    assert len(read_audit(path)) == 3


def test_every_string_field_loses_known_secrets() -> None:
    stream = io.BytesIO()
    log = AuditLog(stream=stream, secrets=["SeCrEt-VaLuE-1"])
    log.add_secrets(["other-secret-2", ""])
    log.write(record(1, session="s-SeCrEt-VaLuE-1", reason="key SeCrEt-VaLuE-1, Bearer abc.def, token=xyz", note="other-secret-2",
                     error="sk-abcdefghijkl leaked"))
    text = stream.getvalue().decode()
    for leaked in ("SeCrEt-VaLuE-1", "other-secret-2", "abc.def", "xyz", "sk-abcdefghijkl"):
        assert leaked not in text
    assert orjson.loads(text)["session"] == "s-***"


def test_redact_text() -> None:
    assert redact_text(None) is None
    assert redact_text("api_key: 12345 and password=pw") == "*** and ***"
    assert redact_text("my-token-value", ["token-value"], patterns=False) == "my-***"
    with pytest.raises(ValueError):
        AuditLog()


def test_read_audit_skips_a_torn_last_line_but_not_a_bad_middle_one(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    good = orjson.dumps(record(1).to_json())
    path.write_bytes(good + b"\n" + good[:20])
    assert len(read_audit(path)) == 1
    path.write_bytes(good + b"\n{not json}\n" + good + b"\n")
    with pytest.raises(ValueError, match="line 2 is not an audit record"):
        read_audit(path)
    bad_outcome = orjson.dumps({**record(1).to_json(), "outcome": "maybe"})
    path.write_bytes(bad_outcome + b"\n" + good + b"\n")
    with pytest.raises(ValueError, match="line 1"):
        read_audit(path)


def test_records_round_trip() -> None:
    original = record(4, outcome=ALLOWED_ONCE, error="x", via="relay")
    assert DecisionRecord.from_json(orjson.loads(orjson.dumps(original.to_json()))) == original


async def test_replay_reports_the_decisions_that_would_change() -> None:
    records = [record(1, "read", ALLOWED_ONCE), record(2, "bash", REJECTED), record(3, "bash", ALLOWED_ONCE)]
    same = await replay(records, first_match(allow_tools("read"), allow_tools("bash")))
    assert (same.total, same.unchanged) == (3, 2) and [c.record.call_id for c in same.changed] == ["c2"]
    assert same.changed[0].new_outcome == ALLOWED_ONCE and same.changed[0].new_rule == "allow-tools"
    strict = await replay(records, first_match(deny_tools("*", name="nothing")))
    assert [c.record.call_id for c in strict.changed] == ["c1", "c3"]
    text = strict.to_text(source="a.jsonl", policy="strict.toml")
    assert text.splitlines()[0] == "replayed 3 decisions from a.jsonl against strict.toml: 2 would change, 1 unchanged"
    assert "session s1 tool read call c1: allowed-once (rule 'old-rule') -> rejected (rule 'nothing')" in text
    summary = strict.to_json()
    assert (summary["total"], summary["changed"], summary["unchanged"]) == (3, 2, 1)
    assert summary["changes"][0]["old_outcome"] == ALLOWED_ONCE and summary["changes"][0]["new_outcome"] == REJECTED


async def test_replay_fails_closed_and_keeps_order_for_stateful_policies() -> None:
    def broken(request: object) -> object:
        raise RuntimeError("bad policy")

    report = await replay([record(1, outcome=ALLOWED_ONCE)], broken)
    (change,) = report.changed
    assert change.new_outcome == REJECTED and change.new_rule == "fail-closed" and "bad policy" in (change.new_error or "")
    allowed = [record(n, outcome=ALLOWED_ONCE) for n in range(1, 4)]
    capped = await replay(allowed, budget(allow_tools("bash"), 2, tools="bash"))
    assert [c.record.call_id for c in capped.changed] == ["c3"]

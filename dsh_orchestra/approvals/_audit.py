"""The decision audit log (JSON Lines, flushed per line, secrets redacted) and ``replay``.

Imports only the protocol layer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import IO, Any, Iterable

import attrs
import orjson

from ._model import REJECTED, DecisionRecord, Policy
from ._policies import call_policy

_SECRETISH = re.compile(
    r"(?i)(sk-[A-Za-z0-9_\-]{8,}|(?:api[_-]?key|token|secret|password)\s*[=:]\s*\S+|bearer\s+\S+)"
)


def redact_text(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """Replace known secret values and secret-looking tokens with ``***``."""
    if text is None:
        return None
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _SECRETISH.sub("***", text)


class AuditLog:
    """Appends one JSON line per decision and flushes it, so a crash loses nothing decided."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, stream: IO[bytes] | None = None, secrets: Iterable[str] = ()) -> None:
        if (path is None) == (stream is None):
            raise ValueError("give AuditLog either a path or a binary stream")
        self.path = Path(path) if path is not None else None
        self._stream: IO[bytes] = stream if stream is not None else open(path, "ab")  # type: ignore[arg-type]
        self._owns = stream is None
        self.secrets = [s for s in secrets if s]

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Also redact these values."""
        self.secrets.extend(s for s in secrets if s and s not in self.secrets)

    def write(self, record: DecisionRecord) -> None:
        """Append ``record`` as one flushed line."""
        line = record.to_json()
        for key in ("reason", "note", "error", "call_id"):
            line[key] = redact_text(line[key], self.secrets)
        self._stream.write(orjson.dumps(line) + b"\n")
        self._stream.flush()

    def close(self) -> None:
        """Close the file (if this log opened it)."""
        if self._owns:
            self._stream.close()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_audit(path: str | os.PathLike[str]) -> list[DecisionRecord]:
    """Read an audit log; a torn last line (crash mid-write) is skipped.

    Raises:
        ValueError: a complete line is not a valid record (its line number is named).
    """
    records = []
    lines = Path(path).read_bytes().split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(DecisionRecord.from_json(orjson.loads(line)))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if number == len(lines):  # the last line had no newline: torn by a crash
                break
            raise ValueError(f"{path}: line {number} is not an audit record: {exc}") from exc
    return records


@attrs.frozen(kw_only=True)
class ReplayChange:
    """One recorded decision that the new policy decides differently."""

    record: DecisionRecord
    new_outcome: str
    new_rule: str
    new_error: str | None = None


@attrs.frozen(kw_only=True)
class ReplayReport:
    """What ``replay`` found: how many decisions, and which would change."""

    total: int
    changed: tuple[ReplayChange, ...]

    @property
    def unchanged(self) -> int:
        return self.total - len(self.changed)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "total": self.total,
            "changed": len(self.changed),
            "unchanged": self.unchanged,
            "changes": [
                {
                    "session": c.record.session_id,
                    "tool": c.record.tool_name,
                    "call_id": c.record.call_id,
                    "old_outcome": c.record.outcome,
                    "old_rule": c.record.rule,
                    "new_outcome": c.new_outcome,
                    "new_rule": c.new_rule,
                    "new_error": c.new_error,
                }
                for c in self.changed
            ],
        }


async def replay(records: Iterable[DecisionRecord], policy: Policy) -> ReplayReport:
    """Run ``policy`` over recorded decisions (in order) and report which would change.

    A policy that raises or returns something invalid counts as ``rejected`` (fail closed).
    """
    from ._service import coerce_decision

    changed = []
    total = 0
    for record in records:
        total += 1
        error = None
        try:
            decision, error = coerce_decision(await call_policy(policy, record.request()))
        except Exception as exc:  # noqa: BLE001 (fail closed, reported)
            decision, error = None, f"{type(exc).__name__}: {exc}"
        outcome = decision.outcome if decision is not None else REJECTED
        rule = decision.rule if decision is not None else "fail-closed"
        if outcome != record.outcome:
            changed.append(ReplayChange(record=record, new_outcome=outcome, new_rule=rule, new_error=error))
    return ReplayReport(total=total, changed=tuple(changed))

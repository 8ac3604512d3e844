"""The decision audit log (JSON Lines, flushed per line, secrets redacted) and ``replay``.

Imports only the protocol layer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, Iterable

import attrs
import orjson

from .._redact import Redactor
from ._model import REJECTED, DecisionRecord, Policy


def redact_text(text: str | None, secrets: Iterable[str] = (), *, patterns: bool = True) -> str | None:
    """Replace known secret values (and, with ``patterns``, secret-looking tokens) with ``***``."""
    return Redactor(secrets, patterns=patterns).optional(text)


_FREE_TEXT = ("reason", "note", "error")
"""Audit fields that carry prose: secret-looking tokens are redacted there as well."""


class AuditLog:
    """Appends one JSON line per decision and flushes it, so a crash loses nothing decided.

    Every string field is redacted: the known ``secrets`` everywhere (the runtime spec's api key
    and secret-looking env values are added by the service), secret-looking tokens
    (``sk-...``, ``token=...``, ``Bearer ...``) in the free-text fields.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, stream: IO[bytes] | None = None, secrets: Iterable[str] = ()) -> None:
        if (path is None) == (stream is None):
            raise ValueError("give AuditLog either a path or a binary stream")
        self.path = Path(path) if path is not None else None
        self._stream: IO[bytes] = stream if stream is not None else open(self.path, "ab")  # type: ignore[arg-type]
        self._owns = stream is None
        self._redactor = Redactor(secrets)

    @property
    def secrets(self) -> list[str]:
        """The values redacted everywhere, longest first."""
        return self._redactor.secrets

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Also redact these values."""
        self._redactor.add(secrets)

    def write(self, record: DecisionRecord) -> None:
        """Append ``record`` as one flushed line."""
        line = record.to_json()
        for key, value in line.items():
            if isinstance(value, str) and key not in ("time", "outcome"):
                line[key] = self._redactor.text(value, patterns=key in _FREE_TEXT)
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
        """How many decisions the new policy decides the same way."""
        return self.total - len(self.changed)

    def to_text(self, *, source: str = "the audit log", policy: str = "the new policy") -> str:
        """A readable report: one summary line, then one line per decision that would change."""
        lines = [
            f"replayed {self.total} decision{'s' if self.total != 1 else ''} from {source} against {policy}: "
            f"{len(self.changed)} would change, {self.unchanged} unchanged"
        ]
        for change in self.changed:
            r = change.record
            where = f"session {r.session_id} tool {r.tool_name}" + (f" call {r.call_id}" if r.call_id else "")
            line = (f"  {r.time}  {where}: {r.outcome} (rule {r.rule!r}) -> "
                    f"{change.new_outcome} (rule {change.new_rule!r})")
            if change.new_error:
                line += f" [error: {change.new_error}]"
            lines.append(line)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "total": self.total,
            "changed": len(self.changed),
            "unchanged": self.unchanged,
            "changes": [
                {
                    "time": c.record.time,
                    "runtime": c.record.runtime,
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


async def replay(records: Iterable[DecisionRecord], policy: Policy, *, deadline: float | None = None) -> ReplayReport:
    """Run ``policy`` over recorded decisions (in order) and report which would change.

    Each decision gets the same treatment as live: ``deadline`` (default: the policy's own, else
    ``DEFAULT_DEADLINE``), and a policy that raises, returns something invalid or takes too long
    counts as ``rejected`` (fail closed), with the error in the change.
    """
    from ._service import DEFAULT_DEADLINE, decide

    given = deadline if deadline is not None else getattr(policy, "deadline", None)
    limit = float(given) if given is not None else DEFAULT_DEADLINE
    changed = []
    total = 0
    for record in records:
        total += 1
        decision, error = await decide(policy, record.request(), limit)
        outcome = decision.outcome if decision is not None else REJECTED
        rule = decision.rule if decision is not None else "fail-closed"
        if outcome != record.outcome:
            changed.append(ReplayChange(record=record, new_outcome=outcome, new_rule=rule, new_error=error))
    return ReplayReport(total=total, changed=tuple(changed))

"""The decision audit log (JSON Lines, flushed per line, secrets redacted) and ``replay``.

Imports only the protocol layer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Iterable

import orjson

from .._params import Param, ParamValueError
from .._redact import Redactor
from ._model import DecisionRecord


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
            raise ParamValueError("give AuditLog either a ", Param("path", spelled="path"), " or a binary ", Param("stream", spelled="stream"))
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

"""One redactor for every writer: known secret values, and optionally secret-looking tokens.

Pure string logic (no I/O, no imports from the package), so every layer can use it: the
runtime spec's repr and command line, the runtime's stderr tail, the audit log, log records
and transcripts all redact through ``Redactor``.
"""

from __future__ import annotations

import base64
import math
import re
from typing import Any, Iterable, Mapping

REDACTED = "***"
SECRET_LOOKING = re.compile(
    r"(?i)(sk-[A-Za-z0-9_\-]{8,}|(?:api[_-]?key|token|secret|password)\s*[=:]\s*\S+|bearer\s+\S+)"
)
"""Tokens that look like secrets whatever their value: ``sk-...``, ``token=...``, ``Bearer ...``."""

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH|(?:^|_)PAT(?:_|$)", re.IGNORECASE)
"""Names of environment variables whose values are secrets (``PAT`` as a word: ``GH_PAT``, not ``PATH``)."""

MIN_ENTROPY_LENGTH = 24
"""A value of an environment variable with any name is a secret when it is at least this long
and looks random (``looks_random``)."""

_RANDOM_CHARS = re.compile(r"[A-Za-z0-9_\-+=.~]+")


def looks_random(value: str) -> bool:
    """A long token that looks random: ``MIN_ENTROPY_LENGTH`` characters or more of letters,
    digits and ``_-+=.~`` only (no path, no spaces), letters and digits both, and at least 3.5
    bits of Shannon entropy per character (an API key, not a word or a version string)."""
    if len(value) < MIN_ENTROPY_LENGTH or not _RANDOM_CHARS.fullmatch(value):
        return False
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    size = len(value)
    entropy = -sum(n / size * math.log2(n / size) for n in counts.values())
    return entropy >= 3.5


def encoded_forms(secrets: Iterable[str]) -> list[str]:
    """Each secret, then its base64 forms (standard and URL-safe, without padding): a runtime
    or a tool that base64-encodes a credential must not carry it out either."""
    out: list[str] = []
    for secret in secrets:
        out.append(secret)
        raw = secret.encode("utf-8", "surrogatepass")
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            form = encode(raw).decode("ascii").rstrip("=")
            if len(form) >= 8 and form not in out:
                out.append(form)
    return out

MIN_INHERITED_SECRET = 8
"""Shorter values of secret-named variables are not taken as secrets (``...AUTH...=1``)."""


def environment_secrets(env: Mapping[str, str], *, min_length: int = MIN_INHERITED_SECRET) -> list[str]:
    """The values of ``env``'s secret-named variables at least ``min_length`` long, and of any
    variable whose value ``looks_random``, with their base64 forms (``encoded_forms``), longest first."""
    values = {v for k, v in env.items() if (SECRET_NAME.search(k) and len(v) >= min_length) or looks_random(v)}
    return sorted(set(encoded_forms(values)), key=len, reverse=True)


class Redactor:
    """Replaces known secret values (longest first) with ``***``; with ``patterns``, also
    every secret-looking token (``SECRET_LOOKING``).

    Values shorter than ``min_length`` are not registered (a short value would redact
    ordinary words). ``add`` registers more values later.
    """

    __slots__ = ("_secrets", "min_length", "patterns")

    def __init__(self, secrets: Iterable[str] = (), *, patterns: bool = False, min_length: int = 1) -> None:
        self._secrets: list[str] = []
        self.min_length = min_length
        self.patterns = patterns
        self.add(secrets)

    @property
    def secrets(self) -> list[str]:
        """The registered values, longest first."""
        return self._secrets

    def add(self, secrets: Iterable[str]) -> None:
        """Also redact these values."""
        added = False
        for value in secrets:
            if isinstance(value, str) and len(value) >= max(1, self.min_length) and value not in self._secrets:
                self._secrets.append(value)
                added = True
        if added:
            self._secrets.sort(key=len, reverse=True)  # longest first: no partial leftovers

    def clear(self) -> None:
        """Forget every registered value."""
        self._secrets.clear()

    def __bool__(self) -> bool:
        return bool(self._secrets) or self.patterns

    def text(self, text: str, *, patterns: bool | None = None) -> str:
        """``text`` with every secret replaced (``patterns``: this once, instead of ``self.patterns``)."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return SECRET_LOOKING.sub(REDACTED, text) if (self.patterns if patterns is None else patterns) else text

    def optional(self, text: str | None, *, patterns: bool | None = None) -> str | None:
        """As ``text``; None stays None."""
        return None if text is None else self.text(text, patterns=patterns)

    def value(self, value: Any) -> Any:
        """A JSON-like ``value`` with every string in it redacted (keys too); a new object when
        anything changed, ``value`` itself when there is nothing to redact."""
        if not self:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value

    def value_json(self, value: Any) -> tuple[Any, bytes]:
        """``value`` redacted (as ``value()``) and its compact JSON (``orjson.dumps``).

        Encoded once; the value is walked only when a secret's JSON text occurs in the
        encoding (JSON escapes a string character by character, so a secret inside any key or
        string shows there) or when ``patterns`` is on.
        """
        import orjson  # a dependency of the package; imported here to keep this module import-free

        data = orjson.dumps(value)
        if not self._secrets and not self.patterns:  # (``not self``, without the call)
            return value, data
        if not self.patterns and not any(orjson.dumps(secret)[1:-1] in data for secret in self._secrets):
            return value, data
        value = self.value(value)
        return value, orjson.dumps(value)

    def bytes(self, data: bytes) -> bytes:
        """UTF-8 ``data`` redacted (returned as is when there is nothing to redact)."""
        if not self:
            return data
        return self.text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def redact(text: str, secrets: Iterable[str], *, patterns: bool = False) -> str:
    """``text`` with every value of ``secrets`` (and, with ``patterns``, secret-looking tokens) replaced."""
    return Redactor(secrets, patterns=patterns).text(text)

"""What user scorer code may return, and what of its failures is kept: checks and caps.

Pure: no trio, no I/O. ``checked_record`` turns whatever a scorer returned into a result-line
record that JSON can always encode (or raises ``ScoreValueError``); ``USER_ERRORS`` are the
exceptions of user code that are that scorer's (or decision's) error, never the run's.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from ._score import Score, ScoreRecord, ScoreValueError, score_record

MAX_TEXT_BYTES = 64 * 1024
"""A score's ``answer`` and ``explanation`` are cut to this many UTF-8 bytes (with ``CUT_MARK``)."""

MAX_METADATA_BYTES = 64 * 1024
"""A score's ``metadata`` larger than this as JSON is replaced by an error note."""

CUT_MARK = " [... cut: {more} more bytes]"

USER_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit, KeyboardInterrupt, GeneratorExit)
"""What user code (a scorer, a policy, an answerer) may raise and have recorded as its own
error: every exception, ``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit`` included
(trio's ``Cancelled`` is not among them: it is the run's)."""


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of a user error (``SystemExit: 3``, ``KeyboardInterrupt``)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def plain_number(value: Any) -> Any:
    """A numpy scalar (``numpy.int64(1)``, ``numpy.bool_(True)``) as the Python number it holds;
    anything else as it is."""
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)) and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


def cut_text(text: str | None, limit: int = MAX_TEXT_BYTES) -> str | None:
    """``text`` cut to ``limit`` UTF-8 bytes (on a character boundary), ``CUT_MARK`` appended."""
    if text is None or len(text) * 4 <= limit:  # at most 4 bytes a character: surely under
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore")
    return kept + CUT_MARK.format(more=len(data) - len(kept.encode("utf-8", "surrogatepass")))


def _metadata(metadata: Any, who: str) -> Any:
    if not isinstance(metadata, dict):
        raise ScoreValueError(f"scorer {who!r} returned metadata of type {type(metadata).__name__}, expected a dict")
    try:
        encoded = orjson.dumps(metadata)
    except TypeError as exc:
        raise ScoreValueError(f"scorer {who!r} returned metadata that JSON cannot encode: {exc}") from None
    if len(encoded) > MAX_METADATA_BYTES:
        return {"error": f"the metadata of scorer {who!r} was {len(encoded)} bytes as JSON, over the "
                         f"{MAX_METADATA_BYTES} byte cap; it was dropped"}
    return orjson.loads(encoded)  # a plain copy: nothing of the user's objects stays


def checked_record(returned: Any, who: str) -> ScoreRecord:
    """The result line's record of what scorer ``who`` returned, checked and capped.

    A number (numpy scalars too), a bool, or a ``Score`` whose parts JSON can encode;
    ``answer`` and ``explanation`` are cut to ``MAX_TEXT_BYTES``; ``metadata`` larger than
    ``MAX_METADATA_BYTES`` as JSON is replaced by an error note.

    Raises:
        ScoreValueError: anything else (the scorer's error).
    """
    if type(returned) is Score:
        returned = attrs.evolve(returned, value=plain_number(returned.value))
    else:
        returned = plain_number(returned)
        if not isinstance(returned, (int, float, bool)):
            raise ScoreValueError(f"scorer {who!r} returned {type(returned).__name__}, expected "
                                  "dsh_orchestra.eval.Score, a number or a bool")
    record = score_record(returned, who)
    for key in ("answer", "explanation"):
        record[key] = cut_text(record.get(key))
    if "metadata" in record:
        record["metadata"] = _metadata(record["metadata"], who)
    return record

"""Helpers of the report's payload builders (the batch data, the item table, the comparison):
texts cut to a length, numbers checked, links to transcripts."""

from __future__ import annotations

import functools
import math
import os
import posixpath
import urllib.parse
from pathlib import Path
from typing import Any

from ..batch import transcript_name

DEFAULT_MAX_TEXT = 20_000  # characters of one prompt / response / subagent text kept in the report


def clip(text: Any, limit: int) -> tuple[str | None, int]:
    """``text`` cut to ``limit`` characters, and how many were cut."""
    if text is None:
        return None, 0
    text = text if isinstance(text, str) else str(text)
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@functools.lru_cache(maxsize=8)
def _relative_dir(transcripts: Path, out_dir: Path) -> str:
    """The transcripts directory relative to the report's (computed once per report)."""
    return Path(os.path.relpath(transcripts.absolute(), out_dir.absolute())).as_posix()


def transcript_link(transcripts: Path | None, out_dir: Path, item_id: str) -> str | None:
    if transcripts is None:
        return None
    name = transcript_name(item_id)
    if not (transcripts / name).is_file():
        return None
    return urllib.parse.quote(posixpath.normpath(f"{_relative_dir(transcripts, out_dir)}/{name}"))

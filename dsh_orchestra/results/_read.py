"""The one reader of results files: ``read_results`` streams ``ResultLine``s, line by line.

The rules are those of a resumed batch (``resume=True``): a last line without its newline that is not valid JSON is
torn (a crash while writing) and skipped (with ``repair`` cut off, and only when it is the start
of a result line, ``{"id":``: repair refuses anything else; a valid last line without its newline
gets it back); any other line that is not a result object of the documented schema
(``result_problem``) raises ``ResultsFileError`` naming the line, and the file is left as it was.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from ._line import ResultLine, structure_line

Check = Callable[[Any], "str | None"]

_TORN = re.compile(rb'\s*\{\s*"id"\s*:')  # how a result line begins (its first key is "id")
_START = b'{"id"'


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _list_problem(value: Any, key: str, fields: tuple[str, ...]) -> str | None:
    if not isinstance(value, list):
        return f"'{key}' must be a list, not {type(value).__name__}"
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            return f"'{key}[{index}]' must be an object, not {type(entry).__name__}"
        for name in fields:
            if entry.get(name) is not None and not isinstance(entry[name], str):
                return f"'{key}[{index}].{name}' must be a string or null, not {type(entry[name]).__name__}"
    return None


_OPTIONAL_TEXT = ("session_id", "final_response", "finish_reason")


def result_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a result object of the documented schema (None: it is one).

    Required: ``id`` (a non-empty string) and ``status`` (``"ok"`` or ``"error"``). The other
    documented keys may be missing (lines of earlier versions) but have their types when present;
    keys this version does not know (lines of later versions) are kept as they are.
    """
    if not isinstance(value, dict):
        return f"a result is a JSON object, not {type(value).__name__}"
    for key in ("id", "status"):
        if key not in value:
            return f"missing required field {key!r} (is this a results file?)"
    if not isinstance(value["id"], str) or not value["id"]:
        return f"'id' must be a non-empty string, not {value['id']!r}"
    if value["status"] not in ("ok", "error"):
        return f"'status' must be \"ok\" or \"error\", not {value['status']!r}"
    for key in _OPTIONAL_TEXT:
        text = value.get(key)
        if text is not None and type(text) is not str and not isinstance(text, str):
            return f"{key!r} must be a string or null, not {type(text).__name__}"
    if "attempts" in value:
        attempts = value["attempts"]
        if type(attempts) is not int or attempts < 1:  # (a bool's type is bool: refused, as below)
            if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
                return f"'attempts' must be an integer >= 1, not {attempts!r}"
    if "duration_s" in value:
        duration = value["duration_s"]
        if not (type(duration) is float and 0.0 <= duration < math.inf) and not (_is_number(duration) and duration >= 0):
            return f"'duration_s' must be a number >= 0, not {duration!r}"
    error = value.get("error")
    if error is not None:
        if not isinstance(error, dict):
            return f"'error' must be an object or null, not {type(error).__name__}"
        for key in ("type", "message"):
            if error.get(key) is not None and not isinstance(error[key], str):
                return f"'error.{key}' must be a string, not {type(error[key]).__name__}"
    if "metadata" in value and value["metadata"] is not None and not isinstance(value["metadata"], dict):
        return f"'metadata' must be an object, not {type(value['metadata']).__name__}"
    for key, fields in _LISTS:  # ("questions" was added after 0.1.0: older result lines lack it)
        if key in value:
            entries = value[key]
            if type(entries) is list and not entries:  # the common case: none
                continue
            problem = _list_problem(entries, key, fields)
            if problem:
                return problem
    return None


_LISTS = (
    ("subagents", ("child_session_id", "status", "stop_reason", "text")),
    ("approvals", ("tool_name", "call_id", "outcome", "rule")),
    ("questions", ("id", "question", "outcome", "custom", "answered_by")),
)


class ResultsFileError(ValueError):
    """A results file holds something that is not a result; ``path`` and ``line`` say where,
    ``problem`` what (``detail``: the JSON decoder's message, for a line that is not JSON)."""

    def __init__(self, path: str, line: int, problem: str, detail: str | None = None) -> None:
        super().__init__(f"{path}: line {line} is not a result line: {problem}; the file was left unchanged "
                         "(fix or remove that line, or give another results file)")
        self.path = path
        self.line = line
        self.problem = problem
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.line, self.problem, self.detail))


class ResultStream:
    """The lines of one results file, read as they are iterated (see ``read_results``).

    ``number``: the file line of the last line given, ``offset`` its first byte and ``raw`` its
    bytes as in the file (for an index of the file, or to copy lines unchanged); after the last
    one, ``count`` (lines given) and ``torn`` (bytes of a torn last line, skipped).
    """

    def __init__(self, path: Path, *, repair: bool, check: Check | None) -> None:
        self.path = path
        self.number = 0
        self.offset = 0
        self.raw = b""
        self.count = 0
        self.torn = 0
        self._repair = repair
        self._check = check

    def __iter__(self) -> Iterator[ResultLine]:
        return (structure_line(value) for value in self._objects())

    def objects(self) -> Iterator[dict[str, Any]]:
        """The same lines, by the same rules, as the JSON objects decoded (no ``ResultLine``
        made: for a reader that only passes the objects on, as the report's pages do)."""
        return self._objects()

    def _objects(self) -> Iterator[dict[str, Any]]:
        path, check = self.path, self._check
        if not path.exists():
            return
        torn = 0
        newline = False
        position = 0
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                start, position = position, position + len(line)
                last = not line.endswith(b"\n")
                if not line.strip():
                    torn = len(line) if last else 0
                    continue
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    if last and (not self._repair or _TORN.match(line) or _START.startswith(line.strip())):
                        torn = len(line)  # cut short by a crash
                        break
                    if last:  # repair cuts only what a crash can leave: the start of a result line
                        raise ResultsFileError(str(path), number, f"not valid JSON ({exc}), and not a result line cut "
                                               'short (one begins {"id":); a torn line is cut off, this one is not',
                                               str(exc)) from exc
                    raise ResultsFileError(str(path), number, f"not valid JSON ({exc})", str(exc)) from exc
                if check is not None:
                    problem = check(value)
                    if problem is not None:
                        raise ResultsFileError(str(path), number, problem)
                newline = last
                self.number = number
                self.offset = start
                self.raw = line
                self.count += 1
                yield value
        self.torn = torn
        if self._repair and torn:
            with open(path, "r+b") as handle:
                handle.truncate(path.stat().st_size - torn)
        elif self._repair and newline:
            with open(path, "ab") as handle:
                handle.write(b"\n")


def read_results(path: str | os.PathLike[str], *, repair: bool = False, check: Check | None = result_problem) -> ResultStream:
    """Every complete line of the results file ``path`` as a ``ResultLine``, in file order,
    read line by line as the returned ``ResultStream`` is iterated (memory stays flat: only
    the line at hand is held). A missing file has no lines.

    ``repair`` (what a resumed batch does) cuts a torn last line off, or restores a valid last
    line's newline, once every line was read and accepted; a last line cut short that is not the
    start of a result line (``{"id":``) is refused then, not cut. ``check`` (default
    ``result_problem``) says what is wrong with a decoded line (None: nothing).

    Raises (while iterating):
        ResultsFileError (a ValueError): a line is not valid JSON (but a torn last one) or
            ``check`` refuses it; the file is left unchanged.
        OSError: the file cannot be read.
    """
    return ResultStream(Path(path), repair=repair, check=check)

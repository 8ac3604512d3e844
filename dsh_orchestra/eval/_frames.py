"""Results, summaries and comparisons as tables (pyarrow, polars, pandas: the ``data`` extra).

``load_results(path)`` reads a results file with the reader ``score`` uses (complete lines,
a torn last line skipped, the first line of a repeated (id, epoch) kept) and flattens each
line into one row per (id, epoch): ``id``, ``epoch``, ``status``, ``finish_reason``,
``error.type``, ``error.message``, ``attempts``, ``duration_s``, ``session_id``,
``final_response``, ``usage.*``, ``cost_usd`` (and the judges' ``judge_usage.*``,
``judge_cost_usd`` when present), ``score.<name>`` and ``score.<name>.answer`` per scorer,
and ``metadata.<key>`` per metadata key. The libraries are imported only when a table is
asked for, with a message naming the extra when one is missing.
"""

from __future__ import annotations

import csv
import importlib
import io
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import orjson

from .. import _display
from .._display import html_table, text_table
from ..results import ResultLine
from ._rescore import RescoreError, numbered_lines

EXTRA = "data"
"""The optional extra that installs pyarrow, polars and pandas."""

BASE_COLUMNS = ("id", "epoch", "status", "finish_reason", "error.type", "error.message", "attempts", "duration_s",
                "session_id", "final_response")
USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")
TEXT_COLUMNS = frozenset(("id", "status", "finish_reason", "error.type", "error.message", "session_id", "final_response"))


def require(module: str, what: str) -> Any:
    """Import ``module`` for ``what``, or raise ImportError naming the ``data`` extra.

    Raises:
        ImportError: the module is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs {module}, which is not installed: pip install 'dsh-orchestra[{EXTRA}]' "
            f"(the optional extra with pyarrow, polars and pandas)", name=exc.name
        ) from None


class Frame:
    """A small column table (names in order, one list of values per column) that converts to
    pyarrow, polars or pandas; ``rows()`` gives plain dicts. Every column has one scalar type
    (``one_type``): nested values (lists, objects) and mixed types are kept as JSON text."""

    def __init__(self, columns: Mapping[str, Sequence[Any]], *, title: str = "") -> None:
        self.columns: dict[str, list[Any]] = {name: one_type(values) for name, values in columns.items()}
        lengths = {len(values) for values in self.columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        self.title = title
        self.text_columns: set[str] = set()  # string-typed even when every value is null

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    @property
    def names(self) -> list[str]:
        """The column names, in order."""
        return list(self.columns)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per row (column name -> value)."""
        names = self.names
        return [dict(zip(names, values, strict=True)) for values in zip(*self.columns.values(), strict=True)]

    def to_arrow(self) -> Any:
        """A ``pyarrow.Table`` (needs the ``data`` extra)."""
        pa = require("pyarrow", "to_arrow()")
        return pa.table({name: _arrow_array(pa, values, name in self.text_columns) for name, values in self.columns.items()})

    def to_polars(self) -> Any:
        """A ``polars.DataFrame`` (needs the ``data`` extra)."""
        pl = require("polars", "to_polars()")
        return pl.from_arrow(self.to_arrow())

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` (needs the ``data`` extra)."""
        require("pandas", "to_pandas()")
        return self.to_arrow().to_pandas()

    def to_parquet(self, where: Any) -> None:
        """Write the table as Parquet to ``where`` (a path or a binary file; needs the ``data`` extra)."""
        parquet = require("pyarrow.parquet", "to_parquet()")
        parquet.write_table(self.to_arrow(), where)

    def to_csv(self) -> str:
        """The table as CSV text (header row; null as an empty field); needs no extra."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.names)
        for values in zip(*self.columns.values(), strict=True):
            writer.writerow(["" if v is None else ("true" if v is True else "false" if v is False else v) for v in values])
        return out.getvalue()

    def __repr__(self) -> str:
        return text_table(self.names, [list(r.values()) for r in self.rows()], title=self.title or type(self).__name__)

    def _repr_html_(self) -> str:
        return html_table(self.names, [list(r.values()) for r in self.rows()], title=self.title)


def one_type(values: Sequence[Any]) -> list[Any]:
    """A column's values with one scalar type: lists and objects as JSON text; integers among
    floats as floats; any other mix of types as text (strings as they are, the rest as JSON)."""
    out = [_scalar(v) for v in values]
    present = {type(v) for v in out if v is not None}
    if len(present) <= 1:
        return out
    if present <= {int, float}:
        return [None if v is None else float(v) for v in out]
    return [None if v is None else (v if isinstance(v, str) else _json(v)) for v in out]


def _arrow_array(pa: Any, values: list[Any], text: bool = False) -> Any:
    if text and all(v is None for v in values):
        return pa.array(values, type=pa.string())
    return pa.array(values)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _scalar(value: Any) -> Any:
    """A cell: scalars as they are, lists and objects as JSON text."""
    return _json(value) if isinstance(value, (list, dict)) else value


class ResultsFrame(Frame):
    """A results file as a table: one row per (id, epoch) (see ``load_results``); ``lines`` are
    the ``ResultLine``s the rows came from, in file order."""

    def __init__(self, path: str | os.PathLike[str] | None, lines: Sequence[ResultLine]) -> None:
        self.path = None if path is None else Path(path)
        self.lines = list(lines)
        super().__init__(result_columns(line.to_json() for line in self.lines), title=f"results: {len(lines)} rows" + (f" from {self.path.name}" if self.path else ""))
        self.text_columns = {n for n in self.names if n in TEXT_COLUMNS or n.endswith(".answer")}


def result_columns(lines: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The flattened columns of result lines (see the module docstring), in a fixed order:
    the base columns, usage and cost, then scores and metadata in order of first appearance."""
    lines = list(lines)
    scorers: dict[str, None] = {}
    metadata: dict[str, None] = {}
    judges = False
    for line in lines:
        for name in (line.get("scores") or {}):
            scorers.setdefault(name)
        if isinstance(line.get("metadata"), dict):
            for key in line["metadata"]:
                metadata.setdefault(key)
        judges = judges or "judge_usage" in line
    columns: dict[str, list[Any]] = {}
    names = list(BASE_COLUMNS) + [f"usage.{k}" for k in USAGE_KEYS] + ["cost_usd"]
    if judges:
        names += [f"judge_usage.{k}" for k in USAGE_KEYS] + ["judge_cost_usd"]
    for name in scorers:
        names += [f"score.{name}", f"score.{name}.answer"]
    names += [f"metadata.{key}" for key in metadata]
    for name in names:
        columns[name] = []
    for line in lines:
        error, usage, judge_usage = _object(line, "error"), _object(line, "usage"), _object(line, "judge_usage")
        scores, meta = _object(line, "scores"), _object(line, "metadata")
        row: dict[str, Any] = {
            "id": line.get("id"), "epoch": line.get("epoch", 1), "status": line.get("status"),
            "finish_reason": line.get("finish_reason"), "error.type": error.get("type"),
            "error.message": error.get("message"), "attempts": line.get("attempts"),
            "duration_s": line.get("duration_s"), "session_id": line.get("session_id"),
            "final_response": line.get("final_response"), "cost_usd": line.get("cost_usd"),
        }
        for key in USAGE_KEYS:
            row[f"usage.{key}"] = usage.get(key)
        if judges:
            for key in USAGE_KEYS:
                row[f"judge_usage.{key}"] = judge_usage.get(key)
            row["judge_cost_usd"] = line.get("judge_cost_usd")
        for name in scorers:
            score = _object(scores, name)
            row[f"score.{name}"] = score.get("value")
            row[f"score.{name}.answer"] = score.get("answer")
        for key in metadata:
            row[f"metadata.{key}"] = _scalar(meta.get(key))
        for name in names:
            columns[name].append(_scalar(row[name]))
    return columns


def _object(line: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = line.get(key)
    return value if isinstance(value, dict) else {}


def load_results(path: str | os.PathLike[str]) -> ResultsFrame:
    """A results file as a table: one row per (id, epoch), the first line of each kept (see the
    module docstring for the columns); ``.to_arrow()``, ``.to_polars()``, ``.to_pandas()``.
    Read by the one reader of results files (``results.read_results``, with ``score``'s rules:
    a string ``id``, a valid ``epoch``; a torn last line skipped).

    Raises:
        RescoreError: the file is missing or a line before the last is not a result object.
    """
    path = Path(path)
    if not path.is_file():
        raise RescoreError(f"results file {str(path)!r} does not exist or is not a file")
    seen: set[tuple[str, int]] = set()
    lines: list[ResultLine] = []
    for _number, line in numbered_lines(path):
        key = (line.id, line.epoch_number)
        if key not in seen:
            seen.add(key)
            lines.append(line)
    return ResultsFrame(path, lines)


def _metric_cells(metrics: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if key == "ci95":
            low, high = value if isinstance(value, (list, tuple)) and len(value) == 2 else (None, None)
            out["ci95.low"], out["ci95.high"] = low, high
        elif isinstance(value, dict):
            for inner, item in value.items():
                out[f"{key}.{inner}"] = _scalar(item)
        else:
            out[key] = _scalar(value)
    return out


def _document(value: Any) -> Mapping[str, Any]:
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        value = to_json()
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a summary (BatchSummary or its JSON object), not {type(value).__name__}")
    return value


def summary_frame(summary: Any) -> Frame:
    """A summary's metrics as a table: one row per scorer overall (``group`` null) and per
    group and scorer (with ``group_by``): ``group``, ``scorer``, then the metrics (``mean``,
    ``stderr``, ``ci95.low``, ``ci95.high``, ``n``, ...). ``summary``: a ``BatchSummary``, or
    the summary JSON object of a batch or of ``score``."""
    document = _document(summary)
    rows: list[dict[str, Any]] = []
    for name, metrics in (document.get("scores") or {}).items():
        rows.append({"group": None, "scorer": name, **_metric_cells(metrics)})
    for group, scorers in (document.get("groups") or {}).items():
        for name, metrics in scorers.items():
            rows.append({"group": group, "scorer": name, **_metric_cells(metrics)})
    return Frame(_columns(rows, ("group", "scorer")), title="summary")


def comparison_frame(comparison: Mapping[str, Any]) -> Frame:
    """A comparison (``compare_runs``) as a table: one row per scorer: ``scorer``, ``n``,
    ``mean_base``, ``mean_candidate``, ``diff``, ``ci95.low``, ``ci95.high``, ``p_value``,
    ``regressions`` and ``improvements`` (counts)."""
    rows = []
    for name, entry in (comparison.get("scorers") or {}).items():
        row = {"scorer": name}
        for key, value in entry.items():
            if key in ("regressions", "improvements"):
                row[key] = len(value)
            elif key == "ci95":
                row["ci95.low"], row["ci95.high"] = value if isinstance(value, list) and len(value) == 2 else (None, None)
            else:
                row[key] = _scalar(value)
        rows.append(row)
    return Frame(_columns(rows, ("scorer",)), title=f"comparison: {comparison.get('pairs', 0)} pairs")


def _columns(rows: list[dict[str, Any]], first: tuple[str, ...]) -> dict[str, list[Any]]:
    names: dict[str, None] = dict.fromkeys(first)
    for row in rows:
        for key in row:
            names.setdefault(key)
    return {name: [row.get(name) for row in rows] for name in names}


class Comparison(dict[str, Any]):
    """The comparison document of ``compare_runs`` (a plain dict of JSON values) that displays as
    a table: ``repr`` one row per scorer, ``_repr_html_`` the same in a notebook;
    ``comparison_frame`` makes it a frame."""

    def __repr__(self) -> str:
        return _display.comparison_text(self)

    def _repr_html_(self) -> str:
        return _display.comparison_html(self)

    def to_frame(self) -> Frame:
        """This comparison as a ``Frame`` (see ``comparison_frame``)."""
        return comparison_frame(self)

    def json_chunks(self) -> Iterator[bytes]:
        """The document as JSON, in pieces: joined, the bytes of ``orjson.dumps`` of it (id
        lists held as positions, ``compare_runs(..., _id_positions=True)``, written a chunk at a
        time)."""
        from ._idlist import json_chunks

        return json_chunks(self)

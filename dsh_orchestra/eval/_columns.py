"""A run's score values as columns (numpy arrays), for ``compare``: what the paired statistics
read of each result line, one array per field, and each scorer's values reduced per item.

``RunColumns`` holds per line the ``id``, ``epoch``, status, each scorer's value (NaN: no value;
``compare`` counts only finite numbers) and whether it failed, the usage counts, ``cost_usd``
and ``duration_s``: about 60 bytes a line with 4 scorers, where the decoded lines take kilobytes.
``read_run`` fills one from a results file by the reader's rules (``results.read_results``);
``run_columns`` from lines already decoded. ``reduce_run`` reduces the epochs per item, by the
rules of ``reduce_items`` (which it implements). Pure: numpy, no trio.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import math
import os
from array import array
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import attrs
import numpy as np

from .._params import ParamError
from ..results import ResultsFileError, read_results, result_problem
from ._metrics import Reducer, reduce_spans

USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")
_SUMMED = ("input_tokens", "output_tokens")
_EXACT = float(2**53)
_WHOLE = 2**53  # (an int strictly inside +-2**53 is a float exactly)
_NAN = math.nan
_CHUNK = 1 << 16  # ids held as str before they are packed into a bytes array


class RunInputError(ParamError, ValueError):
    """A results file cannot be read for a comparison (missing, unreadable, a line that is not a
    result; the message names the file and line), or lines given in Python name a scorer twice
    (``1`` and ``"1"``: the message names the line and the name)."""


def _number(value: Any) -> float:
    """A finite number as a float, anything else NaN (``compare``'s ``_value`` and ``_count``)."""
    if type(value) is float:
        return value if math.isfinite(value) else _NAN
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _NAN
    try:
        found = float(value)
    except OverflowError:  # an int beyond a float: not a number compare can use
        return _NAN
    return found if math.isfinite(found) else _NAN


def _pack(ids: list[str]) -> Any:
    """Ids as a numpy bytes array (UTF-8; byte order is code point order, as ``sorted`` of the
    strings), or an object array when an id ends in NUL (a bytes array drops trailing NULs)."""
    encoded = [i.encode("utf-8", "surrogatepass") for i in ids]
    if any(e.endswith(b"\x00") for e in encoded) or not encoded:
        return np.array(ids, dtype=object)
    return np.array(encoded, dtype=np.bytes_)


class RunColumns:
    """One run's lines as columns (see the module). Build with ``run_columns`` or ``read_run``.

    ``names``: the scorer names of the lines' ``scores``, in first-seen order; ``ids`` (numpy),
    ``epochs`` (int64; an epoch that is not an integer reads as 1), ``statuses`` (per line an index
    into ``status_names``, 0 is ``"ok"``), ``line_error`` (status ``"error"``), ``values[name]`` and
    ``failed[name]`` (the value is missing because the line or the scorer failed),
    ``usage["total_tokens"]`` (per line; ``usage_sum(key)``: the sum of a usage count over the
    lines, as ``math.fsum`` of the numbers, with no column for ``input_tokens`` and ``output_tokens``),
    ``cost``, ``duration``, and ``clusters`` (per line, with ``cluster_by``).
    """

    def __init__(self, cluster_by: str | None = None) -> None:
        self.cluster_by = cluster_by
        self.names: list[str] = []
        self._id_chunks: list[Any] = []
        self._ids: list[str] = []
        # epochs, statuses and costs: a column from the first line whose epoch is not 1, status not
        # "ok", cost present (the lines before filled in); until then none (a constant at finish)
        self._epochs: array[int] | None = None
        self._odd_epochs: dict[int, Any] = {}  # line -> the raw epoch, when it is not an int (for the duplicate check)
        self._statuses: array[int] | None = None
        self.status_names: list[str] = ["ok"]
        self._status_codes: dict[str, int] = {"ok": 0}
        self._line_error = array("b")
        self._values: dict[str, array[float]] = {}
        self._failed: dict[str, array[int]] = {}
        self._tokens = array("d")  # total_tokens per line
        self._whole = dict.fromkeys(_SUMMED, 0)  # input and output tokens: the sum of the whole numbers below 2**53
        self._other = {key: array("d") for key in _SUMMED}  # and the other numbers, kept
        self._cost: array[float] | None = None
        self._duration = array("d")
        self.unique = False  # no two lines share (id, epoch) (read_run's unique check passed)
        self._sides: tuple[dict[str, Any], dict[str, Any]] | None = None  # (usage, latency), once the columns are dropped
        self.clusters: list[Any] | None = [] if cluster_by is not None else None
        self.count = 0
        self.ids: Any = None
        self.epochs: Any = None
        self.statuses: Any = None
        self.line_error: Any = None
        self.values: dict[str, Any] = {}
        self.failed: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.cost: Any = None
        self.duration: Any = None

    def add(self, line: Mapping[str, Any]) -> None:
        """Count one result line (a decoded JSON object). A scorer name that is not a str is
        its text (``str``).

        Raises:
            RunInputError: the line's ``scores`` name one scorer twice (``1`` and ``"1"``, a
                dict made in Python); the columns are then unusable.
        """
        get = line.get
        raw_id = get("id")
        self._ids.append(raw_id if type(raw_id) is str else str(raw_id))
        if len(self._ids) >= _CHUNK:
            self._id_chunks.append(_pack(self._ids))
            self._ids = []
        epoch = get("epoch", 1)
        if type(epoch) is not int:
            self._odd_epochs[self.count] = epoch
            epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 1
        if epoch != 1 or self._epochs is not None:
            epochs = self._epochs
            if epochs is None:
                epochs = self._epochs = array("q", [1]) * self.count
            epochs.append(epoch)
        status = get("status")
        if status == "ok":
            if self._statuses is not None:
                self._statuses.append(0)
        else:
            text = str(status)
            code = self._status_codes.get(text)
            if code is None:
                code = self._status_codes[text] = len(self.status_names)
                self.status_names.append(text)
            statuses = self._statuses
            if statuses is None:
                statuses = self._statuses = array("i", [0]) * self.count
            statuses.append(code)
        line_error = status == "error"
        self._line_error.append(line_error)
        scores = get("scores")
        columns = self._values
        every = False  # this line has a record of every scorer (each named once, as a str)
        if type(scores) is dict or isinstance(scores, dict):
            failures = self._failed
            every = True  # (and below: as many names as scorers)
            for name, record in scores.items():
                if type(name) is str:
                    key = name
                else:  # (a dict made in Python) its text, once: 1 and "1" are one name
                    key, every = str(name), False
                    if (not isinstance(name, str) and key in scores) or len(columns.get(key, ())) > self.count:
                        raise _named_twice(scores, key, self.count, raw_id)
                column = columns.get(key)
                if column is None:
                    column = self._new_scorer(key)
                if type(record) is dict:
                    value = record.get("value")
                    number = value if type(value) is float and math.isfinite(value) else _number(value)
                    failed = number != number and (line_error or record.get("error") is True)
                else:
                    number = _NAN
                    failed = line_error
                column.append(number)
                failures[key].append(failed)
            every = every and len(scores) == len(columns)
        self.count += 1
        if not every:
            for key, column in columns.items():  # scorers this line has no record of
                if len(column) < self.count:
                    column.append(_NAN)
                    self._failed[key].append(line_error)
        usage = get("usage")
        if type(usage) is dict or isinstance(usage, dict):
            total = usage.get("total_tokens")
            self._tokens.append(float(total) if type(total) is int and -_WHOLE < total < _WHOLE else _number(total))
            for key in _SUMMED:
                found = usage.get(key)
                if type(found) is int and -_WHOLE < found < _WHOLE:  # (what the float path below keeps whole)
                    self._whole[key] += found
                    continue
                number = _number(found)
                if number.is_integer() and -_EXACT < number < _EXACT:
                    self._whole[key] += int(number)
                elif number == number:
                    self._other[key].append(number)
        else:
            self._tokens.append(_NAN)
        cost = _number(get("cost_usd"))
        if cost == cost or self._cost is not None:
            costs = self._cost
            if costs is None:
                costs = self._cost = array("d", [_NAN]) * (self.count - 1)  # (count: this line included)
            costs.append(cost)
        self._duration.append(_number(get("duration_s")))
        if self.clusters is not None:
            from ._cluster import cluster_of

            assert self.cluster_by is not None
            self.clusters.append(cluster_of(get("metadata"), self.cluster_by, raw_id if type(raw_id) is str else str(raw_id)))

    def _new_scorer(self, name: str) -> array[float]:
        self.names.append(name)
        column = self._values[name] = array("d", [_NAN]) * self.count
        self._failed[name] = array("b", self._line_error[: self.count])
        return column

    def finish(self) -> RunColumns:
        """Pack the columns into numpy arrays (after the last ``add``)."""
        if self._ids or not self._id_chunks:
            self._id_chunks.append(_pack(self._ids))
        chunks = self._id_chunks
        if any(c.dtype == object for c in chunks):
            chunks = [c if c.dtype == object else _unpack(c) for c in chunks]
        self.ids = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        self._ids, self._id_chunks = [], []
        # a column no line needed is a constant (read-only, no memory); flags are views of their bytes (0/1)
        self.epochs = _column(self._epochs, np.int64, 1, self.count)
        self.statuses = _column(self._statuses, np.int32, 0, self.count)
        self.line_error = _flags(self._line_error)
        self.values = {name: _doubles(column) for name, column in self._values.items()}
        self.failed = {name: _flags(column) for name, column in self._failed.items()}
        self.usage = {"total_tokens": _doubles(self._tokens)}
        self.cost = _column(self._cost, np.float64, _NAN, self.count)
        self.duration = _doubles(self._duration)
        return self

    def usage_side(self) -> dict[str, Any]:
        """``compare``'s usage of this run (``eval.usage_side``)."""
        if self._sides is not None:
            return copy.deepcopy(self._sides[0])
        out = _spread(_present(self.usage["total_tokens"]))
        for key in USAGE_KEYS:
            out[key] = int(self.usage_sum(key) if key != "total_tokens" else _fsum(_present(self.usage[key])))
        costs = _present(self.cost)
        if len(costs):
            spread = _spread(costs)
            out["cost_usd"] = float(spread["total"])
            out["median_cost_usd"] = spread["median"]
            out["p95_cost_usd"] = spread["p95"]
        return out

    def latency_side(self) -> dict[str, Any]:
        """``compare``'s latency of this run (``eval.latency_side``)."""
        if self._sides is not None:
            return copy.deepcopy(self._sides[1])
        return _spread(_present(self.duration))

    def drop_line_usage(self) -> None:
        """Keep ``usage_side`` and ``latency_side``, not the per-line columns they are made of
        (``usage``, ``cost`` and ``duration`` are then None): 16 to 24 bytes a line less."""
        if self._sides is None:
            self._sides = (self.usage_side(), self.latency_side())
        self.usage, self.cost, self.duration = {}, None, None
        self._tokens, self._cost, self._duration = array("d"), None, array("d")

    def usage_sum(self, key: str) -> float:
        """``math.fsum`` of the numbers of usage count ``key`` over the lines (a finite number each)."""
        if key not in _SUMMED:
            column = self.usage[key]
            return math.fsum(column[~np.isnan(column)].tolist())
        whole = self._whole[key]
        high = float(whole)  # whole = high + (whole - int(high)), each part a float exactly
        return math.fsum([*self._other[key].tolist(), high, float(whole - int(high))])

    def id_text(self, index: int) -> str:
        """Line ``index``'s id as a string."""
        return _text(self.ids[index])

    def epoch_of(self, index: int) -> Any:
        """Line ``index``'s epoch as the line holds it (1 when it has none)."""
        return self._odd_epochs.get(index, int(self.epochs[index]))

    def max_epoch(self) -> int:
        """The highest epoch that is an integer (1 when none is)."""
        if not self._odd_epochs:
            return int(self.epochs.max()) if self.count else 1
        kept = [int(e) for k, e in enumerate(self.epochs.tolist()) if k not in self._odd_epochs
                or (isinstance(self._odd_epochs[k], int) and not isinstance(self._odd_epochs[k], bool))]
        return max(kept, default=1)

    def duplicate(self) -> int | None:
        """The first line (0-based) whose (id, epoch) an earlier line has (None: none does)."""
        if self.count < 2:
            return None
        if self._odd_epochs:  # epochs that are not ints: the set's rules (1 and True are one key)
            seen: set[tuple[str, Any]] = set()
            for index in range(self.count):
                key = (self.id_text(index), self.epoch_of(index))
                if key in seen:
                    return index
                seen.add(key)
            return None
        if self._epochs is None:  # every epoch 1: the ids alone
            order = np.argsort(self.ids, kind="stable")
            ids = self.ids[order]
            repeated = ids[1:] == ids[:-1]
        else:
            order = np.lexsort((np.arange(self.count), self.epochs, self.ids))
            ids, epochs = self.ids[order], self.epochs[order]
            repeated = (ids[1:] == ids[:-1]) & (epochs[1:] == epochs[:-1])
        if not repeated.any():
            return None
        return int(order[1:][repeated].min())


def _named_twice(scores: Mapping[Any, Any], name: str, index: int, item_id: Any) -> RunInputError:
    """The error of a line (``index``, 0-based) whose ``scores`` name scorer ``name`` twice."""
    spellings = " and ".join(repr(key) for key in scores if str(key) == name)
    return RunInputError(f"line {index + 1} (id {item_id!r}): scorer name {name!r} is given twice (as {spellings}); "
                         "scorer names are strings, each once in a line's scores")


def _spread(values: Any) -> dict[str, Any]:
    """``total``, ``median`` and ``p95`` (linear interpolation) of ``values`` (a list or a numpy
    array), and ``n``."""
    if not len(values):
        return {"n": 0, "total": 0, "median": None, "p95": None}
    median, p95 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95])
    total = _fsum(values)
    return {"n": len(values), "total": int(total) if total.is_integer() else total, "median": float(median), "p95": float(p95)}


def _present(column: Any) -> Any:
    """The numbers of a column (NaN: none), in line order (numpy)."""
    return column[~np.isnan(column)]


def _fsum(values: Any) -> float:
    """``math.fsum(values)``; of a numpy array of whole numbers below 2**53 in size (token
    counts), their exact integer sum rounded once: the same float (fsum is the exact sum
    correctly rounded), without a Python float per value."""
    if isinstance(values, np.ndarray) and len(values) and bool(np.all(np.abs(values) < _EXACT)) \
            and bool(np.all(np.trunc(values) == values)):
        whole = values.astype(np.int64)  # blocks of 1,024 such values cannot overflow an int64
        return float(sum(np.add.reduceat(whole, np.arange(0, len(whole), 1 << 10)).tolist()))
    return math.fsum(values)


def _doubles(column: array[float]) -> Any:
    return np.frombuffer(column, dtype=np.float64) if len(column) else np.zeros(0, dtype=np.float64)


def _flags(column: array[int]) -> Any:
    """0/1 bytes as a bool array (a view: no copy)."""
    return np.frombuffer(column, dtype=np.bool_) if len(column) else np.zeros(0, dtype=bool)


def _column(column: array[Any] | None, dtype: Any, constant: Any, count: int) -> Any:
    """A column as numpy; a column never started is ``constant`` on every line (read-only)."""
    if column is None:
        return np.broadcast_to(np.asarray(constant, dtype=dtype), (count,))
    return np.frombuffer(column, dtype=dtype) if len(column) else np.zeros(0, dtype=dtype)


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def _unpack(ids: Any) -> Any:
    return np.array([_text(i) for i in ids], dtype=object)


def run_columns(lines: Iterable[Mapping[str, Any]] | RunColumns, cluster_by: str | None = None) -> RunColumns:
    """``lines`` (decoded result lines) as ``RunColumns`` (columns given are returned as they are)."""
    if isinstance(lines, RunColumns):
        return lines
    out = RunColumns(cluster_by)
    for line in lines:
        out.add(line)
    return out.finish()


def compare_line_problem(value: Any) -> str | None:
    """What ``compare`` refuses in a line besides the schema's rules: a score value that is not
    a number or null."""
    scores = value.get("scores")
    for name, record in (scores.items() if isinstance(scores, dict) else ()):
        found = record.get("value") if type(record) is dict or isinstance(record, dict) else record
        if found is None or type(found) is float or type(found) is int:  # (the common cases, first)
            continue
        if isinstance(found, bool) or not isinstance(found, (int, float)):
            return f"score {name!r} has the value {found!r}: compare needs a number (or null); fix or re-score the line"
    return None


def duplicate_problem(key: tuple[Any, Any]) -> str:
    """The message of a line whose (id, epoch) an earlier line of the file has."""
    return (f"id {key[0]!r} (epoch {key[1]}) is already on an earlier line: one line per (id, epoch); "
            "keep one of them (or merge shards with `dsh-orchestra merge`)")


def read_run(path: str | os.PathLike[str], what: str = "results file", *, check: Callable[[Any], str | None] | None = None,
             unique: bool = False, line_usage: bool = True) -> RunColumns:
    """A results file's lines as ``RunColumns``, read line by line (memory: the columns only).
    The schema's rules (``result_problem``), then ``check``; with ``unique`` a line whose
    (id, epoch) an earlier line has is refused too (checked on the columns, once read).
    Without ``line_usage`` only the run's usage and latency are kept (``drop_line_usage``).

    Raises:
        RunInputError: missing, unreadable, or a line that is refused (naming the file and line).
    """
    if not Path(path).is_file():
        raise RunInputError(f"{what} {str(path)!r} does not exist")
    out = RunColumns()
    stream = read_results(path, check=result_problem if check is None else lambda value: result_problem(value) or check(value))
    numbers = _LineNumbers()
    try:
        for value in stream.objects():
            out.add(value)
            numbers.append(out.count - 1, stream.number)
    except OSError as exc:
        raise RunInputError(f"cannot read the {what} {str(path)!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        if unique:  # an earlier line's repeat is what a line-by-line check would have found first
            _check_unique(out.finish(), numbers, str(path))
        raise RunInputError(str(exc)) from exc
    out.finish()
    if unique:
        _check_unique(out, numbers, str(path))
    if not line_usage:
        out.drop_line_usage()
    return out


class _LineNumbers:
    """Each column line's line number in the file, kept as the points where the gap between
    them changes (blank or skipped lines): nothing per line."""

    def __init__(self) -> None:
        self._starts = array("q")  # column line where a gap starts
        self._gaps = array("q")  # line number - column line from there

    def append(self, index: int, number: int) -> None:
        if not self._gaps or self._gaps[-1] != number - index:
            self._starts.append(index)
            self._gaps.append(number - index)

    def __getitem__(self, index: int) -> int:
        return index + self._gaps[bisect.bisect_right(self._starts, index) - 1]


def _check_unique(run: RunColumns, numbers: _LineNumbers, path: str) -> None:
    index = run.duplicate()
    if index is not None:
        problem = duplicate_problem((run.id_text(index), run.epoch_of(index)))
        raise RunInputError(str(ResultsFileError(path, numbers[index], problem)))
    run.unique = True


class AllOk(Sequence[str]):
    """The statuses of n items that are all ``"ok"`` (a list's equal, without its 8 bytes an item)."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return ["ok"] * len(range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError("AllOk index out of range")
        return "ok"

    def __iter__(self) -> Iterator[str]:
        return itertools.repeat("ok", self._n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AllOk):
            return self._n == other._n
        return isinstance(other, (list, tuple)) and len(other) == self._n and all(s == "ok" for s in other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AllOk({self._n})"


@attrs.define(eq=False)
class ReducedRun:
    """Each scorer's value per item with the epochs reduced (``reduce_run``): ``ids`` (numpy, in
    first-seen order), ``values[name]`` (NaN: no value), ``statuses`` (per item a status name),
    ``strict[name]`` (the values with every failed epoch counted as 0; None when nothing failed)
    and ``overridden[name]`` (the items whose strict value is their own, not their value)."""

    ids: Any
    values: dict[str, Any]
    statuses: Sequence[str]
    strict: dict[str, Any]
    overridden: dict[str, Any]
    clusters: list[Any] | None

    def __len__(self) -> int:
        return len(self.ids)

    def id_list(self) -> list[str]:
        """The item ids as strings, in order."""
        return [_text(i) for i in self.ids.tolist()]

    def as_dicts(self, names: Sequence[str]) -> tuple[dict[str, dict[str, float | None]], dict[str, str],
                                                      dict[str, dict[str, float | None]]]:
        """The ``reduce_items_strict`` form: per item id the values, the status, the strict overrides."""
        ids = self.id_list()
        columns = [[None if v != v else v for v in self.values[name].tolist()] for name in names]
        values = {i: {name: column[k] for name, column in zip(names, columns, strict=True)} for k, i in enumerate(ids)}
        statuses = dict(zip(ids, self.statuses, strict=True))
        strict: dict[str, dict[str, float | None]] = {}
        for name in names:
            mask = self.overridden[name]
            for k in np.flatnonzero(mask).tolist():
                value = float(self.strict[name][k])
                strict.setdefault(ids[k], {})[name] = None if value != value else value
        return values, statuses, strict


def reduce_run(run: RunColumns, names: Sequence[str], reducer: Reducer) -> ReducedRun:
    """Each scorer's values per item: the first line of an (id, epoch) counts; an item's epochs,
    in epoch order, reduced by ``reducer``; its status ``ok`` when every epoch is ``ok``, else the
    first other status of its epochs; strict values with failed epochs as 0 (``reduce_items_strict``)."""
    n = run.count
    ids = run.ids
    if n and run.unique and run._epochs is None and not run._odd_epochs:
        # every epoch 1 and no (id, epoch) twice: every line is its item's one line
        kept_lines = first_of_item = np.arange(n)
    elif n:
        # first line of each (id, epoch); items in first-seen order
        order = np.lexsort((np.arange(n), run.epochs, ids))
        sorted_ids, sorted_epochs = ids[order], run.epochs[order]
        new_key = np.ones(n, dtype=bool)
        new_key[1:] = (sorted_ids[1:] != sorted_ids[:-1]) | (sorted_epochs[1:] != sorted_epochs[:-1])
        kept_lines = np.sort(order[new_key])
        new_item = np.ones(n, dtype=bool)
        new_item[1:] = sorted_ids[1:] != sorted_ids[:-1]
        first_of_item = np.sort(order[new_item])
    else:
        kept_lines = first_of_item = np.zeros(0, dtype=np.int64)
    items = len(first_of_item)
    one_epoch = len(kept_lines) == items
    empty = {name: np.full(len(kept_lines), _NAN) for name in names if name not in run.values}
    if one_epoch and reducer.k is None:
        # One epoch per item: each value is its own reduction (see ``Reducer.__call__``).
        lines = first_of_item if items < n else slice(None)  # every line counts: the columns themselves, no copy
        values = {name: run.values[name][lines] if name in run.values else empty[name][: items] for name in names}
        codes = run.statuses[lines]
        status_names = run.status_names
        statuses: Sequence[str] = ["ok" if c == 0 else status_names[c] for c in codes.tolist()] if len(status_names) > 1 \
            else AllOk(items)
        strict: dict[str, Any] = {}
        overridden: dict[str, Any] = {}
        for name in names:
            failed = (run.failed[name][lines] if name in run.failed else run.line_error[lines]) & np.isnan(values[name])
            overridden[name] = failed
            strict[name] = np.where(failed, 0.0, values[name]) if failed.any() else None
        clusters = [run.clusters[k] for k in first_of_item.tolist()] if run.clusters is not None else None
        return ReducedRun(ids[lines], values, statuses, strict, overridden, clusters)
    return _reduce_epochs(run, names, reducer, kept_lines, first_of_item)


def _reduce_epochs(run: RunColumns, names: Sequence[str], reducer: Reducer, kept_lines: Any, first_of_item: Any) -> ReducedRun:
    """``reduce_run`` with several epochs per item (or a pass@k reducer): item by item."""
    ids = run.ids
    item_ids = ids[first_of_item]  # item k (first-seen order) is item_ids[k]
    by_id = np.argsort(item_ids, kind="stable")
    ranks = by_id[np.searchsorted(item_ids[by_id], ids[kept_lines])]
    order = np.lexsort((run.epochs[kept_lines], ranks))
    lines, ranks = kept_lines[order], ranks[order]
    bounds = np.flatnonzero(np.diff(ranks)) + 1
    starts = [0, *bounds.tolist()] if len(lines) else []
    stops = [*bounds.tolist(), len(lines)] if len(lines) else []
    status_codes = run.statuses[lines].tolist()
    status_names = run.status_names
    statuses = [next((status_names[c] for c in status_codes[start:stop] if c != 0), "ok")
                for start, stop in zip(starts, stops, strict=True)]
    values: dict[str, Any] = {}
    strict: dict[str, Any] = {}
    overridden: dict[str, Any] = {}
    for name in names:
        if name in run.values:
            column = [None if v != v else v for v in run.values[name][lines].tolist()]
            flags = run.failed[name][lines].tolist()
        else:
            column = [None] * len(lines)
            flags = run.line_error[lines].tolist()
        # (a failed flag is only ever on a line without a value: failed epochs are those flagged)
        reduced, strict_values, marks = reduce_spans(column, flags, [*starts, len(lines)], reducer)
        values[name] = reduced
        overridden[name] = marks
        strict[name] = strict_values if marks.any() else None
    clusters = [run.clusters[k] for k in first_of_item.tolist()] if run.clusters is not None else None
    return ReducedRun(item_ids, values, statuses, strict, overridden, clusters)

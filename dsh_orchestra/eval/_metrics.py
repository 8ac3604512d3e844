"""Epoch reducers and metrics: mean, stderr (n - 1), a seeded percentile bootstrap ci95, pass@k.

Pure: no trio, no I/O (``bootstrap_cis`` remembers its last intervals). numpy is imported by the functions that use it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import operator
import threading
from array import array
from collections import Counter, OrderedDict
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import attrs

from .._params import Param, ParamValueError

from ..results import score_value

if TYPE_CHECKING:
    from ..results import ResultLine, TallyLine

BOOTSTRAP_RESAMPLES = 10_000
REDUCERS = ("mean", "max", "min", "mode")
DEFAULT_REDUCER = "mean"
_FEW_LEVELS = 64
_CHUNK_CELLS = 1 << 18  # resampled values held at once by the index bootstrap (2 MiB of int64 indices)
_DRAW_BUDGET = 100_000_000  # index draws per interval above which the index bootstrap draws fewer resamples
_MIN_RESAMPLES = 1_000  # ... but never fewer than these
_REMEMBERED = 32  # intervals of the index bootstrap kept by bootstrap_cis
_INTERVALS: OrderedDict[tuple[Any, ...], tuple[float, float]] = OrderedDict()
_INTERVALS_LOCK = threading.Lock()  # (summaries may be computed in worker threads)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator ``1 - C(n - c, k) / C(n, k)``: n samples, c correct.

    Raises:
        ValueError: not 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, not n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The unbiased pass^k estimator ``C(c, k) / C(n, k)`` (all of k samples correct, as
    tau-bench): n samples, c correct.

    Raises:
        ValueError: not 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, not n={n}, c={c}, k={k}")
    return math.comb(c, k) / math.comb(n, k)


@attrs.frozen
class Reducer:
    """How epochs of one item become one value: ``mean``, ``max``, ``min``, ``mode``, ``pass@k``
    or ``pass^k``."""

    name: str
    k: int | None = None

    def __call__(self, values: Sequence[float | None]) -> float | None:
        """Reduce one item's epoch values; None values (failed epochs) are left out, and an item
        with no value left (or fewer than k for pass@k) reduces to None."""
        if len(values) == 1 and self.k is None:  # one epoch: its value
            return values[0]
        present = [v for v in values if v is not None]
        if not present:
            return None
        if self.k is not None:
            if len(present) < self.k:
                return None
            if self.name.startswith("pass^"):
                return pass_hat_k(len(present), sum(1 for v in present if v == 1), self.k)
            return pass_at_k(len(present), sum(1 for v in present if v == 1), self.k)
        if self.name == "mean":
            return math.fsum(present) / len(present)
        if self.name == "max":
            return max(present)
        if self.name == "min":
            return min(present)
        return Counter(present).most_common(1)[0][0]  # mode: ties go to the earliest epoch


def parse_reducer(value: str, epochs: int | None = None) -> Reducer:
    """``mean``, ``max``, ``min``, ``mode``, ``pass@k`` or ``pass^k`` (1 <= k <= epochs, when given).

    Raises:
        ValueError: anything else; the message lists the choices.
    """
    if value in REDUCERS:
        return Reducer(value)
    name, sep, number = value.partition("@")
    if not sep:
        name, sep, number = value.partition("^")
    if name == "pass" and sep and number.isdigit() and int(number) >= 1:
        k = int(number)
        if epochs is not None and k > epochs:
            raise ParamValueError(Param("epoch_reducer", value), f" needs k <= the epochs ({epochs}); raise ", Param("epochs"), " or lower k")
        return Reducer(value, k)
    raise ParamValueError(Param("epoch_reducer", value, spelled="epoch_reducer"), f" must be mean, max, min, mode, pass@k or pass^k (k >= 1), not {value!r}")


def reduce_epochs(values: Sequence[float | None], reducer: str | Reducer = DEFAULT_REDUCER) -> float | None:
    """One item's epoch values reduced (``Reducer.__call__``); ``reducer`` may be its name."""
    chosen = reducer if isinstance(reducer, Reducer) else parse_reducer(reducer)
    return chosen(values)


def reduce_spans(values: Sequence[float | None], failed: Sequence[bool], bounds: Sequence[int], reducer: Reducer, *,
                 strict: bool = True) -> tuple[Any, Any, Any]:
    """Each item's epochs reduced: item k's are ``values[bounds[k]:bounds[k + 1]]`` (in epoch
    order; None: no value). Returns the reduced values (numpy, NaN: None) and, with ``strict``,
    the strict values (an item with a ``failed`` epoch: its epochs reduced with each failed one
    as 0; the others: the reduced value) and which items had a failed epoch (else None, None).
    The summary's (``ScoreTally``) and ``compare``'s (``reduce_run``) epoch reduction."""
    import numpy as np

    items = len(bounds) - 1
    reduced = np.empty(items, dtype=np.float64)
    strict_values: Any = np.empty(items, dtype=np.float64) if strict else None
    marks: Any = np.zeros(items, dtype=bool) if strict else None
    for k, (start, stop) in enumerate(itertools.pairwise(bounds)):
        per_epoch = values[start:stop]
        value = reducer(per_epoch)
        reduced[k] = _NAN if value is None else value
        if strict_values is None:
            continue
        epoch_failed = failed[start:stop]
        if True in epoch_failed:
            marks[k] = True
            found = reducer([0.0 if f else v for v, f in zip(per_epoch, epoch_failed, strict=True)])
            strict_values[k] = _NAN if found is None else found
        else:
            strict_values[k] = reduced[k]
    return reduced, strict_values, marks


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean (None for no values)."""
    return math.fsum(values) / len(values) if values else None


def stderr(values: Sequence[float]) -> float | None:
    """The standard error of the mean: sample standard deviation (n - 1) over sqrt(n).

    None for fewer than two values (undefined).
    """
    n = len(values)
    if n < 2:
        return None
    centre = math.fsum(values) / n
    deviations = [v - centre for v in values]
    variance = math.fsum(map(operator.mul, deviations, deviations)) / (n - 1)
    return math.sqrt(variance) / math.sqrt(n)


def index_resamples(n: int) -> int:
    """How many resamples the bootstrap draws by uniform indices for n values (more than 64
    distinct): 10,000 up to n = 10,000, then ``max(1,000, 10**8 // n)``: at most 10**8 index
    draws per interval up to n = 100,000 (5,000 at n = 20,000, 1,000 from n = 100,000 on)."""
    return max(_MIN_RESAMPLES, min(BOOTSTRAP_RESAMPLES, _DRAW_BUDGET // max(n, 1)))


def bootstrap_ci(
    values: Sequence[float], *, seed: int = 0, resamples: int | None = None, confidence: float = 0.95
) -> tuple[float, float] | None:
    """A percentile bootstrap interval of the mean: resamples of n values drawn with
    replacement from ``values``, the mean of each, and their (1 - confidence) / 2 and
    (1 + confidence) / 2 percentiles (linear interpolation). None for no values.

    Draws come from numpy's ``default_rng(seed)``: the same values and seed always give the
    same interval. Values with at most 64 distinct levels (scores 0/1, 0/0.5/1, ...) are
    resampled as counts, ``multinomial(n, level frequencies)`` per resample (10,000), which has
    exactly the distribution of n draws with replacement and costs O(levels) instead of O(n);
    other values are resampled by n uniform indices per resample, ``index_resamples(n)`` of
    them. ``resamples``, when given, is the number of resamples of either kind.
    """
    return bootstrap_cis([values], seed=seed, resamples=resamples, confidence=confidence)[0]


def bootstrap_cis(
    samples: Sequence[Sequence[float]], *, seed: int = 0, resamples: int | None = None, confidence: float = 0.95
) -> list[tuple[float, float] | None]:
    """``bootstrap_ci`` of each sample, bit for bit, with the uniform index draws made once for
    every sample of one length (the draws depend on n and the seed only; each sample's values
    are gathered at them). The intervals are remembered (the last 32, by the values' bytes,
    seed and resamples), so a later ``bootstrap_ci`` of the same values draws nothing."""
    import numpy as np

    out: list[tuple[float, float] | None] = [None] * len(samples)
    pending: dict[tuple[int, int], dict[tuple[Any, ...], tuple[Any, list[int]]]] = {}
    for position, values in enumerate(samples):
        if len(values) == 0:  # (a list or a numpy array)
            continue
        data = np.asarray(values, dtype=np.float64)
        n = len(data)
        levels, counts = np.unique(data, return_counts=True)
        if len(levels) == 1:  # every resample is n copies of the one value: what the draws give, without them
            only = float(n) * float(levels[0]) / n
            out[position] = (only, only)
        elif len(levels) <= _FEW_LEVELS:
            out[position] = _counts_interval(tuple(levels.tolist()), tuple(counts.tolist()), seed,
                                             BOOTSTRAP_RESAMPLES if resamples is None else resamples, confidence)
        else:
            count = index_resamples(n) if resamples is None else resamples
            key = (hashlib.blake2b(data.tobytes(), digest_size=20).digest(), n, seed, count, confidence)
            with _INTERVALS_LOCK:
                known = _INTERVALS.get(key)
                if known is not None:
                    _INTERVALS.move_to_end(key)
            if known is not None:
                out[position] = known
            else:
                pending.setdefault((n, count), {}).setdefault(key, (data, []))[1].append(position)
    for (n, count), group in pending.items():
        keys = list(group)
        intervals = _index_intervals([group[key][0] for key in keys], n, seed, count, confidence)
        for key, interval in zip(keys, intervals, strict=True):
            with _INTERVALS_LOCK:
                _INTERVALS[key] = interval
            for position in group[key][1]:
                out[position] = interval
        with _INTERVALS_LOCK:
            while len(_INTERVALS) > _REMEMBERED:
                _INTERVALS.popitem(last=False)
    return out


def _index_intervals(datas: Sequence[Any], n: int, seed: int, resamples: int,
                     confidence: float) -> list[tuple[float, float]]:
    """The percentile intervals of ``datas`` (numpy arrays of length n) by ``resamples`` draws of
    n uniform indices from ``default_rng(seed)``, each array's values gathered at the same
    indices. The indices come in chunks of ``max(1, 2**18 // n)`` resamples (2 MiB, in cache
    beside the values); the chunks do not change the draws (numpy draws each index from the
    generator's stream alone, 32 or 64 bits at a time: the recipe's ``2**21 // n`` gives the
    same indices)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    means = np.empty((len(datas), resamples), dtype=np.float64)
    chunk = max(1, _CHUNK_CELLS // n)
    # One buffer for the gathered values, reused: a fresh array per chunk and sample is a fresh
    # mapping (and its page faults) once glibc maps large blocks (cli/_memory.py): a third of the
    # time at a million values. ``take`` with ``mode="clip"`` writes into it unbuffered (the
    # indices are in range: clipping changes none); its values, and so the means, are those of
    # ``data[picks]``.
    gathered = np.empty((min(chunk, resamples), n), dtype=np.float64)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        picks = rng.integers(0, n, size=(stop - start, n))
        values = gathered[:stop - start]
        for index, data in enumerate(datas):
            np.take(data, picks, out=values, mode="clip")
            means[index, start:stop] = values.mean(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    out = []
    for resampled in means:
        low, high = np.percentile(resampled, [tail, 100 - tail])
        out.append((float(low), float(high)))
    return out


@functools.lru_cache(maxsize=256)  # scorers and groups often have the same counts (a summary asks 6 x 3 times)
def _counts_interval(levels: tuple[float, ...], counts: tuple[int, ...], seed: int, resamples: int,
                     confidence: float) -> tuple[float, float]:
    """``bootstrap_ci`` of values given as distinct ``levels`` and their ``counts``: a pure
    function of its arguments, so equal inputs share one set of draws."""
    import numpy as np

    n = sum(counts)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, np.asarray(counts, dtype=np.float64) / n, size=resamples)
    means = draws @ np.asarray(levels, dtype=np.float64) / n
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def metrics(values: Sequence[float], n_error: int = 0, *, seed: int = 0) -> dict[str, Any]:
    """``{"mean", "stderr", "ci95": [lo, hi], "n", "n_error"}`` of ``values`` (not null ones)."""
    if len(values) > _FEW_LEVELS:
        levels = Counter(values)
        if len(levels) <= _FEW_LEVELS and not any(v == 0 and math.copysign(1.0, v) < 0 for v in levels):
            return _level_metrics(levels, len(values), n_error, seed)
    interval = bootstrap_ci(values, seed=seed)
    return {
        "mean": mean(values),
        "stderr": stderr(values),
        "ci95": list(interval) if interval is not None else None,
        "n": len(values),
        "n_error": n_error,
    }


def array_metrics(values: Any, n_error: int = 0, *, seed: int = 0) -> dict[str, Any]:
    """``metrics`` of a numpy array of values: the same dict, without a Python float per value
    when the values have at most 64 levels (``_level_metrics`` of their counts: exact sums, so
    the order of the levels does not count); otherwise the same sums over the array."""
    import numpy as np

    if len(values) > _FEW_LEVELS:
        levels, counts = np.unique(values, return_counts=True)
        if len(levels) <= _FEW_LEVELS and not bool(np.any(np.signbit(values) & (values == 0))):
            return _level_metrics(Counter(dict(zip(levels.tolist(), counts.tolist(), strict=True))), len(values), n_error, seed)
    n = len(values)  # (no list, and no Counter, of a million floats: the same sums over the array)
    interval = bootstrap_ci(values, seed=seed)
    return {
        "mean": math.fsum(values) / n if n else None,
        "stderr": array_stderr(values),
        "ci95": list(interval) if interval is not None else None,
        "n": n,
        "n_error": n_error,
    }


def array_stderr(values: Any) -> float | None:
    """``stderr`` of a numpy array, bit for bit: the same deviations and products, elementwise,
    and the same exactly rounded sums (``math.fsum``), without a list of them."""
    n = len(values)
    if n < 2:
        return None
    centre = math.fsum(values) / n
    deviations = values - centre
    return math.sqrt(math.fsum(deviations * deviations) / (n - 1)) / math.sqrt(n)


def _level_metrics(levels: Counter[float], n: int, n_error: int, seed: int) -> dict[str, Any]:
    """``metrics`` of n values given as distinct values and their counts, in O(levels): the
    same numbers bit for bit. ``math.fsum`` is the exactly rounded sum, and so is the float of
    the exact (``Fraction``) sum of count × value; each deviation depends on its value only."""
    total = float(sum((Fraction(v) * c for v, c in levels.items()), Fraction(0)))
    centre = total / n
    squares = sum((Fraction((v - centre) * (v - centre)) * c for v, c in levels.items()), Fraction(0))
    ordered = sorted(levels.items())  # np.unique's order
    if len(ordered) == 1:
        only = float(n) * ordered[0][0] / n
        interval = (only, only)
    else:
        interval = _counts_interval(tuple(v for v, _ in ordered), tuple(c for _, c in ordered), seed,
                                    BOOTSTRAP_RESAMPLES, 0.95)
    return {
        "mean": centre,
        "stderr": math.sqrt(float(squares) / (n - 1)) / math.sqrt(n),
        "ci95": list(interval),
        "n": n,
        "n_error": n_error,
    }


MISSING_GROUP = "(missing)"
"""The name of the group of the items whose metadata lacks the ``group_by`` key."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""``group_value`` of an item whose metadata lacks the key."""


def group_value(metadata: Any, field: str) -> Any:
    """An item's group as a hashable key that keeps the JSON type: ``("s", text)`` for a
    string, ``("j", JSON text)`` for any other value (``null`` included), ``MISSING`` when the
    metadata has no such key."""
    if not isinstance(metadata, dict) or field not in metadata:
        return MISSING
    value = metadata[field]
    if isinstance(value, str):
        return ("s", value)
    import orjson

    return ("j", orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


def group_names(values: Iterable[Any]) -> dict[Any, str]:
    """The shown name of each ``group_value``: a string as it is, another value as its JSON
    text, ``"(missing)"`` for a missing key. A string whose name would equal another group's
    (``"7"`` beside ``7``, ``"null"`` beside ``null``, ``"(missing)"`` beside a missing key) is
    shown as its JSON text (``"\"7\""``), so that every group keeps a name of its own."""
    keys = list(dict.fromkeys(values))
    taken = {MISSING_GROUP if key is MISSING else key[1] for key in keys if key is MISSING or key[0] == "j"}
    names: dict[Any, str] = {}
    for key in keys:
        if key is MISSING:
            names[key] = MISSING_GROUP
        elif key[0] == "j" or key[1] not in taken:
            names[key] = key[1]
        else:
            import orjson

            names[key] = orjson.dumps(key[1]).decode()
    return names


def group_key(metadata: Any, field: str) -> str:
    """The shown name of an item's group (see ``group_names``; alone, without the other
    groups' names to tell apart): its metadata ``field``, a string as it is, another value as
    its JSON text, ``"(missing)"`` when the key is missing."""
    return group_names([group_value(metadata, field)])[group_value(metadata, field)]


class Reduced(dict[str, list[float | None]]):
    """Each scorer's reduced value per item (``ScoreTally.reduced``), with ``failed``: per
    scorer and item, True when the item has no value because it (or the scorer) failed, and
    ``strict``: the values with every failed epoch counted as 0 (None when nothing failed)."""

    failed: dict[str, list[bool]]
    strict: dict[str, list[float | None]] | None


class ScoreTally:
    """Collects the score values of result lines, then reduces epochs and computes metrics.

    Keeps columns (``array``): per line its item (an index, items in first-seen order) and
    epoch, and per scorer its value (NaN: none) and whether it failed (the line ended in error,
    or the record says ``"error": true``); per item its group. About 9 bytes per (line, scorer)
    and 16 per line, plus per item its id (a dict entry) or, when ``add`` is given the item's
    ``item`` number (a dataset position: ``score``), 8 bytes: a million lines fit in tens of MiB.
    """

    def __init__(
        self, names: Sequence[str], *, reducer: str | Reducer = DEFAULT_REDUCER, group_by: str | None = None,
        seed: int = 0, cluster_by: str | None = None,
    ) -> None:
        self.names = list(names)
        self.reducer = reducer if isinstance(reducer, Reducer) else parse_reducer(reducer)
        self.group_by = group_by
        self.seed = seed
        self._codes: dict[str, int] = {}  # item id -> its index, in first-seen order
        self._numbered = array("q")  # or, when add() is given item numbers: number -> index + 1 (0: not seen)
        self._items = 0
        self._item = array("q")
        self._epoch: array[int] | None = None  # from the first epoch that is not 1 (until then every one is 1)
        self._values = [array("d") for _ in self.names]
        self._failed: list[array[int]] | None = None  # from the first failure (until then none failed)
        self._any_failed = False
        self._groups = array("i")  # per item, its group's code in _group_values
        self._group_codes: dict[Any, int] = {}
        self.cluster_by = cluster_by
        self._clusters: list[Any] = []

    def add(self, line: ResultLine | TallyLine, *, item: int | None = None) -> None:
        """Count one result line (its ``id``, ``epoch``, ``status``, ``scores`` and ``metadata``).
        ``item``: a number >= 0 that names the line's item (its position in the dataset) and no
        other, instead of the id; give it for every line or for none."""
        scores = line.scores
        row: list[float | None] = []
        if scores:
            for name in self.names:  # (a loop, not a comprehension: one function call less)
                record = scores.get(name)
                value = record.get("value") if type(record) is dict else None
                row.append(value if type(value) is float else score_value(record))
        else:
            row = [None] * len(self.names)
        epoch = line.epoch
        flags = _failures(row, scores, line.status == "error", self.names) if None in row else None
        self._keep(line.id, 1 if epoch is None else epoch, row, line.metadata, flags, item)

    def add_line(self, line: Mapping[str, Any]) -> None:
        """Count one result line given as its JSON object."""
        item_id = str(line.get("id"))
        epoch = line.get("epoch", 1)
        scores = line.get("scores")
        scores = scores if isinstance(scores, dict) else {}
        row = [score_value(scores.get(name)) for name in self.names]
        flags = _failures(row, scores, line.get("status") == "error", self.names) if None in row else None
        self._keep(item_id, epoch if isinstance(epoch, int) else 1, row, line.get("metadata"), flags)

    def _keep(self, item_id: str, epoch: int, row: list[float | None], metadata: Any,
              flags: tuple[bool, ...] | None, number: int | None = None) -> None:
        if number is None:
            if self._numbered:
                raise ValueError("ScoreTally.add: give item= for every line or for none")
            code = self._codes.get(item_id)
            new = code is None
            if code is None:
                code = self._codes[item_id] = self._items
        else:
            if self._codes:
                raise ValueError("ScoreTally.add: give item= for every line or for none")
            numbered = self._numbered
            if number >= len(numbered):
                numbered.frombytes(bytes(8 * (max(number + 1, 2 * len(numbered)) - len(numbered))))
            code = numbered[number] - 1
            new = code < 0
            if new:
                code = self._items
                numbered[number] = code + 1
        if new:
            self._items += 1
            if self.group_by is not None:
                value = group_value(metadata, self.group_by)
                group = self._group_codes.get(value)
                if group is None:
                    group = self._group_codes[value] = len(self._group_codes)
                self._groups.append(group)
            if self.cluster_by is not None:
                from ._cluster import cluster_of  # _cluster imports nothing of this module

                self._clusters.append(cluster_of(metadata, self.cluster_by, item_id))
        before = len(self._item)
        self._item.append(code)
        if epoch != 1 or self._epoch is not None:
            if self._epoch is None:
                self._epoch = array("q", [1]) * before
            self._epoch.append(epoch)
        for column, value in zip(self._values, row, strict=True):  # (NaN: no value)
            column.append(_NAN if value is None else value)
        if flags is not None and self._failed is None:
            self._failed = [array("b", bytes(before)) for _ in self.names]
        if self._failed is not None:
            if flags is None:
                for marks in self._failed:
                    marks.append(0)
            else:
                self._any_failed = True
                for marks, flag in zip(self._failed, flags, strict=True):
                    marks.append(flag)

    def _kept(self) -> tuple[Any, Any]:
        """The lines that count (the first of each (item, epoch)), ordered by item then epoch,
        and where each item's lines start in them (one more: the end)."""
        import numpy as np

        n = len(self._item)
        if not n:
            return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
        if self._items == n:  # every line its own item: item codes are first-seen, so in line order
            return np.arange(n), np.arange(n + 1)
        items = np.frombuffer(self._item, dtype=np.int64)
        if self._epoch is None:  # every epoch 1: the first line of each item
            order = np.argsort(items, kind="stable")
            first = np.ones(n, dtype=bool)
            first[1:] = items[order][1:] != items[order][:-1]
        else:
            epochs = np.frombuffer(self._epoch, dtype=np.int64)
            order = np.lexsort((np.arange(n), epochs, items))
            first = np.ones(n, dtype=bool)
            first[1:] = (items[order][1:] != items[order][:-1]) | (epochs[order][1:] != epochs[order][:-1])
        lines = order[first]
        starts = np.searchsorted(items[lines], np.arange(self._items + 1))
        return lines, starts

    def reduced(self) -> Reduced:
        """Each scorer's reduced value per item, in the order items were first seen (a
        ``Reduced``: also which items failed, and the strict values)."""
        return self._reduced_arrays().as_lists()

    def _reduced_arrays(self) -> _ReducedArrays:
        """``reduced`` as numpy arrays (NaN: no value): 9 bytes per item and scorer, where the
        lists of ``Reduced`` take about 40."""
        import numpy as np

        names = self.names
        reducer = self.reducer
        lines, starts = self._kept()
        items = self._items
        columns = [_column(values, lines) for values in self._values]
        flag_columns = [np.frombuffer(marks, dtype=np.int8)[lines].astype(bool) if len(marks) else np.zeros(0, bool)
                        for marks in self._failed] if self._failed is not None else [np.zeros(len(lines), bool) for _ in names]
        any_failed = self._any_failed and any(bool(flags.any()) for flags in flag_columns)
        if reducer.k is None and len(lines) == items:
            # One epoch per item: each value is its own reduction (see ``Reducer.__call__``).
            flags_by = dict(zip(names, flag_columns, strict=True))
            zeroed = {name: np.where(flags_by[name], 0.0, column) for name, column in zip(names, columns, strict=True)
                      } if any_failed else None
            return _ReducedArrays(dict(zip(names, columns, strict=True)), flags_by, zeroed)
        bounds = starts.tolist()
        values_by: dict[str, Any] = {}
        failed_by: dict[str, Any] = {}
        strict_by: dict[str, Any] | None = {} if any_failed else None
        for name, column, flags in zip(names, columns, flag_columns, strict=True):
            values = [None if v != v else v for v in column.tolist()]
            reduced_values, strict_values, marks = reduce_spans(values, flags.tolist(), bounds, reducer,
                                                                strict=strict_by is not None)
            values_by[name] = reduced_values
            # an item failed: an epoch failed and no value came of its epochs
            failed_by[name] = marks & np.isnan(reduced_values) if marks is not None else np.zeros(items, dtype=bool)
            if strict_by is not None:
                strict_by[name] = strict_values
        return _ReducedArrays(values_by, failed_by, strict_by)

    def scores(self, reduced: Reduced | _ReducedArrays | None = None) -> dict[str, dict[str, Any]]:
        """The summary's ``scores``: metrics per scorer over every item (of ``reduced``, when
        already computed)."""
        arrays = self._reduced_arrays() if reduced is None else _ReducedArrays.of(reduced)
        clusters = self.clusters()
        out = {name: _metrics_of(arrays, name, None, self.seed, clusters) for name in self.names}
        lines, starts = self._kept()
        if len(lines) > self._items:  # some item has two or more epochs
            from ._epochs import add_epoch_variance

            bounds = starts.tolist()

            def per_scorer() -> Iterator[list[list[float]]]:  # one scorer's lists at a time
                for values in self._values:
                    column = _column(values, lines).tolist()
                    yield [[v for v in column[start:stop] if v == v] for start, stop in itertools.pairwise(bounds)]

            add_epoch_variance(out, self.names, per_scorer())
        return out

    def clusters(self) -> list[Any] | None:
        """Each item's cluster (``cluster_by``), in the order items were first seen; None without it."""
        if self.cluster_by is None:
            return None
        return list(self._clusters)

    def groups(self, reduced: Reduced | _ReducedArrays | None = None) -> dict[str, dict[str, dict[str, Any]]] | None:
        """The summary's ``groups`` (None without ``group_by``): per group, per scorer. A group
        is named by ``group_names``: the value's JSON type is kept apart."""
        if self.group_by is None:
            return None
        import numpy as np

        arrays = self._reduced_arrays() if reduced is None else _ReducedArrays.of(reduced)
        codes = np.frombuffer(self._groups, dtype=np.int32) if self._groups else np.zeros(0, dtype=np.int32)
        values = list(self._group_codes)  # in first-seen order (a group's code is its index)
        names = group_names(values)
        ordered = sorted(range(len(values)), key=lambda code: names[values[code]])
        clusters = self.clusters()
        out = {}
        for code in ordered:
            indices = np.flatnonzero(codes == code)  # the group's items, in first-seen order
            out[names[values[code]]] = {
                name: _metrics_of(arrays, name, indices, self.seed,
                                  None if clusters is None else [clusters[i] for i in indices.tolist()])
                for name in self.names
            }
        return out

    def group_counts(self) -> tuple[int, int]:
        """(items, items whose metadata lacks the ``group_by`` key)."""
        missing = self._group_codes.get(MISSING)
        return self._items, 0 if missing is None else self._groups.count(missing)


_NAN = math.nan


def _column(values: array[float], lines: Any) -> Any:
    """A scorer's values (numpy; NaN: none) at ``lines``."""
    import numpy as np

    return np.frombuffer(values, dtype=np.float64)[lines] if len(values) else np.zeros(0, dtype=np.float64)


def _failures(row: list[float | None], scores: Any, line_failed: bool, names: Sequence[str]) -> tuple[bool, ...] | None:
    """Per scorer, whether its missing value is a failure (the line ended in error, or the
    record says ``"error": true``); None when none is."""
    flags = [
        value is None and (line_failed or (isinstance(scores, dict) and type(record := scores.get(name)) is dict
                                           and record.get("error") is True))
        for value, name in zip(row, names, strict=True)
    ]
    return tuple(flags) if any(flags) else None


@attrs.define(eq=False)
class _ReducedArrays:
    """``Reduced`` as numpy arrays: per scorer the values (NaN: none), the failed flags, the
    strict values (None when nothing failed)."""

    values: dict[str, Any]
    failed: dict[str, Any]
    strict: dict[str, Any] | None

    @classmethod
    def of(cls, reduced: Reduced | _ReducedArrays) -> _ReducedArrays:
        import numpy as np

        if isinstance(reduced, _ReducedArrays):
            return reduced

        def floats(column: Sequence[float | None]) -> Any:
            return np.array([_NAN if v is None else v for v in column], dtype=np.float64)

        return cls({name: floats(column) for name, column in reduced.items()},
                   {name: np.array(flags, dtype=bool) for name, flags in reduced.failed.items()},
                   None if reduced.strict is None else {name: floats(column) for name, column in reduced.strict.items()})

    def as_lists(self) -> Reduced:
        out = Reduced({name: _nones(column) for name, column in self.values.items()})
        out.failed = {name: flags.tolist() for name, flags in self.failed.items()}
        out.strict = None if self.strict is None else {name: _nones(column) for name, column in self.strict.items()}
        return out


def _nones(column: Any) -> list[float | None]:
    return [None if v != v else v for v in column.tolist()]


def _metrics_of(reduced: _ReducedArrays | Reduced, name: str, indices: Iterable[int] | None, seed: int,
                clusters: Sequence[Any] | None = None) -> dict[str, Any]:
    """A scorer's metrics over the items ``indices`` (None: every item); ``clusters`` (one per
    index, in order): clustered stderr and ci95 (``cluster_metrics``)."""
    import numpy as np

    if isinstance(reduced, Reduced):
        reduced = _ReducedArrays.of(reduced)
    if indices is not None and not isinstance(indices, np.ndarray):
        indices = np.fromiter(indices, dtype=np.intp)
    column, failed = reduced.values[name], reduced.failed[name]
    if indices is not None:
        column, failed = column[indices], failed[indices]
    missing = np.isnan(column)
    n_error = int(np.count_nonzero(missing & failed))
    n_na = int(np.count_nonzero(missing)) - n_error
    if clusters is not None:
        kept = [clusters[position] for position in np.flatnonzero(~missing).tolist()]
        out = cluster_metrics(column[~missing].tolist(), kept, n_error, seed=seed, strict=False)
    else:
        out = array_metrics(column[~missing], n_error, seed=seed)
    out["n_na"] = n_na
    if n_error and reduced.strict is not None:
        strict_column = reduced.strict[name] if indices is None else reduced.strict[name][indices]
        strict = array_metrics(strict_column[~np.isnan(strict_column)], seed=seed)
    else:
        strict = out
    out["strict"] = {key: strict[key] for key in ("mean", "stderr", "ci95", "n")}
    return out


def cluster_metrics(values: Sequence[float], clusters: Sequence[Any], n_error: int = 0, *, seed: int = 0,
                    strict: bool = True) -> dict[str, Any]:
    """``metrics`` with clustered ``stderr`` and ``ci95`` and ``stderr_iid`` (the iid one),
    ``n_clusters`` and ``design_effect``. With fewer than two clusters and not ``strict``, the
    clustered fields are null.

    Raises:
        ClusterError: the values fall in fewer than two clusters (``strict``).
    """
    from ._cluster import ClusterError, cluster_bootstrap_ci, cluster_codes, cluster_stderr, design_effect

    iid = stderr(values)  # no iid bootstrap: the interval is the clusters'
    out: dict[str, Any] = {"mean": mean(values), "stderr": iid, "ci95": None, "n": len(values), "n_error": n_error}
    if not values:
        out.update(stderr_iid=None, n_clusters=0, design_effect=None)
        return out
    _, g = cluster_codes(clusters)
    if g < 2:
        if not strict:
            out.update(stderr_iid=out["stderr"], stderr=None, ci95=None, n_clusters=g, design_effect=None)
            return out
        raise ClusterError(f"the {len(values)} values fall in {g} cluster: a clustered standard error needs at least 2")
    interval = cluster_bootstrap_ci(values, clusters, seed=seed)
    out["stderr_iid"] = out["stderr"]
    out["stderr"] = cluster_stderr(values, clusters)
    out["ci95"] = list(interval) if interval is not None else None
    out["n_clusters"] = g
    out["design_effect"] = design_effect(values, clusters)
    return out

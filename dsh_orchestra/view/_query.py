"""The items browser's queries over a ``ResultsIndex``: one row per item (its epochs reduced),
filtered, sorted and paged on the server, and the run's running counts and means.

Filters on the indexed columns (status, error type, finish reason, epoch, a scorer's value)
are numpy masks over the lines; a text search (id, response, prompt) and metadata filters read
the candidate lines from the file. An item is listed when any of its lines matches; its row
shows every epoch. Groups (which lines belong to which item) are cached per index state.
"""

from __future__ import annotations

import math
import operator
import time
from typing import Any, Callable, Mapping

import attrs
import numpy as np
import numpy.typing as npt
import orjson

from ._index import ResultsIndex, id_key

MAX_LIMIT = 500
BACKLOG = 20_000  # lines still to read above which counts and groups may be STALE_S old
STALE_S = 2.0
OPS: dict[str, Callable[[Any, Any], Any]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "=": operator.eq,
}
SORTS = ("file", "id", "status", "epochs", "duration_s", "tokens", "cost_usd", "error", "finish_reason")


class QueryError(ValueError):
    """A query parameter is malformed; the message names it."""


@attrs.frozen
class Groups:
    """Which lines make each item: ``inverse[line]`` is its item; items in file order."""

    state: tuple[int, int]
    inverse: npt.NDArray[np.int32]
    first: npt.NDArray[np.int32]  # first line of each item
    order: npt.NDArray[np.int32]  # lines sorted by item
    bounds: npt.NDArray[np.int64]  # item i's lines: order[bounds[i]:bounds[i+1]]
    trivial: bool = False  # every item has one line: item i is line i

    @property
    def items(self) -> int:
        return len(self.first)

    def lines_of(self, item: int) -> list[int]:
        return sorted(self.order[self.bounds[item]:self.bounds[item + 1]].tolist())


def _fresh(index: ResultsIndex, state: tuple[int, ...], cached: tuple[int, ...], at: float) -> bool:
    """Whether a cached result for ``cached`` serves ``state``: the same, or, while a large
    backlog of lines is still being read (the first read of a big file), at most STALE_S old."""
    if state == cached:
        return True
    reading = len(index) - index.parsed > BACKLOG
    return reading and cached[0] == state[0] and time.monotonic() - at < STALE_S


def groups(index: ResultsIndex, cache: dict[str, Any], *, stale_ok: bool = False) -> Groups:
    """The items of the parsed lines (cached until the index changes; with ``stale_ok``, those
    of the first ``len(inverse)`` lines, while a large backlog is read)."""
    state = (index.generation, index.parsed)
    found = cache.get("groups")
    if isinstance(found, Groups) and (found.state == state or (stale_ok and _fresh(index, state, found.state, cache.get("groups_at", 0.0)))):
        return found
    keys = index.column("keys")
    ordered = np.sort(keys)
    if not (ordered[1:] == ordered[:-1]).any():  # one line per item (no epochs): no grouping to do
        del ordered, keys
        line = np.arange(index.parsed, dtype=np.int32)
        trivial = Groups(state, line, line, line, np.arange(index.parsed + 1, dtype=np.int64), trivial=True)
        cache["groups"], cache["groups_at"] = trivial, time.monotonic()
        return trivial
    del ordered
    _, first_of_key, inverse_key = np.unique(keys, return_index=True, return_inverse=True)
    # number the items in file order (by their first line)
    rank = np.empty(len(first_of_key), dtype=np.int64)
    by_first = np.argsort(first_of_key, kind="stable")
    rank[by_first] = np.arange(len(first_of_key))
    inverse = rank[inverse_key.reshape(-1)].astype(np.int32)  # int32: half the memory (< 2**31 lines)
    del rank, inverse_key, keys
    first = first_of_key[by_first].astype(np.int32)
    order = np.argsort(inverse, kind="stable").astype(np.int32)
    counts = np.bincount(inverse, minlength=len(first))
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    result = Groups(state, inverse, first, order, bounds)
    cache["groups"], cache["groups_at"] = result, time.monotonic()
    return result


def _per_item_mean(values: npt.NDArray[Any], g: Groups) -> npt.NDArray[Any]:
    if g.trivial:
        return values
    present = ~np.isnan(values)
    sums = np.bincount(g.inverse, weights=np.where(present, values, 0.0), minlength=g.items)
    counts = np.bincount(g.inverse, weights=present.astype(np.float64), minlength=g.items)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: npt.NDArray[np.float64] = sums / counts
    return out


def score_stats(values: npt.NDArray[np.float64]) -> dict[str, Any]:
    """Mean, standard error and a normal 95 % interval of per-item values (NaN: no value)."""
    present = values[~np.isnan(values)]
    n = int(len(present))
    if not n:
        return {"mean": None, "stderr": None, "ci95": None, "n": 0, "n_null": int(len(values))}
    mean = float(present.mean())
    stderr = float(present.std(ddof=1) / math.sqrt(n)) if n > 1 else None
    ci = [mean - 1.96 * stderr, mean + 1.96 * stderr] if stderr is not None else None
    return {"mean": mean, "stderr": stderr, "ci95": ci, "n": n, "n_null": int(len(values) - n)}


def run_stats(index: ResultsIndex, cache: dict[str, Any]) -> dict[str, Any]:
    """Counts, latency, tokens, cost and each scorer's running mean over the parsed lines
    (computed once per state of the index)."""
    state = (index.generation, index.parsed, len(index))
    found = cache.get("stats")
    if isinstance(found, tuple) and _fresh(index, state, found[0], found[2]):
        value: dict[str, Any] = {**found[1], "lines": len(index), "parsed": index.parsed}
        return value
    stats = _run_stats(index, cache)
    cache["stats"] = (state, stats, time.monotonic())
    return stats


def _run_stats(index: ResultsIndex, cache: dict[str, Any]) -> dict[str, Any]:
    g = groups(index, cache)
    status = index.column("status")
    names = index.status_codes.names
    counts = {str(names[code]): int(n) for code, n in enumerate(np.bincount(status, minlength=len(names))) if n and code}
    durations = index.column("durations")
    durations = durations[~np.isnan(durations)]
    errors = index.column("errors")
    error_counts = {str(index.error_codes.names[c]): int(n) for c, n in enumerate(np.bincount(errors)) if n and c}
    finish = index.column("finish")
    finish_counts = {str(index.finish_codes.names[c] or "none"): int(n) for c, n in enumerate(np.bincount(finish)) if n}
    tokens = index.column("tokens")
    costs = index.column("costs")
    ok = counts.get("ok", 0)
    return {
        "lines": len(index), "parsed": index.parsed, "items": g.items,
        "ok": ok, "error": index.parsed - ok, "status": counts, "errors": error_counts, "finish_reasons": finish_counts,
        "p50_s": float(np.percentile(durations, 50)) if len(durations) else None,
        "p95_s": float(np.percentile(durations, 95)) if len(durations) else None,
        "tokens": float(np.nansum(tokens, dtype=np.float64)) if len(tokens) and not np.isnan(tokens).all() else None,
        "cost_usd": float(np.nansum(costs)) if len(costs) and not np.isnan(costs).all() else None,
        "scores": {name: score_stats(_per_item_mean(index.score(name), g)) for name in index.scores},
        "epochs": sorted({int(e) for e in np.unique(index.column("epochs")) if e}),
        "metadata_keys": sorted(index.metadata_keys),
        "bad_lines": index.bad_lines,
    }


def _score_filter(text: str) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.bool_]]:
    text = text.strip()
    if text in ("none", "null"):
        return np.isnan
    for symbol in ("<=", ">=", "<", ">", "="):
        if text.startswith(symbol):
            op, number = OPS[symbol], text[len(symbol):]
            break
    else:
        op, number = operator.eq, text
    try:
        value = float(number)
    except ValueError:
        raise QueryError(f"a score filter is a value with an optional <, <=, >, >=, = before it, or 'none'; not {text!r}") from None

    def check(values: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
        with np.errstate(invalid="ignore"):
            result: npt.NDArray[np.bool_] = op(values, value) & ~np.isnan(values)
        return result
    return check


def _code_mask(codes: npt.NDArray[Any], names: list[str | None], wanted: str) -> npt.NDArray[np.bool_]:
    if wanted == "none":
        return np.asarray(codes == 0)
    code = names.index(wanted) if wanted in names else -1
    return np.asarray(codes == code)


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise QueryError(f"{name} must be a whole number, not {raw!r}") from None
    if not low <= value <= high:
        raise QueryError(f"{name} must be between {low} and {high}, not {value}")
    return value


def _text_match(index: ResultsIndex, mask: npt.NDArray[np.bool_], needle: str, prompt_keys: set[int]) -> npt.NDArray[np.bool_]:
    """Lines (among ``mask``) whose id or response holds ``needle`` (any case), or whose item's
    prompt does (``prompt_keys``)."""
    lowered = needle.lower()
    raw_needle = lowered.encode("utf-8")
    plain = raw_needle == orjson.dumps(lowered)[1:-1]  # nothing JSON would escape: the raw bytes hold it as is
    out = np.zeros(len(mask), dtype=bool)
    keys = index.column("keys")[:len(mask)]
    if prompt_keys:
        out |= mask & np.isin(keys, np.fromiter(prompt_keys, dtype=np.int64))
    for line, raw in index.iter_raw(np.flatnonzero(mask & ~out)):
        if plain and raw_needle not in raw.lower():
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(value, dict):
            continue
        response = value.get("final_response")
        if lowered in str(value.get("id")).lower() or (isinstance(response, str) and lowered in response.lower()):
            out[line] = True
    return out


def _metadata_match(index: ResultsIndex, mask: npt.NDArray[np.bool_], wanted: dict[str, str]) -> npt.NDArray[np.bool_]:
    out = np.zeros(len(mask), dtype=bool)
    needles = [orjson.dumps(k) for k in wanted]
    for line, raw in index.iter_raw(np.flatnonzero(mask)):
        if not all(n in raw for n in needles):
            continue
        value = orjson.loads(raw)
        metadata = value.get("metadata") if isinstance(value, dict) else None
        if isinstance(metadata, dict) and all(k in metadata and _text(metadata[k]) == v for k, v in wanted.items()):
            out[line] = True
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode("utf-8")


def query_items(
    index: ResultsIndex, params: Mapping[str, str], cache: dict[str, Any],
    prompt_search: Callable[[str], set[int]] | None = None,
) -> dict[str, Any]:
    """One page of items: ``{"total", "offset", "limit", "items": [[line indexes] ...]}``.

    Params: ``offset``, ``limit`` (at most 500), ``sort`` (``file``, ``id``, ``status``,
    ``duration_s``, ``tokens``, ``cost_usd``, ``error``, ``finish_reason``, ``epochs`` or
    ``score:NAME``), ``order`` (``asc``/``desc``), ``status``, ``error`` and ``finish_reason``
    (a value or ``none``), ``epoch``, ``score.NAME`` (``<1``, ``>=0.5``, ``1``, ``none``),
    ``meta.KEY`` (the value as text), ``q`` (text in the id, response or prompt).

    Raises:
        QueryError: a parameter is malformed.
    """
    g = groups(index, cache, stale_ok=True)
    offset = _int(params, "offset", 0, 0, 1 << 62)
    limit = _int(params, "limit", 50, 1, MAX_LIMIT)
    n = len(g.inverse)  # the lines the groups cover (all parsed ones, but while a big file is read)
    mask = np.ones(n, dtype=bool)
    if params.get("status"):
        mask &= _code_mask(index.column("status")[:n], index.status_codes.names, params["status"])
    if params.get("error"):
        mask &= _code_mask(index.column("errors")[:n], index.error_codes.names, params["error"])
    if params.get("finish_reason"):
        mask &= _code_mask(index.column("finish")[:n], index.finish_codes.names, params["finish_reason"])
    if params.get("epoch"):
        mask &= index.column("epochs")[:n] == _int(params, "epoch", 0, 0, 1 << 30)
    metadata = {}
    for key, value in params.items():
        if key.startswith("score."):
            name = key[len("score."):]
            if name not in index.scores:
                raise QueryError(f"no scorer {name!r} in this run (scorers: {', '.join(index.scores) or 'none'})")
            if value:
                mask &= _score_filter(value)(index.score(name)[:n])
        elif key.startswith("meta.") and value:
            metadata[key[len("meta."):]] = value
    if metadata:
        mask = _metadata_match(index, mask, metadata)
    needle = params.get("q", "").strip()
    if needle:
        prompt_keys = prompt_search(needle) if prompt_search is not None else set()
        mask = _text_match(index, mask, needle, prompt_keys)
    matching = np.zeros(g.items, dtype=bool)
    matching[g.inverse[mask]] = True
    chosen = np.flatnonzero(matching)
    chosen = chosen[_sort_order(index, g, chosen, params)]
    page = chosen[offset:offset + limit]
    return {"total": int(len(chosen)), "offset": offset, "limit": limit, "items": [g.lines_of(int(i)) for i in page]}


def _sort_order(index: ResultsIndex, g: Groups, chosen: npt.NDArray[np.int64], params: Mapping[str, str]) -> npt.NDArray[np.int64]:
    sort = params.get("sort") or "file"
    order = params.get("order") or "asc"
    if order not in ("asc", "desc"):
        raise QueryError(f"order is asc or desc, not {order!r}")
    if sort == "file":
        key: npt.NDArray[Any] = g.first[chosen].astype(np.float64)
    elif sort.startswith("score:"):
        if sort[6:] not in index.scores:
            raise QueryError(f"no scorer {sort[6:]!r} to sort by")
        key = _per_item_mean(index.score(sort[6:])[:len(g.inverse)], g)[chosen]
    elif sort in ("duration_s", "tokens", "cost_usd"):
        column = {"duration_s": "durations", "tokens": "tokens", "cost_usd": "costs"}[sort]
        key = _per_item_mean(index.column(column)[:len(g.inverse)], g)[chosen]
    elif sort == "epochs":
        key = np.diff(g.bounds)[chosen].astype(np.float64)
    elif sort in ("status", "error", "finish_reason"):
        column, codes = {"status": ("status", index.status_codes), "error": ("errors", index.error_codes),
                         "finish_reason": ("finish", index.finish_codes)}[sort]
        names = np.array([name or "" for name in codes.names], dtype=object)
        key = names[index.column(column)[g.first[chosen]]]
    elif sort == "id":
        ids = [_first_id(index, int(g.first[i])) for i in chosen]
        key = np.array(ids, dtype=object)
    else:
        raise QueryError(f"sort by one of {', '.join(SORTS)} or score:NAME, not {sort!r}")
    if key.dtype == object:
        ranks = np.argsort(key, kind="stable")
        return ranks[::-1] if order == "desc" else ranks
    # missing values last either way
    missing = np.isnan(key)
    filled = np.where(missing, 0.0, key if order == "asc" else -key)
    return np.lexsort((g.first[chosen], filled, missing))


def _first_id(index: ResultsIndex, line: int) -> str:
    raw = index.raw(line)
    value = orjson.loads(raw)
    return str(value.get("id")) if isinstance(value, dict) else ""


def item_lines(index: ResultsIndex, item_id: str, cache: dict[str, Any]) -> list[int]:
    """The lines of ``item_id`` (every epoch), in file order."""
    keys = index.column("keys")
    return [int(i) for i in np.flatnonzero(keys == id_key(item_id))]

"""Paired comparison of two scored runs: per scorer the mean difference with a paired bootstrap
interval and a paired test, the regressions and improvements, and usage and latency side by side.

Pure: the records in, one JSON-ready document out (``compare_runs``). Items pair by id after
each run's epochs are reduced per item (as in the summary). The tests:

* McNemar's exact test when every paired value is 0 or 1: ``b`` pairs went 1 -> 0, ``c`` went
  0 -> 1, ``p = min(1, 2 * P(X <= min(b, c)))`` for ``X ~ Binomial(b + c, 1/2)``; 1.0 when
  ``b + c = 0``;
* otherwise a paired sign-flip permutation test of the mean difference: each difference keeps
  or flips its sign with probability 1/2; ``p`` is the share of sign assignments whose mean is
  at least as far from 0 as the observed one. 10,000 random assignments (seeded) with the
  ``(count + 1) / (10,000 + 1)`` correction; with at most 13 non-zero differences (8,192
  assignments or fewer) every assignment is enumerated instead, which gives the exact p. With
  313,600 non-zero differences or more, when the Berry-Esseen bound on the normal
  approximation's error, ``2 * 0.56 * sum|d|**3 / (sum d**2)**1.5``, is at most 0.002, p is the
  normal one, ``erfc(|sum d| / sqrt(2 * sum d**2))`` (no draws; see ``sign_flip_test``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .._params import Param, ParamError
from ._frames import Comparison
from ._idlist import SortedIds
from ._metrics import BOOTSTRAP_RESAMPLES, array_stderr, DEFAULT_REDUCER, Reducer, bootstrap_ci, bootstrap_cis, parse_reducer
from ._columns import AllOk, ReducedRun, RunColumns, _fsum as _fsum, _text, reduce_run, run_columns
from ._leaderboard import leaderboard
from ._multiple import DEFAULT_CORRECTION, adjust_pvalues

PERMUTATIONS = 10_000
_EXACT_LIMIT = 13  # 2**13 = 8,192 <= PERMUTATIONS: enumerate every sign assignment
_LOG2 = math.log(2.0)
_EXACT_COMB = 5_000
_TIE = 1e-12  # relative slack when comparing permuted statistics with the observed one
_TABLE_BYTES = 32 << 20  # the sign-flip test's tables of 256 subset sums for every group up to this size; beyond, a span at a time
_BERRY_ESSEEN = 0.56  # Shevtsova (2010): sup |F - Phi| <= 0.56 * sum E|X|^3 / B^3 for independent summands
_NORMAL_ERROR = 0.002  # the largest bound on |p - normal p| at which the sign-flip test takes the normal p
_NORMAL_FROM = 313_600  # (2 * 0.56 / 0.002) ** 2: with fewer non-zero differences the bound is always above


class CompareInputError(ParamError, ValueError):
    """The two runs cannot be compared (no common item, a scorer in neither); the message says
    why and names the parameter (``.param``: ``base``, or ``scorers``)."""


# ---- the tests ----------------------------------------------------------------------------


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact two-sided p: ``min(1, 2 * P(X <= min(b, c)))``, ``X ~ Binomial(b + c, 1/2)``;
    1.0 when there is no discordant pair.

    Raises:
        ValueError: a negative count.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, not b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    if 2 * k >= n - 1:  # the tail holds half the mass or more: p = 1
        return 1.0
    # In log space, linear in k: the largest term C(n, k) / 2**n, then the smaller ones by the
    # ratio C(n, i - 1) / C(n, i) = i / (n - i + 1), summed relative to it until they no longer
    # count. log C(n, k) is math.log of the exact integer up to n = 5,000 (correct to the last
    # bit), lgamma's beyond (relative error of p below 1e-9; the exact integer costs seconds).
    if n <= _EXACT_COMB:
        log_top = math.log(math.comb(n, k)) - n * _LOG2
    else:
        log_top = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * _LOG2
    total = term = 1.0
    for i in range(k, 0, -1):
        term *= i / (n - i + 1)
        total += term
        if term < total * 1e-17:
            break
    log_p = _LOG2 + log_top + math.log(total)
    return 1.0 if log_p >= 0.0 else math.exp(log_p)


def sign_flip_test(differences: Sequence[float], *, seed: int = 0, permutations: int = PERMUTATIONS) -> float | None:
    """The paired sign-flip permutation p of the mean of ``differences`` (two-sided; see the module).

    Zero differences do not change under a flip and are left out of the assignments (they
    still count in every mean's denominator). None for no differences.

    With m >= 313,600 non-zero differences d, the sum of the signed differences is close to
    normal, with variance ``s2 = sum d**2``: by the Berry-Esseen theorem for independent
    summands (Shevtsova's constant 0.56), the two-sided normal p ``erfc(|sum d| / sqrt(2 * s2))``
    is within ``2 * 0.56 * sum |d|**3 / s2**1.5`` of the exact sign-flip p. When that bound is at
    most 0.002 (below the Monte Carlo standard error of 10,000 assignments for any p from 0.05 to
    0.95), that normal p is returned and nothing is drawn. Fewer differences, or a larger bound
    (a few differences much larger than the rest), keep the drawn test.
    """
    if len(differences) == 0:  # (a list or a numpy array)
        return None
    import numpy as np

    data = np.asarray(differences, dtype=np.float64)
    n = len(data)
    moving = data[data != 0.0]
    observed = abs(float(data.sum()))
    if observed == 0.0 or len(moving) == 0:
        return 1.0
    threshold = observed * (1 - _TIE)
    if len(moving) >= _NORMAL_FROM:
        normal = _normal_p(moving, observed)
        if normal is not None:
            return normal
    if len(moving) <= _EXACT_LIMIT:
        m = len(moving)
        codes = np.arange(2**m, dtype=np.int64)[:, None]
        signs = 1.0 - 2.0 * ((codes >> np.arange(m, dtype=np.int64)) & 1)
        sums = np.abs(signs @ moving)
        return float(np.count_nonzero(sums >= threshold)) / float(2**m)
    rng = np.random.default_rng(seed)
    count = 0
    m = len(moving)
    total = float(moving.sum())
    rows = max(1, (1 << 21) // max(n, 1))  # assignments per draw (the draws depend on it)
    # One random bit per difference, eight to a random byte (most significant bit first, as
    # numpy's unpackbits): a set bit keeps its sign, a clear one flips it, so the permuted sum is
    # 2 * (the kept differences) - (all of them). The kept sum of each group of eight is looked up
    # in a table of its 256 subsets' sums: one lookup per byte instead of eight products. The
    # lookups go group by group (the draws of several chunks transposed), so that each group's
    # table stays in cache, 2**18 lookups at a time. When the tables of every group would pass
    # 32 MiB (beyond 131,072 differences), ``_count_by_spans`` makes them a span of groups at a time.
    groups = (m + 7) // 8
    padded = np.zeros(groups * 8, dtype=np.float64)
    padded[:m] = moving
    if groups * 256 * 8 > _TABLE_BYTES:
        count = _count_by_spans(rng, padded, rows, permutations, total, threshold)
        return (count + 1) / (permutations + 1)
    subsets = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64)
    table = (padded.reshape(groups, 8) @ subsets.T).ravel()  # table[group * 256 + byte]
    offsets = (np.arange(groups, dtype=np.intp) * 256)[:, None]
    batch = max(rows, (1 << 21) // groups)  # assignments looked up at once
    drawn: list[Any] = []
    held = 0
    # The lookups and their values go through two buffers made once (a fresh array each time is a
    # fresh mapping, and its page faults, once glibc maps large blocks: cli/_memory.py); ``take``
    # with ``mode="clip"`` writes into one unbuffered (every lookup is in range).
    cells = max(1 << 18, batch)  # (one group of every assignment held, when that is more)
    lookup_cells, value_cells = np.empty(cells, dtype=np.intp), np.empty(cells, dtype=np.float64)
    for start in range(0, permutations, rows):
        size = min(permutations, start + rows) - start
        drawn.append(rng.integers(0, 256, size=(size, groups), dtype=np.uint8))
        held += size
        if held + rows > batch or start + size >= permutations:
            block = np.ascontiguousarray(np.concatenate(drawn).T)  # (groups, held), group-major
            kept = np.zeros(held, dtype=np.float64)
            span = max(1, (1 << 18) // held)  # groups looked up at once: 2 MiB of indices
            for first in range(0, groups, span):
                part = block[first:first + span]
                lookups = lookup_cells[:part.size].reshape(part.shape)
                np.add(part, offsets[first:first + len(part)], out=lookups, casting="unsafe")
                values = value_cells[:part.size].reshape(part.shape)
                np.take(table, lookups, out=values, mode="clip")
                kept += values.sum(axis=0)
            count += int(np.count_nonzero(np.abs(2.0 * kept - total) >= threshold))
            drawn, held = [], 0
    return (count + 1) / (permutations + 1)


_SPAN = 512  # groups whose tables of 256 are made at once (1 MiB)
_DRAWN_BYTES = 16 << 20  # random bytes held at once by _count_by_spans


def _count_by_spans(rng: Any, padded: Any, rows: int, permutations: int, total: float, threshold: float) -> int:
    """The sign-flip test's count of assignments at least as far from 0 as the observed sum, for
    many differences (``padded`` to whole groups of eight): the same draws, from ``rng``, as the
    tables of every group would look up, with the tables of 256 made from two half-byte tables of
    16 (``high + low``) a span of groups at a time, for up to 16 MiB of assignments drawn at once
    (held assignment by assignment: no transposed copy)."""
    groups = len(padded) // 8
    halves = np.unpackbits(np.arange(16, dtype=np.uint8)[:, None], axis=1)[:, 4:].astype(np.float64)
    sixteen = padded.reshape(groups * 2, 4) @ halves.T  # per group its high half byte's 16 sums, then its low's
    high, low = sixteen[0::2], sixteen[1::2]
    batch = max(rows, min(1024, _DRAWN_BYTES // groups))  # assignments held at once
    drawn = np.empty((batch, groups), dtype=np.uint8)
    table = np.empty((_SPAN, 256), dtype=np.float64)
    offsets = np.arange(_SPAN, dtype=np.intp) * 256
    lookup_cells, value_cells = np.empty(batch * _SPAN, dtype=np.intp), np.empty(batch * _SPAN, dtype=np.float64)
    count = held = 0
    for start in range(0, permutations, rows):
        size = min(permutations, start + rows) - start
        drawn[held:held + size] = rng.integers(0, 256, size=(size, groups), dtype=np.uint8)
        held += size
        if held + rows > batch or start + size >= permutations:
            kept = np.zeros(held, dtype=np.float64)
            for first in range(0, groups, _SPAN):
                span = min(_SPAN, groups - first)
                np.add(high[first:first + span, :, None], low[first:first + span, None, :],
                       out=table[:span].reshape(span, 16, 16))  # table[group, byte] = high[byte >> 4] + low[byte & 15]
                lookups = lookup_cells[:held * span].reshape(held, span)
                np.add(drawn[:held, first:first + span], offsets[:span], out=lookups, casting="unsafe")
                values = value_cells[:held * span].reshape(held, span)
                np.take(table, lookups, out=values, mode="clip")
                kept += values.sum(axis=1)
            count += int(np.count_nonzero(np.abs(2.0 * kept - total) >= threshold))
            held = 0
    return count


def _normal_p(moving: Any, observed: float) -> float | None:
    """The normal approximation's two-sided p of the sign-flip test of ``moving`` (the non-zero
    differences; ``observed`` = |their sum|), or None when its Berry-Esseen bound is above 0.002."""
    size = np.abs(moving)
    squares = size * size
    s2 = math.fsum(squares)
    s3 = math.fsum(squares * size)
    bound = 2 * _BERRY_ESSEEN * s3 / (s2 * math.sqrt(s2))
    if not bound <= _NORMAL_ERROR:
        return None
    return math.erfc(observed / math.sqrt(2.0 * s2))


# ---- pairing ------------------------------------------------------------------------------


def _value(record: Any) -> float | None:
    value = record.get("value") if isinstance(record, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def scorer_names(lines: Iterable[Mapping[str, Any]] | RunColumns) -> list[str]:
    """The scorer names of ``lines``' ``scores``, in first-seen order."""
    if isinstance(lines, RunColumns):
        return list(lines.names)
    names: dict[str, None] = {}
    for line in lines:
        scores = line.get("scores")
        if isinstance(scores, dict):
            names.update((str(name), None) for name in scores)
    return list(names)


def reduce_items(
    lines: Iterable[Mapping[str, Any]] | RunColumns, names: Sequence[str], reducer: str | Reducer = DEFAULT_REDUCER
) -> tuple[dict[str, dict[str, float | None]], dict[str, str]]:
    """Per item id: each scorer's value with the epochs reduced, and the item's status.

    The first line of an (id, epoch) counts. An item's status is ``ok`` when every epoch is
    ``ok``, else the first other status of its epochs.
    """
    values, status, _ = reduce_items_strict(lines, names, reducer)
    return values, status


def reduce_items_strict(
    lines: Iterable[Mapping[str, Any]] | RunColumns, names: Sequence[str], reducer: str | Reducer = DEFAULT_REDUCER
) -> tuple[dict[str, dict[str, float | None]], dict[str, str], dict[str, dict[str, float | None]]]:
    """``reduce_items``, and the strict values of the items where something failed: per item
    id and scorer, the epochs reduced with every failed epoch (the line ended in error, or the
    scorer failed: ``"error": true``) counted as 0. Items where nothing failed are not in it:
    their strict value is their value."""
    chosen = reducer if isinstance(reducer, Reducer) else parse_reducer(reducer)
    return reduce_run(run_columns(lines), names, chosen).as_dicts(names)


def _sorted_ids(ids: Any) -> list[str]:
    return [_text(i) for i in np.sort(ids).tolist()]


def _id_order(ids: Any) -> Any:
    """The positions of ``ids`` (each id once) in sorted order: ``np.sort(ids)`` is ``ids[order]``."""
    return np.argsort(ids).astype(np.int32 if len(ids) < 2**31 else np.intp, copy=False)


def _sub_order(order: Any, mask: Any) -> Any:
    """``_id_order(ids[mask])`` from ``_id_order(ids)``, without sorting again."""
    kept = order[mask[order]]
    return (np.cumsum(mask, dtype=np.int64) - 1)[kept].astype(order.dtype, copy=False)


def _changed(ids: Any, base: Any, candidate: Any, order: Any) -> tuple[Sequence[str], Sequence[str]]:
    """The sorted ids of the pairs whose candidate value is below / above the base's: lists of
    strs, or with ``order`` (``_id_order(ids)``) ``SortedIds`` (positions: 4 bytes an id)."""
    if order is None:
        return _sorted_ids(ids[candidate < base]), _sorted_ids(ids[candidate > base])
    return SortedIds(ids, order[(candidate < base)[order]]), SortedIds(ids, order[(candidate > base)[order]])


def compare_scorer(
    pairs: Sequence[tuple[str, float, float]], *, seed: int = 0, resamples: int | None = None,
    clusters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``scorers`` entry of one scorer from its (id, base, candidate) pairs (both values
    present). With ``clusters`` (id -> cluster), the differences' standard error is the CR1
    clustered one, ``ci95`` a cluster bootstrap and ``p_value`` a sign-flip test of the
    clusters' sums of differences (``_cluster``)."""
    ids = np.array([i for i, _, _ in pairs], dtype=object)
    base = np.array([b for _, b, _ in pairs], dtype=np.float64)
    candidate = np.array([c for _, _, c in pairs], dtype=np.float64)
    return compare_arrays(ids, base, candidate, seed=seed, resamples=resamples, clusters=clusters)


def compare_arrays(
    ids: Any, base: Any, candidate: Any, *, seed: int = 0, resamples: int | None = None,
    clusters: Mapping[str, Any] | None = None, _order: Any = None,
) -> dict[str, Any]:
    """``compare_scorer`` of the pairs given as three numpy arrays of one length (ids, base
    values, candidate values; every value present). (``_order``: ``_id_order(ids)``, for the
    regressions and improvements as ``SortedIds``.)"""
    n = len(ids)
    mean_base = math.fsum(base) / n if n else None  # (fsum over the arrays: no list of a million floats)
    mean_candidate = math.fsum(candidate) / n if n else None
    differences = candidate - base
    extra: dict[str, Any] = {"stderr": array_stderr(differences)}
    if clusters is not None:
        from ._cluster import cluster_bootstrap_ci, cluster_codes, cluster_stderr

        of_pair = [clusters[_text(i)] for i in ids.tolist()]
        differences = differences.tolist()
        interval = cluster_bootstrap_ci(differences, of_pair, seed=seed,
                                        resamples=BOOTSTRAP_RESAMPLES if resamples is None else resamples) if n else None
        codes, g = cluster_codes(of_pair)
        sums = [0.0] * g
        for code, d in zip(codes, differences, strict=True):
            sums[code] += d
        p_value = sign_flip_test(sums, seed=seed) if n else None
        clustered = cluster_stderr(differences, of_pair)
        iid = extra["stderr"]
        extra = {"stderr": clustered, "stderr_iid": iid, "n_clusters": g, "test": "cluster sign-flip",
                 "design_effect": clustered**2 / iid**2 if clustered is not None and iid else None}
    else:
        interval = bootstrap_ci(differences, seed=seed, resamples=resamples) if n else None
        if not n:
            p_value = None
            extra["test"] = None
        elif bool(np.all((base == 0.0) | (base == 1.0)) and np.all((candidate == 0.0) | (candidate == 1.0))):
            went_down = int(np.count_nonzero((base == 1.0) & (candidate == 0.0)))
            went_up = int(np.count_nonzero((base == 0.0) & (candidate == 1.0)))
            p_value = mcnemar_exact(went_down, went_up)
            extra["test"] = "mcnemar"
        else:
            p_value = sign_flip_test(differences, seed=seed)
            extra["test"] = "sign-flip"
    regressions, improvements = _changed(ids, base, candidate, _order)
    return {
        "n": n,
        "mean_base": mean_base,
        "mean_candidate": mean_candidate,
        "diff": mean_candidate - mean_base if mean_base is not None and mean_candidate is not None else None,
        "ci95": list(interval) if interval is not None else None,
        "p_value": p_value,
        "regressions": regressions,
        "improvements": improvements,
        **extra,
    }


def _strict_entry(entry: dict[str, Any], name: str, pairing: tuple[Any, Any, Any], base: ReducedRun,
                  candidate: ReducedRun, seed: int, order: Any = None) -> dict[str, Any]:
    """The strict view of one scorer: the same fields over the pairs where an item that ended
    in error (or whose scorer failed) scores 0; an ok <-> error pair is a regression or an
    improvement there. The entry itself when nothing failed in either run."""
    ids, at_base, at_candidate = pairing
    if not (base.overridden[name][at_base].any() or candidate.overridden[name][at_candidate].any()):
        return {key: value for key, value in entry.items() if key != "strict"}
    b = (base.strict[name] if base.strict[name] is not None else base.values[name])[at_base]
    c = (candidate.strict[name] if candidate.strict[name] is not None else candidate.values[name])[at_candidate]
    both = ~(np.isnan(b) | np.isnan(c))
    return compare_arrays(ids[both], b[both], c[both], seed=seed,
                          _order=None if order is None else _sub_order(order, both))


def _draw_together(names: Sequence[str], pairing: tuple[Any, Any, Any], base: ReducedRun, candidate: ReducedRun,
                   seed: int, with_runs: bool) -> None:
    """Draw at once the bootstrap intervals that ``compare_runs`` asks next (``bootstrap_cis``
    remembers them): per scorer the differences, the strict view's differences, and with
    ``with_runs`` each run's own values (the leaderboard's). Samples of one length share their
    index draws; every interval is the one ``bootstrap_ci`` gives alone, bit for bit."""
    _, at_base, at_candidate = pairing
    samples: list[Any] = []
    same = at_base is at_candidate  # (_pair's every index: the columns themselves, no copies)

    def keep(sample: Any) -> None:
        # Only the samples with many distinct values draw indices; those with few are resampled as
        # counts (cheap, remembered by their counts). A peek at the first 1,024 values tells most
        # apart without sorting every sample: one that looks few but is not is drawn alone later.
        # (Peeked as each is made: a million-pair sample of few values is not kept meanwhile.)
        if len(np.unique(sample[:1024])) > 64:
            samples.append(sample)

    for name in names:
        b, c = _at(base.values[name], at_base, same), _at(candidate.values[name], at_candidate, same)
        both = ~(np.isnan(b) | np.isnan(c))
        keep(c - b if both.all() else c[both] - b[both])
        if base.overridden[name][at_base].any() or candidate.overridden[name][at_candidate].any():
            b = (base.strict[name] if base.strict[name] is not None else base.values[name])[at_base]
            c = (candidate.strict[name] if candidate.strict[name] is not None else candidate.values[name])[at_candidate]
            both = ~(np.isnan(b) | np.isnan(c))
            keep(c[both] - b[both])
        if with_runs:
            for run in (base, candidate):
                column = run.values[name]
                keep(column[~np.isnan(column)])
    bootstrap_cis(samples, seed=seed)


def _pair(base: ReducedRun, candidate: ReducedRun) -> tuple[Any, Any, Any, Any, Any]:
    """(ids of the common items in the base's order, their positions in the base, in the
    candidate, and the ids only in the base, only in the candidate)."""
    b_ids, c_ids = base.ids, candidate.ids
    if (b_ids.dtype == object) != (c_ids.dtype == object):
        b_ids, c_ids = _as_objects(b_ids), _as_objects(c_ids)
    if not len(c_ids) or not len(b_ids):
        none = np.zeros(0, dtype=np.int64)
        return b_ids[:0], none, none, b_ids, c_ids
    if len(b_ids) == len(c_ids) and b_ids.dtype == c_ids.dtype and bool(np.all(b_ids == c_ids)):
        every = np.arange(len(b_ids))  # the same items in the same order (each id once in a ReducedRun)
        return b_ids, every, every, b_ids[:0], c_ids[:0]
    by = np.argsort(c_ids, kind="stable")
    ordered = c_ids[by]
    position = np.minimum(np.searchsorted(ordered, b_ids), len(ordered) - 1)
    found = ordered[position] == b_ids
    at_base = np.flatnonzero(found)
    at_candidate = by[position[found]]
    in_base = np.zeros(len(c_ids), dtype=bool)
    in_base[at_candidate] = True
    return b_ids[at_base], at_base, at_candidate, b_ids[~found], c_ids[~in_base]


class _SharedIds:
    """The regressions and improvements of one comparison's scorers, kept once: a list equal
    to one kept is that list; another list's ids are the strings already kept (the scorers of
    one comparison mostly name the same items)."""

    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.strings: dict[str, str] | None = None
        self.sorted: list[SortedIds] = []

    def share(self, entry: dict[str, Any]) -> None:
        for part in (entry, entry.get("strict")):
            if not isinstance(part, dict):
                continue
            for key in ("regressions", "improvements"):
                found = part.get(key)
                if not found:
                    continue
                if isinstance(found, SortedIds):  # (positions: nothing to intern; an equal list kept once)
                    same = next((kept for kept in self.sorted if kept.same(found)), None)
                    if same is not None:
                        part[key] = same
                    else:
                        self.sorted.append(found)
                    continue
                known = next((kept for kept in self.lists if len(kept) == len(found) and kept == found), None)
                if known is not None:
                    part[key] = known
                    continue
                if self.lists:
                    if self.strings is None:
                        self.strings = {i: i for kept in self.lists for i in kept}
                    strings = self.strings
                    part[key] = found = [strings.setdefault(i, i) for i in found]
                self.lists.append(found)


def _at(column: Any, positions: Any, every: bool) -> Any:
    """``column[positions]``; the column itself when ``positions`` is ``every`` index in order."""
    return column if every and len(positions) == len(column) else column[positions]


def _as_objects(ids: Any) -> Any:
    return ids if ids.dtype == object else np.array([_text(i) for i in ids.tolist()], dtype=object)


# ---- usage and latency --------------------------------------------------------------------

USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


def _count(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _ratio(candidate: Any, base: Any) -> float | None:
    if not isinstance(candidate, (int, float)) or not isinstance(base, (int, float)) or base == 0:
        return None
    return float(candidate) / float(base)


def _ratios(base: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, float | None]:
    return {key: _ratio(candidate.get(key), base.get(key)) for key in base if key != "n"}


def usage_side(lines: Sequence[Mapping[str, Any]] | RunColumns) -> dict[str, Any]:
    """One run's usage: total/median/p95 of each line's ``total_tokens``, the totals of the three
    token counts, and ``cost_usd`` (total/median/p95) when lines carry it."""
    return run_columns(lines).usage_side()


def latency_side(lines: Sequence[Mapping[str, Any]] | RunColumns) -> dict[str, Any]:
    """One run's ``duration_s``: total, median and p95 over its lines (seconds)."""
    return run_columns(lines).latency_side()


def _side_by_side(base: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    return {"base": base, "candidate": candidate, "ratio": _ratios(base, candidate)}


# ---- the document -------------------------------------------------------------------------


def compare_runs(
    base: Sequence[Mapping[str, Any]] | RunColumns,
    candidate: Sequence[Mapping[str, Any]] | RunColumns,
    *,
    scorers: Sequence[str] | None = None,
    reducer: str | Reducer = DEFAULT_REDUCER,
    seed: int = 0,
    cluster_by: str | None = None,
    correction: str = DEFAULT_CORRECTION,
    labels: tuple[str, str] = ("base", "candidate"),
    _of_other_runs: bool = False,  # compare_many: a scorer may be in other runs only
    _reduced: tuple[ReducedRun, ReducedRun] | None = None,  # compare_many: both runs reduced, once per run; no leaderboard
    _id_positions: bool = False,  # the CLI: regressions and improvements as SortedIds (json_chunks writes them)
) -> Comparison:
    """The comparison document of ``dsh-orchestra compare`` for two runs' result lines (a dict;
    a ``Comparison`` displays as a table in a notebook and a terminal).

    ``base`` and ``candidate`` are the lines (decoded JSON objects) or their columns
    (``read_run``; with ``cluster_by``, read with it). ``scorers`` names the scorers to compare
    (default: every scorer either run has). A scorer one run lacks is compared over no pairs
    (``n`` 0, nulls). ``cluster_by``: a metadata key whose values cluster the items (clustered
    differences). ``correction`` (``holm``, ``bh``, ``none``) adjusts the scorers' p-values
    into ``p_adjusted``; ``leaderboard`` ranks the two runs (named by ``labels``) per scorer.

    Raises:
        CompareInputError: no item id in both runs, a named scorer in neither run, or a
            ``pass@k`` with k above a run's epochs.
    """
    base_run, candidate_run = run_columns(base, cluster_by), run_columns(candidate, cluster_by)
    if cluster_by is not None and (base_run.clusters is None or candidate_run.clusters is None):
        raise ValueError("compare_runs: with cluster_by, give the lines, or columns read with that cluster_by")
    base_names, candidate_names = base_run.names, candidate_run.names
    if scorers is None:
        names = list(dict.fromkeys(base_names + candidate_names))
    else:
        names = list(dict.fromkeys(scorers))
        missing = [n for n in names if n not in base_names and n not in candidate_names]
        if missing and not _of_other_runs:
            known = ", ".join(dict.fromkeys(base_names + candidate_names)) or "none"
            raise CompareInputError(Param("scorers", missing[0], spelled="scorers"),
                                    f": scorer {missing[0]!r} is in neither run (their scorers: {known})")
    chosen = reducer if isinstance(reducer, Reducer) else parse_reducer(reducer)
    if chosen.k is not None:
        for what, run in (("base", base_run), ("candidate", candidate_run)):
            epochs = run.max_epoch()
            if chosen.k > epochs:
                raise CompareInputError(Param("reducer", chosen.name, spelled="reducer"),
                                        f": the epoch reducer {chosen.name} needs k <= the epochs of each run, but the "
                                        f"{what} run has {epochs} epoch(s): lower k, or compare runs with more epochs")
    if _reduced is not None:
        base_items, candidate_items = _reduced
    else:
        base_items, candidate_items = reduce_run(base_run, names, chosen), reduce_run(candidate_run, names, chosen)
    common, at_base, at_candidate, only_base, only_candidate = _pair(base_items, candidate_items)
    if not len(common):
        raise CompareInputError(Param("base", spelled="base"), " and ", Param("candidate", spelled="candidate"),
                                ": the two runs have no item id in common: nothing to pair")
    clusters = _run_clusters(base_run, candidate_run) if cluster_by is not None else None
    if clusters is None:
        _draw_together(names, (common, at_base, at_candidate), base_items, candidate_items, seed, _reduced is None)
    out_scorers: dict[str, Any] = {}
    shared = _SharedIds()
    same = at_base is at_candidate  # (_pair's answer for the same items in the same order: every index)
    order = _id_order(common) if _id_positions else None  # (sorted once, for every scorer's lists)
    for name in names:
        b, c = _at(base_items.values[name], at_base, same), _at(candidate_items.values[name], at_candidate, same)
        both = ~(np.isnan(b) | np.isnan(c))
        if both.all():  # (no copies of a million values)
            entry = compare_arrays(common, b, c, seed=seed, clusters=clusters, _order=order)
        else:
            entry = compare_arrays(common[both], b[both], c[both], seed=seed, clusters=clusters,
                                   _order=None if order is None else _sub_order(order, both))
        entry["strict"] = _strict_entry(entry, name, (common, at_base, at_candidate), base_items, candidate_items, seed,
                                        order)
        shared.share(entry)
        out_scorers[name] = entry
    adjusted = adjust_pvalues([s["p_value"] for s in out_scorers.values()], correction)
    for entry, p in zip(out_scorers.values(), adjusted, strict=True):
        entry["p_adjusted"] = p
    board = None if _reduced is not None else leaderboard(
        dict(zip(labels, (base_items, candidate_items), strict=True)), names,
        [{"base": labels[0], "candidate": labels[1], "scorers": out_scorers}],
        clusters=None if clusters is None else dict.fromkeys(labels, clusters), seed=seed,
    )
    return Comparison({
        "pairs": len(common),
        "only_in_base": _sorted_ids(only_base),
        "only_in_candidate": _sorted_ids(only_candidate),
        "status_changes": _status_changes(common, at_base, at_candidate, base_items, candidate_items),
        "scorers": out_scorers,
        "usage": _side_by_side(usage_side(base_run), usage_side(candidate_run)),
        "latency": _side_by_side(latency_side(base_run), latency_side(candidate_run)),
        "correction": correction,
        "cluster_by": cluster_by,
        "leaderboard": board,
    })


def _status_changes(common: Any, at_base: Any, at_candidate: Any, base: ReducedRun, candidate: ReducedRun) -> list[dict[str, Any]]:
    """The common items whose status differs, by id."""
    if all(isinstance(s, AllOk) or all(x == "ok" for x in s) for s in (base.statuses, candidate.statuses)):
        return []
    changed = [k for k, (i, j) in enumerate(zip(at_base.tolist(), at_candidate.tolist(), strict=True))
               if base.statuses[i] != candidate.statuses[j]]
    rows = sorted((_text(common[k]), base.statuses[at_base[k]], candidate.statuses[at_candidate[k]]) for k in changed)
    return [{"id": i, "base": b, "candidate": c} for i, b, c in rows]


def _run_clusters(*runs: RunColumns) -> dict[str, Any]:
    """Each item id's cluster, from the first line that has the id (the runs in order)."""
    out: dict[str, Any] = {}
    for run in runs:
        assert run.clusters is not None
        for index, cluster in enumerate(run.clusters):
            out.setdefault(run.id_text(index), cluster)
    return out


def item_clusters(lines: Iterable[Mapping[str, Any]] | RunColumns, field: str) -> dict[str, Any]:
    """Each item id's cluster (``_cluster.cluster_of``) from the first of its lines."""
    if isinstance(lines, RunColumns):
        return _run_clusters(lines)
    from ._cluster import cluster_of

    out: dict[str, Any] = {}
    for line in lines:
        item_id = str(line.get("id"))
        if item_id not in out:
            out[item_id] = cluster_of(line.get("metadata"), field, item_id)
    return out

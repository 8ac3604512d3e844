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
  assignments or fewer) every assignment is enumerated instead, which gives the exact p.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from .._params import Param, ParamError
from ._frames import Comparison
from ._metrics import BOOTSTRAP_RESAMPLES, DEFAULT_REDUCER, Reducer, bootstrap_ci, parse_reducer, stderr
from ._leaderboard import leaderboard
from ._multiple import DEFAULT_CORRECTION, adjust_pvalues

PERMUTATIONS = 10_000
_EXACT_LIMIT = 13  # 2**13 = 8,192 <= PERMUTATIONS: enumerate every sign assignment
_LOG2 = math.log(2.0)
_EXACT_COMB = 5_000
_TIE = 1e-12  # relative slack when comparing permuted statistics with the observed one


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
    """
    if not differences:
        return None
    import numpy as np

    data = np.asarray(differences, dtype=np.float64)
    n = len(data)
    moving = data[data != 0.0]
    observed = abs(float(data.sum()))
    if observed == 0.0 or len(moving) == 0:
        return 1.0
    threshold = observed * (1 - _TIE)
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
    chunk = max(1, (1 << 21) // max(n, 1))
    # One random bit per difference, eight to a random byte (most significant bit first, as
    # numpy's unpackbits): a set bit keeps its sign, a clear one flips it, so the permuted sum is
    # 2 * (the kept differences) - (all of them). The kept sum of each group of eight is looked up
    # in a table of its 256 subsets' sums: one lookup per byte instead of eight products.
    groups = (m + 7) // 8
    padded = np.zeros(groups * 8, dtype=np.float64)
    padded[:m] = moving
    subsets = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64)  # (256, 8)
    table = (padded.reshape(groups, 8) @ subsets.T).ravel()  # table[g * 256 + byte]
    offsets = np.arange(groups, dtype=np.intp) * 256
    for start in range(0, permutations, chunk):
        size = min(permutations, start + chunk) - start
        drawn = rng.integers(0, 256, size=(size, groups), dtype=np.uint8)
        kept = np.take(table, drawn + offsets).sum(axis=1)
        count += int(np.count_nonzero(np.abs(2.0 * kept - total) >= threshold))
    return (count + 1) / (permutations + 1)


# ---- pairing ------------------------------------------------------------------------------


def _value(record: Any) -> float | None:
    value = record.get("value") if isinstance(record, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def scorer_names(lines: Iterable[Mapping[str, Any]]) -> list[str]:
    """The scorer names of ``lines``' ``scores``, in first-seen order."""
    names: dict[str, None] = {}
    for line in lines:
        scores = line.get("scores")
        if isinstance(scores, dict):
            names.update((str(name), None) for name in scores)
    return list(names)


def reduce_items(
    lines: Iterable[Mapping[str, Any]], names: Sequence[str], reducer: str | Reducer = DEFAULT_REDUCER
) -> tuple[dict[str, dict[str, float | None]], dict[str, str]]:
    """Per item id: each scorer's value with the epochs reduced, and the item's status.

    The first line of an (id, epoch) counts. An item's status is ``ok`` when every epoch is
    ``ok``, else the first other status of its epochs.
    """
    values, status, _ = reduce_items_strict(lines, names, reducer)
    return values, status


def _failed(line: Mapping[str, Any], record: Any) -> bool:
    return line.get("status") == "error" or (isinstance(record, dict) and record.get("error") is True)


def reduce_items_strict(
    lines: Iterable[Mapping[str, Any]], names: Sequence[str], reducer: str | Reducer = DEFAULT_REDUCER
) -> tuple[dict[str, dict[str, float | None]], dict[str, str], dict[str, dict[str, float | None]]]:
    """``reduce_items``, and the strict values of the items where something failed: per item
    id and scorer, the epochs reduced with every failed epoch (the line ended in error, or the
    scorer failed: ``"error": true``) counted as 0. Items where nothing failed are not in it:
    their strict value is their value."""
    chosen = reducer if isinstance(reducer, Reducer) else parse_reducer(reducer)
    epochs: dict[str, dict[int, Mapping[str, Any]]] = {}
    for line in lines:
        epoch = line.get("epoch", 1)
        key = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 1
        epochs.setdefault(str(line.get("id")), {}).setdefault(key, line)
    values: dict[str, dict[str, float | None]] = {}
    status: dict[str, str] = {}
    strict: dict[str, dict[str, float | None]] = {}
    if chosen.k is None and all(len(by_epoch) == 1 for by_epoch in epochs.values()):
        # One epoch per item: each value is its own reduction (see ``Reducer.__call__``).
        for item_id, by_epoch in epochs.items():
            (line,) = by_epoch.values()
            scores = line.get("scores")
            if not isinstance(scores, dict):
                scores = {}
            line_status = line.get("status")
            row: dict[str, float | None] = {}
            for name in names:
                record = scores.get(name)
                value = record.get("value") if type(record) is dict else None
                if type(value) is not float:
                    value = _value(record)
                row[name] = value
                if value is None and (line_status == "error" or (type(record) is dict and record.get("error") is True)):
                    strict.setdefault(item_id, {})[name] = 0.0
            values[item_id] = row
            status[item_id] = "ok" if line_status == "ok" else str(line_status)
        return values, status, strict
    for item_id, by_epoch in epochs.items():
        ordered = [by_epoch[e] for e in sorted(by_epoch)]
        values[item_id] = {}
        for name in names:
            per_epoch = []
            failed = []
            for line in ordered:
                scores = line.get("scores")
                record = scores.get(name) if isinstance(scores, dict) else None
                value = _value(record)
                per_epoch.append(value)
                failed.append(value is None and _failed(line, record))
            values[item_id][name] = chosen(per_epoch)
            if any(failed):
                strict.setdefault(item_id, {})[name] = chosen([0.0 if f else v for v, f in zip(per_epoch, failed, strict=True)])
        statuses = [str(line.get("status")) for line in ordered]
        status[item_id] = next((s for s in statuses if s != "ok"), "ok")
    return values, status, strict


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def compare_scorer(
    pairs: Sequence[tuple[str, float, float]], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
    clusters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``scorers`` entry of one scorer from its (id, base, candidate) pairs (both values
    present). With ``clusters`` (id -> cluster), the differences' standard error is the CR1
    clustered one, ``ci95`` a cluster bootstrap and ``p_value`` a sign-flip test of the
    clusters' sums of differences (``_cluster``)."""
    n = len(pairs)
    base = [b for _, b, _ in pairs]
    candidate = [c for _, _, c in pairs]
    mean_base, mean_candidate = _mean(base), _mean(candidate)
    differences = [c - b for _, b, c in pairs]
    extra: dict[str, Any] = {"stderr": stderr(differences)}
    if clusters is not None:
        from ._cluster import cluster_bootstrap_ci, cluster_codes, cluster_stderr

        of_pair = [clusters[i] for i, _, _ in pairs]
        interval = cluster_bootstrap_ci(differences, of_pair, seed=seed, resamples=resamples) if n else None
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
        elif all(v in (0.0, 1.0) for v in base + candidate):
            went_down = sum(1 for _, b, c in pairs if b == 1.0 and c == 0.0)
            went_up = sum(1 for _, b, c in pairs if b == 0.0 and c == 1.0)
            p_value = mcnemar_exact(went_down, went_up)
            extra["test"] = "mcnemar"
        else:
            p_value = sign_flip_test(differences, seed=seed)
            extra["test"] = "sign-flip"
    return {
        "n": n,
        "mean_base": mean_base,
        "mean_candidate": mean_candidate,
        "diff": mean_candidate - mean_base if mean_base is not None and mean_candidate is not None else None,
        "ci95": list(interval) if interval is not None else None,
        "p_value": p_value,
        "regressions": sorted(i for i, b, c in pairs if c < b),
        "improvements": sorted(i for i, b, c in pairs if c > b),
        **extra,
    }


_Side = tuple[dict[str, dict[str, float | None]], dict[str, dict[str, float | None]]]


def _strict_entry(entry: dict[str, Any], name: str, common: Sequence[str], base: _Side, candidate: _Side,
                  seed: int) -> dict[str, Any]:
    """The strict view of one scorer: the same fields over the pairs where an item that ended
    in error (or whose scorer failed) scores 0; an ok <-> error pair is a regression or an
    improvement there. The entry itself when nothing failed in either run."""
    if not any(name in base[1].get(i, ()) or name in candidate[1].get(i, ()) for i in common):
        return {key: value for key, value in entry.items() if key != "strict"}
    pairs = []
    for item_id in common:
        b_over, c_over = base[1].get(item_id, {}), candidate[1].get(item_id, {})
        b = b_over[name] if name in b_over else base[0][item_id][name]
        c = c_over[name] if name in c_over else candidate[0][item_id][name]
        if b is not None and c is not None:
            pairs.append((item_id, b, c))
    return compare_scorer(pairs, seed=seed)


# ---- usage and latency --------------------------------------------------------------------

USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


def _count(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _spread(values: list[float]) -> dict[str, Any]:
    """``total``, ``median`` and ``p95`` (linear interpolation) of ``values``, and ``n``."""
    if not values:
        return {"n": 0, "total": 0, "median": None, "p95": None}
    import numpy as np

    median, p95 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95])
    total = math.fsum(values)
    return {"n": len(values), "total": int(total) if total.is_integer() else total, "median": float(median), "p95": float(p95)}


def _ratio(candidate: Any, base: Any) -> float | None:
    if not isinstance(candidate, (int, float)) or not isinstance(base, (int, float)) or base == 0:
        return None
    return float(candidate) / float(base)


def _ratios(base: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, float | None]:
    return {key: _ratio(candidate.get(key), base.get(key)) for key in base if key != "n"}


def usage_side(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One run's usage: total/median/p95 of each line's ``total_tokens``, the totals of the three
    token counts, and ``cost_usd`` (total/median/p95) when lines carry it."""
    per_line = [u for u in (line.get("usage") for line in lines) if isinstance(u, dict)]
    totals = [v for v in (_count(u.get("total_tokens")) for u in per_line) if v is not None]
    out = _spread(totals)
    for key in USAGE_KEYS:
        out[key] = int(math.fsum(v for v in (_count(u.get(key)) for u in per_line) if v is not None))
    costs = [v for v in (_count(line.get("cost_usd")) for line in lines) if v is not None]
    if costs:
        spread = _spread(costs)
        out["cost_usd"] = float(spread["total"])
        out["median_cost_usd"] = spread["median"]
        out["p95_cost_usd"] = spread["p95"]
    return out


def latency_side(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One run's ``duration_s``: total, median and p95 over its lines (seconds)."""
    return _spread([v for v in (_count(line.get("duration_s")) for line in lines) if v is not None])


def _side_by_side(base: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    return {"base": base, "candidate": candidate, "ratio": _ratios(base, candidate)}


# ---- the document -------------------------------------------------------------------------


def compare_runs(
    base: Sequence[Mapping[str, Any]],
    candidate: Sequence[Mapping[str, Any]],
    *,
    scorers: Sequence[str] | None = None,
    reducer: str | Reducer = DEFAULT_REDUCER,
    seed: int = 0,
    cluster_by: str | None = None,
    correction: str = DEFAULT_CORRECTION,
    labels: tuple[str, str] = ("base", "candidate"),
    _of_other_runs: bool = False,  # compare_many: a scorer may be in other runs only
    _reduced: tuple[Any, Any] | None = None,  # compare_many: both runs' reduce_items, once per run; no leaderboard
) -> Comparison:
    """The comparison document of ``dsh-orchestra compare`` for two runs' result lines (a dict;
    a ``Comparison`` displays as a table in a notebook and a terminal).

    ``scorers`` names the scorers to compare (default: every scorer either run has). A scorer
    one run lacks is compared over no pairs (``n`` 0, nulls). ``cluster_by``: a metadata key
    whose values cluster the items (clustered differences). ``correction`` (``holm``, ``bh``,
    ``none``) adjusts the scorers' p-values into ``p_adjusted``; ``leaderboard`` ranks the two
    runs (named by ``labels``) per scorer.

    Raises:
        CompareInputError: no item id in both runs, a named scorer in neither run, or a
            ``pass@k`` with k above a run's epochs.
    """
    base_names, candidate_names = scorer_names(base), scorer_names(candidate)
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
        for what, lines in (("base", base), ("candidate", candidate)):
            epochs = max((e for e in (line.get("epoch", 1) for line in lines) if isinstance(e, int) and not isinstance(e, bool)), default=1)
            if chosen.k > epochs:
                raise CompareInputError(Param("reducer", chosen.name, spelled="reducer"),
                                        f": the epoch reducer {chosen.name} needs k <= the epochs of each run, but the "
                                        f"{what} run has {epochs} epoch(s): lower k, or compare runs with more epochs")
    reducer = chosen  # both runs' strict values too (``_reduced`` holds the plain ones only)
    base_values, base_status, base_strict = reduce_items_strict(base, names, reducer)
    candidate_values, candidate_status, candidate_strict = reduce_items_strict(candidate, names, reducer)
    common = [i for i in base_values if i in candidate_values]
    if not common:
        raise CompareInputError(Param("base", spelled="base"), " and ", Param("candidate", spelled="candidate"),
                                ": the two runs have no item id in common: nothing to pair")
    clusters = item_clusters([*base, *candidate], cluster_by) if cluster_by is not None else None
    out_scorers: dict[str, Any] = {}
    for name in names:
        pairs = []
        for item_id in common:
            b, c = base_values[item_id][name], candidate_values[item_id][name]
            if b is not None and c is not None:
                pairs.append((item_id, b, c))
        entry = compare_scorer(pairs, seed=seed, clusters=clusters)
        entry["strict"] = _strict_entry(entry, name, common, (base_values, base_strict),
                                        (candidate_values, candidate_strict), seed)
        out_scorers[name] = entry
    adjusted = adjust_pvalues([s["p_value"] for s in out_scorers.values()], correction)
    for entry, p in zip(out_scorers.values(), adjusted, strict=True):
        entry["p_adjusted"] = p
    board = None if _reduced is not None else leaderboard(
        dict(zip(labels, (base_values, candidate_values), strict=True)), names,
        [{"base": labels[0], "candidate": labels[1], "scorers": out_scorers}],
        clusters=None if clusters is None else dict.fromkeys(labels, clusters), seed=seed,
    )
    return Comparison({
        "pairs": len(common),
        "only_in_base": sorted(i for i in base_values if i not in candidate_values),
        "only_in_candidate": sorted(i for i in candidate_values if i not in base_values),
        "status_changes": [
            {"id": i, "base": base_status[i], "candidate": candidate_status[i]}
            for i in sorted(common) if base_status[i] != candidate_status[i]
        ],
        "scorers": out_scorers,
        "usage": _side_by_side(usage_side(base), usage_side(candidate)),
        "latency": _side_by_side(latency_side(base), latency_side(candidate)),
        "correction": correction,
        "cluster_by": cluster_by,
        "leaderboard": board,
    })


def item_clusters(lines: Iterable[Mapping[str, Any]], field: str) -> dict[str, Any]:
    """Each item id's cluster (``_cluster.cluster_of``) from the first of its lines."""
    from ._cluster import cluster_of

    out: dict[str, Any] = {}
    for line in lines:
        item_id = str(line.get("id"))
        if item_id not in out:
            out[item_id] = cluster_of(line.get("metadata"), field, item_id)
    return out

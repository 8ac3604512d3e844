"""Power and planning from a pilot: the items needed to detect a difference D, or the minimum
detectable difference with the items at hand. Pure (normal approximation; Miller 2024, sec. 5).

With z = z_{1-α/2} + z_{power} (standard normal quantiles) and σ² the variance of one item's
contribution to the difference of two means:

* two-sample (the candidate is another run on other items of the same kind): σ² = 2 s²,
  s² the pilot's per-item variance (n - 1);
* paired (two runs on the same items): σ² = s_d², the variance of the per-item differences
  (= s_1² + s_2² - 2 ρ s_1 s_2, ρ their correlation);
* clustering multiplies σ² by the design effect (clustered over iid variance of the mean, of
  the pilot's values or differences); epochs replace s² by σ_b² + σ_w² / K (see ``_epochs``);

``n = ceil(z² σ² deff / D²)`` items (per run), ``MDE = z sqrt(σ² deff / n)``.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Mapping, Sequence

from ._metrics import DEFAULT_REDUCER, Reducer


def z_total(alpha: float, power: float) -> float:
    """``z_{1-α/2} + z_{power}``.

    Raises:
        ValueError: alpha or power not strictly between 0 and 1.
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must be strictly between 0 and 1, not alpha={alpha}, power={power}")
    normal = NormalDist()
    return normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)


def items_needed(variance: float, mde: float, *, alpha: float = 0.05, power: float = 0.8, deff: float = 1.0) -> int:
    """Items (per run) to detect a difference ``mde`` (see the module); ``variance`` is σ²."""
    if mde <= 0:
        raise ValueError(f"the difference to detect must be > 0, not {mde}")
    z = z_total(alpha, power)
    return max(2, math.ceil(z * z * variance * deff / (mde * mde)))


def min_detectable(variance: float, n: int, *, alpha: float = 0.05, power: float = 0.8, deff: float = 1.0) -> float | None:
    """The smallest difference detected at ``power`` with n items (per run); None for n < 2."""
    if n < 2:
        return None
    return z_total(alpha, power) * math.sqrt(variance * deff / n)


def plan_entry(variance: float, n_at_hand: int, *, mde: float | None, alpha: float, power: float,
               deff: float = 1.0) -> dict[str, Any]:
    """``{"variance", "design_effect", "n_at_hand", "mde_at_hand", "mde", "n_needed"}`` of one scorer."""
    return {
        "variance": variance,
        "design_effect": deff,
        "n_at_hand": n_at_hand,
        "mde_at_hand": min_detectable(variance, n_at_hand, alpha=alpha, power=power, deff=deff),
        "mde": mde,
        "n_needed": items_needed(variance, mde, alpha=alpha, power=power, deff=deff) if mde is not None else None,
    }


class PlanInputError(ValueError):
    """A pilot that cannot be planned from (no scores, too few items); the message says what to fix."""


def _variance(values: Sequence[float]) -> float:
    centre = math.fsum(values) / len(values)
    return math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1)


def _epoch_rows(lines: Sequence[Mapping[str, Any]], name: str) -> dict[str, list[float]]:
    """Per item id, the valid epoch values of scorer ``name`` (the first line of an (id, epoch))."""
    from ._compare import _value

    seen: set[tuple[str, Any]] = set()
    out: dict[str, list[float]] = {}
    for line in lines:
        key = (str(line.get("id")), line.get("epoch", 1))
        if key in seen:
            continue
        seen.add(key)
        scores = line.get("scores")
        value = _value(scores.get(name)) if isinstance(scores, dict) else None
        row = out.setdefault(key[0], [])
        if value is not None:
            row.append(value)
    return out


def plan_runs(
    pilot: Sequence[Mapping[str, Any]],
    second: Sequence[Mapping[str, Any]] | None = None,
    *,
    mde: float | None = None,
    power: float = 0.8,
    alpha: float = 0.05,
    epochs: int | None = None,
    cluster_by: str | None = None,
    reducer: str | Reducer = DEFAULT_REDUCER,
    scorers: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The plan of ``dsh-orchestra plan`` (see the module): from one pilot run (two-sample design)
    or two runs on the same items (paired design), per scorer the items needed to detect
    ``mde`` and the minimum detectable difference with the items at hand; with ``epochs`` K the
    per-item variance at K epochs (the pilot's within/between-item variance); with
    ``cluster_by`` the design effect.

    Raises:
        PlanInputError: no scores, fewer than 2 items (pairs) with a value, ``epochs`` without a
            pilot of several epochs per item; ValueError: bad mde, power, alpha or epochs.
    """
    from ._cluster import cluster_stderr
    from ._compare import item_clusters, reduce_items, scorer_names
    from ._epochs import epoch_variance

    z_total(alpha, power)
    if mde is not None and not (math.isfinite(mde) and mde > 0):
        raise ValueError(f"the difference to detect (mde) must be a number > 0, not {mde!r}")
    if epochs is not None and epochs < 1:
        raise ValueError(f"epochs must be >= 1, not {epochs!r}")
    names = list(scorers) if scorers else list(dict.fromkeys(scorer_names(pilot) + scorer_names(second or [])))
    if not names:
        raise PlanInputError("the run has no scores: score it first")
    runs = [pilot] if second is None else [pilot, second]
    reduced = [reduce_items(run, names, reducer)[0] for run in runs]
    clusters = item_clusters([line for run in runs for line in run], cluster_by) if cluster_by is not None else None
    out_scorers: dict[str, Any] = {}
    for name in names:
        if second is None:
            ids = [i for i, v in reduced[0].items() if v[name] is not None]
            values = [reduced[0][i][name] for i in ids]
            entry_values: list[float] = [v for v in values if v is not None]
        else:
            ids = [i for i, v in reduced[0].items() if v[name] is not None and i in reduced[1] and reduced[1][i][name] is not None]
            pairs = [(reduced[0][i][name], reduced[1][i][name]) for i in ids]
            entry_values = [c - b for b, c in pairs if b is not None and c is not None]
        if len(entry_values) < 2:
            out_scorers[name] = None
            continue
        variance = _variance(entry_values)
        deff = 1.0
        if clusters is not None:
            clustered = cluster_stderr(entry_values, [clusters[i] for i in ids])
            deff = (clustered**2 * len(entry_values) / variance) if clustered is not None and variance > 0 else 1.0
        extra: dict[str, Any] = {"sd": math.sqrt(variance)}
        if second is not None:
            firsts = [reduced[0][i][name] for i in ids]
            seconds = [reduced[1][i][name] for i in ids]
            v1 = _variance([x for x in firsts if x is not None])
            v2 = _variance([x for x in seconds if x is not None])
            extra["correlation"] = (v1 + v2 - variance) / (2 * math.sqrt(v1 * v2)) if v1 > 0 and v2 > 0 else None
        planned = variance
        if epochs is not None:
            parts = []
            for run in runs:
                rows = _epoch_rows(run, name)  # once per run (not per item)
                parts.append(epoch_variance(rows.get(i, []) for i in ids))
            if any(p is None for p in parts):
                raise PlanInputError(f"planning for epochs needs a run with 2 or more epochs per item (scorer {name!r} "
                                     "has none): the within-item variance comes from the epochs; run the pilot with 2 or more")
            within = [p["within_var"] for p in parts if p is not None]
            harmonic = [1.0 / p["mean_epochs"] for p in parts if p is not None]  # the pilot's epochs per item
            between = max(0.0, variance - math.fsum(w * h for w, h in zip(within, harmonic, strict=True)))
            one = between + math.fsum(within)
            planned = between + math.fsum(within) / epochs
            extra["epochs"] = {"k": epochs, "within_var": math.fsum(within), "between_var": between,
                               "variance_one_epoch": one, "variance_at_k": planned,
                               "gain": 1.0 - planned / one if one > 0 else 0.0}
        factor = 2.0 if second is None else 1.0
        entry = plan_entry(factor * planned, len(entry_values), mde=mde, alpha=alpha, power=power, deff=deff)
        out_scorers[name] = {**entry, **extra}
    if all(v is None for v in out_scorers.values()):
        raise PlanInputError("no scorer has a value on 2 or more items" + (" of both runs" if second is not None else "")
                             + ": nothing to estimate a variance from")
    return {
        "design": "two-sample" if second is None else "paired",
        "alpha": alpha,
        "power": power,
        "mde": mde,
        "epochs": epochs,
        "cluster_by": cluster_by,
        "scorers": out_scorers,
    }

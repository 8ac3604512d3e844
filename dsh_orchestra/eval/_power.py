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
from typing import Any


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

"""Checks of a scoring plan against its dataset, before anything runs: target-based scorers
need targets, ``group_by`` needs items that have the key. Pure."""

from __future__ import annotations

from typing import Mapping

from .._params import Param
from ._config import ScoringError
from ._tally import EvalPlan

TARGET_KINDS = frozenset({"exact", "includes", "choice", "numeric", "f1"})
"""The scorers that compare the response with the item's ``target``."""


def check_plan_inputs(plan: EvalPlan, *, where: str, items: int, targets: int, metadata_keys: Mapping[str, int]) -> list[str]:
    """Refuse a plan the dataset cannot feed; return the warnings of one it feeds in part.

    ``items`` of the dataset ``where``, ``targets`` of them with a target, ``metadata_keys``
    the items per metadata key.

    Raises:
        ScoringError: target-based scorers and no item with a target; ``group_by`` a
            metadata key no item has.
    """
    needing = [s.name for s in plan.scorers if s.kind in TARGET_KINDS]
    if needing and not targets:
        raise ScoringError(
            f"{where}: no item has a \"target\", but scorer(s) {', '.join(needing)} compare the response with it: "
            "add \"target\" to the items (check its spelling), or score with a scorer that needs none"
        )
    warnings = []
    if plan.group_by is not None:
        having = metadata_keys.get(plan.group_by, 0)
        if not having:
            known = ", ".join(sorted(metadata_keys)) or "none"
            raise ScoringError(Param("group_by", plan.group_by), f": no item of {where} has the metadata key "
                                  f"{plan.group_by!r} (the items' metadata keys: {known})")
        if having < items:
            warnings.append(f"group_by {plan.group_by!r}: {items - having} of {items} items have no such metadata key; "
                            "they form the group \"(missing)\"")
    return warnings

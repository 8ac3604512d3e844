"""``score_results``: re-score a finished results file against its dataset, from Python.

What ``dsh-orchestra score`` does, as one call: load the dataset, make the plan from scorer
SPECs, and ``eval.rescore`` RESULTS into OUT (RESULTS is never modified).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ..eval import ScorerSpec, load_prices, load_scoring, make_plan, rescore, sha256_file
from ..gateway import DEFAULT_GATEWAY, GatewayOptions
from ..runtime import DEFAULT_MODEL, DEFAULT_PROVIDER, RuntimeSpec
from ._dataset import load_dataset


async def score_results(
    results: str | os.PathLike[str],
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    score: Sequence[str | ScorerSpec | Callable[..., Any]] = (),
    *,
    scoring: str | os.PathLike[str] | None = None,
    summary: str | os.PathLike[str] | None = None,
    epoch_reducer: str = "mean",
    group_by: str | None = None,
    seed: int = 0,
    prices: str | os.PathLike[str] | None = None,
    judge_runtime: RuntimeSpec | None = None,
    gateway: GatewayOptions | None = DEFAULT_GATEWAY,
) -> dict[str, Any]:
    """Score every line of ``results`` (a batch's results file) against ``dataset`` with the
    scorers ``score`` names (SPECs of ``dsh-orchestra score``: ``"exact"``, ``"includes"``,
    ``"module:attr"``, ...) and write the re-scored lines to ``out``; return the summary (also
    written to ``summary`` when given). ``scoring`` and ``prices`` are TOML files as for the CLI;
    judges run on ``judge_runtime`` (default: the simulator); a judge's real ``dsh`` calls the
    model through a gateway of its own (``gateway``; None: directly, with the real key).

    Raises:
        RescoreError: unreadable results, an id not in the dataset, an unusable ``out``.
        DatasetError: the dataset is malformed.
        ScoringError: an unknown scorer or a bad scoring file; ValueError: a bad reducer or seed.
        PricesError: a bad prices file or a route without a price.
    """
    if not score and scoring is None:
        raise ValueError("score_results needs at least one scorer: score=['exact'] (or a scoring file)")
    route = (judge_runtime.provider, judge_runtime.model) if judge_runtime is not None else (DEFAULT_PROVIDER, DEFAULT_MODEL)
    reducer_k = epoch_reducer.removeprefix("pass@")
    epochs = int(reducer_k) if epoch_reducer.startswith("pass@") and reducer_k.isdigit() else 1
    plan = make_plan(
        list(score), scoring=load_scoring(scoring) if scoring is not None else None, epochs=epochs,
        reducer=epoch_reducer, group_by=group_by, seed=seed,
        prices=load_prices(prices) if prices is not None else None, route=route,
    )
    items, _ = load_dataset(dataset)
    described = {"path": str(dataset), "sha256": sha256_file(dataset), "items": len(items)}
    return await rescore(
        results, {item.id: item for item in items}, out, plan, summary=summary, judge_runtime=judge_runtime,
        dataset=described, scoring_sha256=sha256_file(scoring), argv=[], gateway=gateway,
    )

"""The statistics options' checks shared by ``batch``, ``score`` and ``compare``: ``--cluster-by``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..eval import ClusterError, check_cluster_field
from ._common import UsageError


def check_cluster_by(field: str | None, items: Iterable[tuple[str, Any]], where: str) -> None:
    """``--cluster-by FIELD`` must be a metadata key some item of ``where`` has, making two or
    more clusters.

    Raises:
        UsageError: it is not (the message names the flag and what to change).
    """
    if field is None:
        return
    if not field:
        raise UsageError("--cluster-by needs a metadata key, not ''")
    try:
        check_cluster_field(items, field, where=where)
    except ClusterError as exc:
        raise UsageError(f"--cluster-by {field!r}: {exc}") from exc


def dataset_clusters(field: str | None, dataset: str) -> None:
    """``check_cluster_by`` over a dataset file's items (a pipe is left unchecked: it can be read once)."""
    if field is None or not os.path.isfile(dataset):
        return
    from ..batch import load_dataset

    items, _ = load_dataset(dataset)
    check_cluster_by(field, ((i.id, i.metadata) for i in items), dataset)


def results_clusters(field: str | None, path: str) -> None:
    """``check_cluster_by`` over a results file's lines."""
    if field is None:
        return
    from ..eval import read_result_lines

    check_cluster_by(field, ((line["id"], line.get("metadata")) for _, line in read_result_lines(Path(path))), path)


def lines_clusters(field: str | None, lines: Iterable[Mapping[str, Any]], where: str) -> None:
    """``check_cluster_by`` over result lines already read."""
    check_cluster_by(field, ((str(line.get("id")), line.get("metadata")) for line in lines), where)


def read_labels(labels: str, results: str) -> dict[str, float]:
    """The ``--labels`` file's ``{id: label}``, every id an item of RESULTS.

    Raises:
        UsageError: unreadable, not JSON Lines, a label of the wrong type, an unknown id.
    """
    import orjson

    from ..eval import LabelsError, parse_labels, read_result_lines

    try:
        with open(labels, "rb") as handle:
            rows = [orjson.loads(raw) for raw in handle if raw.strip()]
    except OSError as exc:
        raise UsageError(f"--labels {labels!r}: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--labels {labels!r}: not JSON Lines ({exc})") from exc
    known = [line["id"] for _, line in read_result_lines(Path(results))]
    try:
        return parse_labels(rows, known, where=f"--labels {labels!r}")
    except LabelsError as exc:
        raise UsageError(str(exc)) from exc


def labels_agreement(rescored: str, plan: Any, labels: Mapping[str, float]) -> dict[str, Any]:
    """Each scorer's ``eval._agreement.agreement`` with ``labels`` over the rescored lines (epochs reduced)."""
    from ..eval import agreement, read_result_lines, reduce_items

    lines = [line for _, line in read_result_lines(Path(rescored))]
    values, _ = reduce_items(lines, plan.names, plan.reducer)
    return {name: agreement({i: v[name] for i, v in values.items()}, labels) for name in plan.names}

"""Clustered standard errors and intervals of a mean: items that share a cluster (a passage, a
template) are not independent draws, so the cluster, not the item, is the unit of sampling.

* ``cluster_stderr``: the cluster-robust (CR1) standard error of the mean, as statsmodels
  computes it for an intercept-only OLS with ``cov_type="cluster"`` (its defaults:
  ``use_correction=True``): ``sqrt(G / (G - 1) * (N - 1) / (N - K) * sum_g S_g**2) / N`` (K = 1 regressor)
  with ``S_g`` the sum of the residuals ``x_i - mean`` of cluster g (Miller 2024, eq. 4,
  with the CR1 small-sample factor; (N - 1) / (N - K) is 1 here);
* ``cluster_bootstrap_ci``: a percentile bootstrap over clusters: each resample draws G
  clusters with replacement (as multinomial counts per cluster) and takes the mean of every
  item of the drawn clusters;
* ``design_effect``: the clustered variance of the mean over the iid one (``stderr**2``).

``_metrics.cluster_metrics`` puts them into a summary's metrics.

Pure: numpy, no I/O.
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Iterable, Sequence

BOOTSTRAP_RESAMPLES = 10_000  # as _metrics.BOOTSTRAP_RESAMPLES (the summary's)

_CHUNK_CELLS = 1 << 21  # resample x cluster counts held at once


class ClusterError(ValueError):
    """The clusters cannot give a clustered statistic (fewer than two); the message says why."""


def cluster_codes(clusters: Sequence[Hashable]) -> tuple[list[int], int]:
    """Each value's cluster as an integer 0..G-1 (in first-seen order) and G."""
    codes: dict[Hashable, int] = {}
    out = [codes.setdefault(c, len(codes)) for c in clusters]
    return out, len(codes)


def _sums(values: Sequence[float], clusters: Sequence[Hashable]) -> tuple[Any, Any, int]:
    """Per cluster: the sum of the values and the number of them (numpy arrays), and G."""
    import numpy as np

    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} clusters: one cluster per value")
    codes, g = cluster_codes(clusters)
    index = np.asarray(codes, dtype=np.int64)
    data = np.asarray(values, dtype=np.float64)
    return np.bincount(index, weights=data, minlength=g), np.bincount(index, minlength=g).astype(np.float64), g


def cluster_stderr(values: Sequence[float], clusters: Sequence[Hashable]) -> float | None:
    """The CR1 cluster-robust standard error of the mean of ``values`` (see the module);
    ``clusters[i]`` is value i's cluster. None with fewer than two clusters."""
    import numpy as np

    n = len(values)
    if n == 0:
        return None
    sums, sizes, g = _sums(values, clusters)
    if g < 2:
        return None
    centre = math.fsum(values) / n
    residual_sums = sums - sizes * centre
    meat = float(np.dot(residual_sums, residual_sums))
    return math.sqrt(g / (g - 1) * meat) / n


def cluster_bootstrap_ci(
    values: Sequence[float], clusters: Sequence[Hashable], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
) -> tuple[float, float] | None:
    """The percentile cluster bootstrap interval of the mean: ``resamples`` resamples of G
    clusters drawn with replacement (numpy's ``default_rng(seed).integers(0, G, (resamples, G))``,
    drawn in chunks of rows), the mean over every item of the drawn clusters (the sum of the
    drawn clusters' sums over the sum of their sizes), and the (1 - confidence) / 2 and
    (1 + confidence) / 2 percentiles of those means (linear interpolation). None for no values.
    """
    import numpy as np

    if not values:
        return None
    sums, sizes, g = _sums(values, clusters)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, _CHUNK_CELLS // g)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        drawn = rng.integers(0, g, size=(stop - start, g))
        means[start:stop] = sums[drawn].sum(axis=1) / sizes[drawn].sum(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def design_effect(values: Sequence[float], clusters: Sequence[Hashable]) -> float | None:
    """The clustered variance of the mean over the iid one: ``cluster_stderr**2 / stderr**2``
    (None when either is undefined or the iid one is 0)."""
    clustered, n = cluster_stderr(values, clusters), len(values)
    if clustered is None or n < 2:
        return None
    centre = math.fsum(values) / n
    iid_variance = math.fsum((v - centre) ** 2 for v in values) / (n - 1) / n
    return clustered**2 / iid_variance if iid_variance > 0 else None


def cluster_of(metadata: Any, field: str, item_id: str) -> str | tuple[str, str]:
    """An item's cluster: its metadata ``field`` (see ``group_key``); an item without the field
    is a cluster of its own (a tuple, never equal to a field's value)."""
    if isinstance(metadata, dict) and field in metadata and metadata[field] is not None:
        value = metadata[field]
        if isinstance(value, str):
            return value
        import orjson

        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()  # as _metrics.group_key
    return ("item", item_id)


def check_cluster_field(items: Iterable[tuple[str, Any]], field: str, *, where: str = "the items") -> int:
    """The number of clusters ``field`` makes of ``items`` (``(id, metadata)`` pairs; see
    ``cluster_of``).

    Raises:
        ClusterError: no item has ``field`` in its metadata, or the items make fewer than two
            clusters; the message names the field and what to do.
    """
    clusters: set[Any] = set()
    keys: dict[str, None] = {}
    having = 0
    for item_id, metadata in items:
        if isinstance(metadata, dict):
            keys.update(dict.fromkeys(map(str, metadata)))
            having += field in metadata and metadata[field] is not None
        clusters.add(cluster_of(metadata, field, item_id))
    if not having:
        seen = ", ".join(list(keys)[:20]) or "none"
        raise ClusterError(f"no item of {where} has the metadata key {field!r} (their metadata keys: {seen}); "
                           "name a key the items have")
    if len(clusters) < 2:
        raise ClusterError(f"every item of {where} is in one cluster of {field!r}: clustered standard errors need at "
                           "least 2 clusters; name a key whose values differ between items")
    return len(clusters)

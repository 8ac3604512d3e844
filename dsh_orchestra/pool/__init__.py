"""Runtime pool: many runtime actors under one nursery, placement, supervision, recycling.

Knows nothing about workflow graphs or datasets.
"""

from ._pool import (
    PoolClosedError as PoolClosedError,
    PoolStatistics as PoolStatistics,
    RuntimePool as RuntimePool,
    SpecFactory as SpecFactory,
    open_pool as open_pool,
)

__all__ = ["PoolClosedError", "PoolStatistics", "RuntimePool", "SpecFactory", "open_pool"]

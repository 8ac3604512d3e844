"""Runtime pool: many runtime actors under one nursery, placement, supervision, recycling.

Knows nothing about workflow graphs or datasets.
"""

from .._public import publish as _publish
from ._pool import (
    SESSIONS_PER_RUNTIME as SESSIONS_PER_RUNTIME,
    PoolStatistics as PoolStatistics,
    RuntimePool as RuntimePool,
    SpecFactory as SpecFactory,
    open_pool as open_pool,
)
from ._places import Lease as Lease, Places as Places, job_warnings as job_warnings, open_places as open_places
from ._retry import (
    Backoff as Backoff,
    PoolClosedError as PoolClosedError,
    SessionBusyError as SessionBusyError,
    retryable as retryable,
)
from ._rss import process_tree_rss as process_tree_rss, runtime_rss_mib as runtime_rss_mib
from ._supervisor import Ended as Ended, Supervisor as Supervisor, serving as serving

__all__ = _publish(globals())

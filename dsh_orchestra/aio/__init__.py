"""The asyncio API: the trio entry points awaited from asyncio code (FastAPI, notebooks, ...).

trio runs as a guest on the running asyncio loop (``trio.lowlevel.start_guest_run``), in the
same thread: no thread hop per call or per event. Cancelling the asyncio task cancels the trio
work under it; a trio-side exception arrives as the same exception. Policies and answerers may
be asyncio coroutine functions (they run on the asyncio loop). See docs/embedding.md for what
cannot cross (trio-only objects).
"""

from .._public import publish as _publish
from ._api import (
    Events as Events,
    Runtime as Runtime,
    Session as Session,
    compare_runs as compare_runs,
    open_runtime as open_runtime,
    run_batch as run_batch,
    run_workflow as run_workflow,
    score_results as score_results,
)
from ._guest import TrioObjectError as TrioObjectError

__all__ = _publish(globals())

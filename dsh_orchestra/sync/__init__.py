"""The blocking API, for scripts and notebooks: the trio entry points as plain calls.

Each runs one trio loop in a dedicated thread (per ``open_runtime`` block, or per call), so
it works in a plain script and in a Jupyter cell where asyncio already runs in the main
thread. Results and exceptions are those of the trio API; a KeyboardInterrupt (Ctrl-C)
cancels the trio side, which closes its runtimes (no process is left), and is raised again.
See docs/embedding.md.
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

__all__ = _publish(globals())

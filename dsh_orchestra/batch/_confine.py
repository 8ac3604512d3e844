"""What a sandboxed runtime of a batch may write and must not see (``RuntimeSpec.sandbox``).

Known before the first runtime starts: the workspace root (made then, ``Workspaces``) is
writable; the results file, its lock note and fingerprint, the summary, the audit log and the
transcripts directory (made then, so that it is covered) are hidden.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from ..runtime import RuntimeSpec
from ._evaluation import fingerprint_path
from ._options import BatchOptions
from ._workspaces import Workspaces, open_workspaces


def confined(spec: RuntimeSpec | None, out: Path, options: BatchOptions, workspaces: Workspaces | None) -> RuntimeSpec | None:
    """``spec`` with the batch's sandbox mode (``options.sandbox``, when given) and, when it is
    sandboxed, the batch's writable and hidden paths (None stays None: the simulator's own)."""
    if spec is None:
        return None
    if options.sandbox is not None:
        spec = spec.evolve(sandbox=options.sandbox)
    if not spec.sandboxed:
        return spec
    if options.transcripts is not None:
        Path(options.transcripts).mkdir(parents=True, exist_ok=True)
    hidden = [out, fingerprint_path(out), Path(os.path.realpath(out) + ".lock"),
              *(p for p in (options.summary, options.audit, options.transcripts) if p is not None)]
    writable = [workspaces.root] if workspaces is not None else []
    return spec.evolve(sandbox_hidden=(*spec.sandbox_hidden, *hidden),
                       sandbox_writable=(*spec.sandbox_writable, *writable))


@asynccontextmanager
async def confine_run(spec: RuntimeSpec | None, out: Path, options: BatchOptions) -> AsyncIterator[
        tuple[RuntimeSpec | None, Workspaces | None]]:
    """The run's workspaces (``open_workspaces``: their root made now) and ``spec`` ``confined``
    to them, for the block; the workspaces are closed on exit."""
    with open_workspaces(options, out) as workspaces:
        yield confined(spec, out, options, workspaces), workspaces

"""Writing a results file whole: a new file beside it, renamed onto it when complete."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def replaced_atomically(out: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A new file in ``out``'s directory, open for writing (bytes); when the block ends it is
    flushed, synced and renamed onto ``out``, and when the block raises it is removed: a reader
    of ``out`` sees the old file or the whole new one, never a part (``score``'s RESCORED,
    ``merge``'s output)."""
    out = Path(out)
    handle = tempfile.NamedTemporaryFile("wb", dir=out.parent, prefix=f".{out.name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, out)
    except BaseException:
        os.unlink(handle.name)
        raise

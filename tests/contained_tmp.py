"""The temporary directory of a subprocess a test starts, kept inside the test's own tmp_path.

The docs' examples and the example notebook make scratch files with ``tempfile`` (a fresh
DSH_HOME, a results file) as a user would. Run by the tests, those would pile up in /tmp; with
``TMPDIR`` inside tmp_path they go when the test does. Ray keeps the system's temporary
directory (``RAY_TMPDIR``): its socket paths must stay short.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def contained_tmp(where: Path) -> dict[str, str]:
    """Environment entries that put a subprocess's temporary files in ``where/tmp``."""
    tmp = where / "tmp"
    tmp.mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp), "RAY_TMPDIR": tempfile.gettempdir()}

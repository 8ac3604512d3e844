"""Large arrays back to the system when freed: glibc's malloc, told to map every block of
128 KiB or more on its own (``mallopt(M_MMAP_THRESHOLD)``), as ``score`` and ``compare`` of
millions of lines want.

By default glibc raises that threshold each time a mapped block is freed (up to 32 MiB), after
which the columns that grow as a file is read (arrays of some MiB, reallocated as they grow)
come from the heap, and the space each growth leaves behind is kept: about 40 MiB more peak
RSS on a million lines. With a fixed threshold a growing array is moved by ``mremap`` and a
freed one is unmapped. Nothing changes elsewhere than glibc (the call is skipped), nor for
inputs under 256 MiB in all (each mapping costs a system call: about 0.2 s more system time on
100,000 lines, for no gain there).
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
_THRESHOLD = 128 * 1024  # glibc's default, now kept fixed
_LARGE_INPUTS = 256 * 2**20  # bytes of input from which the threshold is fixed


def map_large_blocks(*inputs: str | None) -> bool:
    """Fix glibc's mmap threshold at 128 KiB when the ``inputs`` (paths) hold 256 MiB or more
    (see the module); False when it was not fixed (small inputs, no glibc)."""
    total = 0
    for path in inputs:
        try:
            total += os.stat(path).st_size if path is not None else 0
        except OSError:
            pass
    if total < _LARGE_INPUTS or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD))

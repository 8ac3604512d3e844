"""The terminal's size for progress bars (the batch's and ``run-status``'s): a shared private helper."""

from __future__ import annotations

import os
from typing import TextIO


def terminal_size(stream: TextIO) -> tuple[int | None, int | None]:
    """(columns, lines) to force where the terminal reports none; None: follow the terminal.

    A pseudo-terminal nobody sized (some CI runners, ``docker run -t``, a test's pty) reports
    0 x 0, and tqdm then draws nothing at all (it hides bars below the last line).
    """
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None, None
    return (None if size.columns > 0 else 100), (None if size.lines > 0 else 24)

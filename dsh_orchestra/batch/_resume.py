"""What a resumed batch reads of its results file: the (id, epoch) pairs already done, each
line counted into the run's tally from its decoded object (``results.TallyLine``: no
``ResultLine`` built), and the refusals: a line that is not a result (``read_results``'s rules,
a last line cut short that is not the start of a result line included) and an (id, epoch) on
two lines (naming both line numbers). A refused file is left exactly as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection

from ..results import ResultsFileError, TallyLine, read_results
from ._options import BatchUsageError


def _epoch(value: Any) -> int:
    """A line's epoch as the batch counts it: an integer >= 1, else 1 (``epoch`` absent: 1)."""
    return value if type(value) is int and value >= 1 else 1


def read_done(out: Path, ids: Collection[str], epochs: int, tally: Any) -> tuple[set[tuple[str, int]], int]:
    """The (id, epoch) pairs of ``out``'s lines whose id is in ``ids`` and epoch at most
    ``epochs`` (each line so counted is added to ``tally``), and the bytes of a torn last line
    cut off (``read_results(out, repair=True)``).

    Raises:
        BatchUsageError: a line is not a result, or repeats the (id, epoch) of an earlier line
            (naming the file and both lines); ``out`` is left unchanged.
    """
    done: set[tuple[str, int]] = set()
    first: dict[tuple[str, int], int] = {}  # (id, epoch) -> its line number
    stream = read_results(out, repair=True)
    try:
        for raw in stream.objects():
            line = TallyLine(raw)
            key = (line.id, _epoch(line.epoch))
            seen = first.setdefault(key, stream.number)
            if seen != stream.number:
                raise BatchUsageError(
                    f"{out}: lines {seen} and {stream.number} are both id {key[0]!r} epoch {key[1]}: a results file holds "
                    "one line per (id, epoch); remove one of them (the file was left unchanged)")
            if key[0] in ids and key[1] <= epochs:
                done.add(key)
                tally.add(line)
    except ResultsFileError as exc:
        raise BatchUsageError(str(exc)) from exc
    return done, stream.torn

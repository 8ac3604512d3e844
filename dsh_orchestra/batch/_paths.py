"""The paths a batch reads and writes, checked against each other before anything runs."""

from __future__ import annotations

from typing import Any

from .._paths import PathLike, check_paths, existing_file
from ._transcripts import may_write_transcript


def check_batch_paths(dataset: PathLike, out: PathLike, options: Any) -> None:
    """Refuse a batch whose outputs are its inputs or each other (``check_paths``).

    The results file counts as an output (on resume it is read, then appended to); the
    policy is an input when it came from a rules file.

    Raises:
        PathConflictError: naming both parameters and paths.
    """
    policy = getattr(options.policy, "source", None)
    check_paths(
        {"dataset": dataset, "policy": existing_file(policy)},
        {"out": out, "summary": options.summary, "audit": options.audit},
        output_dirs={"transcripts": (options.transcripts, may_write_transcript)},
    )

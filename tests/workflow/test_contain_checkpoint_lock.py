"""A checkpoint is locked while a run uses it (issue 31, part 7): a second run is refused ("in use")."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_orchestra.workflow._journal import CheckpointError, Journal


def test_a_second_open_of_a_checkpoint_in_use_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    first = Journal.open(path, workflow="w", inputs_digest="d", resume=False)
    try:
        with pytest.raises(CheckpointError, match="is in use by another run") as caught:
            Journal.open(path, workflow="w", inputs_digest="d", resume=True)
        assert caught.value.parameter == "checkpoint"
    finally:
        first.close()
    again = Journal.open(path, workflow="w", inputs_digest="d", resume=True)  # free once closed
    again.close()


def test_a_checkpoint_that_fails_its_checks_leaves_no_lock(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    Journal.open(path, workflow="w", inputs_digest="d", resume=False).close()
    with pytest.raises(CheckpointError, match="belongs to workflow"):
        Journal.open(path, workflow="other", inputs_digest="d", resume=True)
    Journal.open(path, workflow="w", inputs_digest="d", resume=True).close()

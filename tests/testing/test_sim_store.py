"""The simulator's snapshot writes: each save leaves the newest snapshot, atomically put in place."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from dsh_orchestra.testing import _sim_store
from dsh_orchestra.testing._sim_store import SessionRecord, SessionStore, swap_in


def record(turns: int) -> SessionRecord:
    return SessionRecord(id="a/b", origin_cwd="/w", cwd="/w", created_at=1, turns=turns)


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "replace"])
def test_each_save_leaves_the_newest_snapshot_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               exchange: bool) -> None:
    if not exchange:
        monkeypatch.setattr(_sim_store, "_renameat2", None)  # as without renameat2 (not Linux, old libc)
    store = SessionStore(tmp_path)
    for turns in (1, 2, 3):  # the first save has nothing to exchange with; the others do
        store.save(record(turns))
        loaded = store.load("a/b")
        assert loaded is not None and loaded.turns == turns
    assert sorted(os.listdir(tmp_path)) == ["a~002fb.json"]


def test_swap_in_is_an_exchange_then_a_removal(tmp_path: Path) -> None:
    """The old file's inode is gone, the new one's is at the path (nothing was copied)."""
    if _sim_store._renameat2 is None:
        pytest.skip("no renameat2 here")
    path, temporary = tmp_path / "s.json", tmp_path / "s.json.tmp"
    path.write_bytes(orjson.dumps({"v": 1}))
    temporary.write_bytes(orjson.dumps({"v": 2}))
    new_inode = temporary.stat().st_ino
    swap_in(temporary, path)
    assert orjson.loads(path.read_bytes()) == {"v": 2} and path.stat().st_ino == new_inode
    assert not temporary.exists()


def test_swap_in_fails_like_os_replace_when_the_temporary_is_missing(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("{}")
    with pytest.raises(FileNotFoundError):
        swap_in(tmp_path / "missing.tmp", tmp_path / "s.json")
    assert (tmp_path / "s.json").read_text() == "{}"

"""``--resume`` refuses what a crash cannot leave (issue 31 item 7): an (id, epoch) on two lines
(exit 2 naming the file and both line numbers) and a last line cut short that is not the start of
a result line; the file stays byte for byte as it was and no runtime starts. A torn result line is
still cut off, and one line per epoch of an item is no repeat."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from dsh_orchestra.cli import main

from batch_support import Scene, by_id, result


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path)


def line(item_id: str, **extra: object) -> bytes:
    return orjson.dumps(result(item_id) | extra) + b"\n"


def refused(scene: Scene, out: Path, data: bytes, capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    out.write_bytes(data)
    assert main(scene.batch("--resume", out=out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsh-orchestra: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert out.read_bytes() == data, "the results file was changed"
    assert not scene.marker.exists(), "a runtime was started"
    return err


def test_a_repeated_line_is_refused_naming_both_lines(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    out = scene.root / "res.jsonl"
    data = line("item-00000") + line("item-00001") + line("item-00000")
    err = refused(scene, out, data, capsys, "res.jsonl", "lines 1 and 3", "'item-00000'", "epoch 1")
    assert "remove one" in err


def test_a_repeat_with_other_content_and_an_explicit_epoch_is_refused(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    """The same (id, epoch) with a different session and ``"epoch": 1`` spelled out on one line only."""
    out = scene.root / "res.jsonl"
    data = line("item-00001", session_id="first") + line("item-00000") + line("item-00001", session_id="again", epoch=1)
    refused(scene, out, data, capsys, "lines 1 and 3", "'item-00001'")


def test_a_repeat_of_an_id_not_in_the_dataset_is_refused_too(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    out = scene.root / "res.jsonl"
    refused(scene, out, line("gone") + line("item-00000") + line("gone"), capsys, "lines 1 and 3", "'gone'")


@pytest.mark.parametrize("tail", [b"garbage", b"[1, 2", b'"id": "item-00001", "status": "ok"', b'{"not": "a res'])
def test_a_last_line_that_is_not_a_torn_result_is_refused(scene: Scene, capsys: pytest.CaptureFixture[str], tail: bytes) -> None:
    out = scene.root / "res.jsonl"
    refused(scene, out, line("item-00000") + tail, capsys, "res.jsonl", "line 2", "not a result line cut short")


def test_a_one_line_file_that_is_no_result_is_refused(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    out = scene.root / "res.jsonl"
    refused(scene, out, b"hello", capsys, "line 1")


@pytest.mark.parametrize("tail", [b'{"id": "item-00001", "sta', b'{"id":"item-0', b'{"i', b"{"])
def test_a_torn_result_line_is_still_cut_off_and_run_again(scene: Scene, tail: bytes) -> None:
    out = scene.root / "res.jsonl"
    out.write_bytes(line("item-00000", session_id="kept") + tail)
    assert main(scene.batch("--resume", out=out)) == 0
    lines = by_id(out)
    assert lines["item-00000"]["session_id"] == "kept" and lines["item-00001"]["status"] == "ok"
    data = out.read_bytes()
    assert data.endswith(b"\n") and [orjson.loads(raw)["id"] for raw in data.splitlines()] == ["item-00000", "item-00001"]


def test_epochs_of_one_item_are_not_repeats(scene: Scene) -> None:
    out = scene.root / "res.jsonl"
    out.write_bytes(line("item-00000", epoch=1) + line("item-00000", epoch=2) + line("item-00001", epoch=1))
    assert main(scene.batch("--resume", "--epochs", "2", out=out)) == 0
    keys = sorted((value["id"], value["epoch"]) for value in map(orjson.loads, out.read_bytes().splitlines()))
    assert keys == [("item-00000", 1), ("item-00000", 2), ("item-00001", 1), ("item-00001", 2)]

"""``compare`` refuses what it cannot compare honestly and prints no raw control character
(issue 31, item 7): a repeated (id, epoch) and a non-numeric score value are exit 2 naming the
file and line; ids with terminal escapes are printed escaped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.cli import main
from dsh_orchestra.cli._common import escape_controls


def scored(item_id: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {"id": item_id, "status": "ok", "final_response": "x", "scores": {"exact": {"value": value}}, **extra}


def write(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_a_repeated_id_is_refused_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "base.jsonl", [scored("a", 1.0), scored("b", 1.0), scored("a", 0.0)])
    cand = write(tmp_path / "cand.jsonl", [scored("a", 1.0), scored("b", 0.0)])
    assert main(["compare", base, cand]) == 2
    err = capsys.readouterr().err
    assert "base.jsonl: line 3 is not a result line: id 'a' (epoch 1) is already on an earlier line" in err
    assert "Traceback" not in err
    # another epoch of the same id is not a repeat
    base = write(tmp_path / "base.jsonl", [scored("a", 1.0, epoch=1), scored("a", 0.0, epoch=2)])
    cand = write(tmp_path / "cand.jsonl", [scored("a", 1.0, epoch=1), scored("a", 1.0, epoch=2)])
    assert main(["compare", base, cand]) == 0


@pytest.mark.parametrize("value", ["high", True, [1], {"v": 1}])
def test_a_non_numeric_score_value_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: Any) -> None:
    base = write(tmp_path / "base.jsonl", [scored("a", 1.0)])
    cand = write(tmp_path / "cand.jsonl", [scored("b", 0.0), scored("a", value)])
    assert main(["compare", base, cand]) == 2
    err = capsys.readouterr().err
    assert f"cand.jsonl: line 2 is not a result line: score 'exact' has the value {value!r}" in err


def test_control_characters_are_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = "x\u001b[31mred\u0007"
    base = write(tmp_path / "base.jsonl", [scored(bad, 1.0), scored("b", 1.0)])
    cand = write(tmp_path / "cand.jsonl", [scored(bad, 0.0), scored("b", 1.0)])
    assert main(["compare", base, cand]) == 0
    out = capsys.readouterr()
    assert "\u001b" not in out.out + out.err and "\u0007" not in out.out
    assert "x\\x1b[31mred\\x07" in out.out  # the regression's id, escaped
    assert main(["compare", base, cand, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # JSON escapes them itself; the value is intact
    assert doc["scorers"]["exact"]["regressions"] == [bad]
    assert escape_controls("a\tb\nc\x7fd\x9be") == "a\tb\nc\\x7fd\\x9be"

"""Every bad input gets exit 2 and a message naming the flag, file or line; nothing is written,
repaired or started (the scene's runtime command leaves a marker if it ever starts)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from dsh_orchestra.cli import main

from batch_support import Scene, by_id, result


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path)


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


NOT_UTF8 = 'default = "rejected"\n# caf\xe9\n'.encode("latin-1")

CASES = {
    "timeout-nan": (lambda s: s.batch("--timeout", "nan"), ["--timeout", "nan"]),
    "timeout-inf": (lambda s: s.batch("--timeout", "inf"), ["--timeout", "inf"]),
    "timeout-minus-inf": (lambda s: s.batch("--timeout=-inf"), ["--timeout"]),
    "rules-deadline-nan": (lambda s: s.batch("--policy", write(s.root / "nan.toml", b"deadline = nan\n")),
                           ["nan.toml", "deadline"]),
    "rules-deadline-inf": (lambda s: s.batch("--policy", write(s.root / "inf.toml", b"deadline = inf\n")),
                           ["inf.toml", "deadline"]),
    "runtime-command-empty": (lambda s: ["batch", str(s.dataset), "--out", str(s.root / "new.jsonl"),
                                         "--runtime-command", "", "--dsh-home", str(s.home)], ["--runtime-command"]),
    "runtime-command-blank": (lambda s: ["batch", str(s.dataset), "--out", str(s.root / "new.jsonl"),
                                         "--runtime-command", "  ", "--dsh-home", str(s.home)], ["--runtime-command"]),
    "runtime-command-unclosed-quote": (lambda s: ["batch", str(s.dataset), "--out", str(s.root / "new.jsonl"),
                                                  "--runtime-command", "dsh 'x", "--dsh-home", str(s.home)],
                                       ["--runtime-command"]),
    "policy-module-raises": (lambda s: s.batch("--policy", "raising_policy_mod:decide"), ["--policy", "cannot import",
                                                                                          "RuntimeError"]),
    "policy-module-syntax-error": (lambda s: s.batch("--policy", "syntax_policy_mod:decide"), ["--policy", "SyntaxError"]),
    "answerer-module-raises": (lambda s: s.batch("--answerer", "raising_policy_mod:answer"), ["--answerer", "cannot import"]),
    "rules-not-utf8": (lambda s: s.batch("--policy", write(s.root / "latin.toml", NOT_UTF8)), ["latin.toml", "UTF-8"]),
    "answerer-not-utf8": (lambda s: s.batch("--answerer", write(s.root / "answers.toml", NOT_UTF8)),
                          ["--answerer", "answers.toml", "UTF-8"]),
    "scenario-not-utf8": (lambda s: ["batch", str(s.dataset), "--out", str(s.root / "new.jsonl"), "--runtime", "sim",
                                     "--script", write(s.root / "scene.toml", NOT_UTF8)], ["--script", "scene.toml"]),
    "scenario-invalid": (lambda s: ["batch", str(s.dataset), "--out", str(s.root / "new.jsonl"), "--runtime", "sim",
                                    "--script", write(s.root / "scene.toml", b"[[rules]]\nreply = 3\n")],
                         ["--script", "scene.toml"]),
    "transcripts-is-a-file": (lambda s: s.batch("--transcripts", str(s.summary)), ["--transcripts", "summary.json"]),
    "resume-dataset-as-results": (lambda s: s.batch("--resume", out=write(s.root / "copy.jsonl", s.dataset.read_bytes())),
                                  ["copy.jsonl", "line 1", "'status'"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_naming_it(scene: Scene, case: str, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (scene.root / "raising_policy_mod.py").write_text("raise RuntimeError('boom')\n")
    (scene.root / "syntax_policy_mod.py").write_text("def decide(:\n")
    monkeypatch.syspath_prepend(str(scene.root))
    build, needles = CASES[case]
    args = build(scene)
    copies = {p: p.read_bytes() for p in scene.root.glob("*.jsonl")}
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsh-orchestra: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not scene.marker.exists(), "a runtime was started"
    assert not (scene.root / "new.jsonl").exists()
    for path, data in copies.items():
        assert path.read_bytes() == data, f"{path} was changed"


def test_resume_keeps_a_whole_last_line_and_restores_its_newline(scene: Scene) -> None:
    """The last result line lacks its newline (it parses): kept, not rerun; the file ends in a newline."""
    out = scene.root / "res.jsonl"
    kept = result("item-00000") | {"session_id": "kept-session"}
    out.write_bytes(orjson.dumps(kept))
    assert main(scene.batch("--resume", out=out)) == 0
    data = out.read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == 2
    lines = by_id(out)
    assert lines["item-00000"]["session_id"] == "kept-session" and lines["item-00001"]["status"] == "ok"


def test_resume_refuses_foreign_lines_unchanged(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    """A results file with a line of the wrong shape in the middle, or a JSON value as its last line
    without newline: exit 2 with the line, the file byte-for-byte as it was."""
    out = scene.root / "res.jsonl"
    good = orjson.dumps(result("item-00000")) + b"\n"
    for data in (good + b'{"id": "x", "prompt": "p"}\n' + good, good + b'{"id": "x", "status": "ok", "attempts": "2"}',
                 good + b"[1, 2]"):
        out.write_bytes(data)
        assert main(scene.batch("--resume", out=out)) == 2
        err = capsys.readouterr().err
        assert "line 2" in err and "res.jsonl" in err
        assert out.read_bytes() == data
    assert not scene.marker.exists()

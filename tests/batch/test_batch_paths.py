"""Outputs never overwrite inputs or each other: every command refuses a collision with exit 2,
naming both paths, before anything is written and before any runtime starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from dsh_orchestra._paths import PathConflictError, check_paths
from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.batch._transcripts import may_write
from dsh_orchestra.cli import main
from dsh_orchestra.report import write_report

from batch_support import Scene


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path)


CASES: dict[str, tuple[Callable[[Scene], list[str]], tuple[str, str]]] = {
    "summary-is-out": (lambda s: s.batch("--summary", str(s.root / "new.jsonl")), ("--out", "--summary")),
    "audit-is-out": (lambda s: s.batch("--audit", str(s.results), out=s.results), ("--out", "--audit")),
    "summary-is-dataset": (lambda s: s.batch("--summary", str(s.dataset)), ("DATASET", "--summary")),
    "audit-is-dataset": (lambda s: s.batch("--audit", str(s.dataset)), ("DATASET", "--audit")),
    "out-is-dataset-resume": (lambda s: s.batch("--resume", out=s.dataset), ("DATASET", "--out")),
    "out-is-dataset": (lambda s: s.batch(out=s.dataset), ("DATASET", "--out")),
    "out-is-policy": (lambda s: s.batch("--policy", str(s.policy), out=s.policy), ("--policy", "--out")),
    "summary-is-script": (lambda s: s.batch("--script", str(s.script), "--summary", str(s.script)), ("--script", "--summary")),
    "log-file-is-dataset": (lambda s: ["--log-file", str(s.dataset), *s.batch()], ("DATASET", "--log-file")),
    "log-file-is-out": (lambda s: ["--log-file", str(s.root / "new.jsonl"), *s.batch()], ("--out", "--log-file")),
    "out-in-transcripts": (lambda s: s.batch("--transcripts", str(s.root / "t"), out=s.root / "t" / "a.jsonl.gz"),
                           ("--out", "--transcripts")),
    "summary-in-transcripts": (lambda s: s.batch("--transcripts", str(s.root), "--summary", str(s.root / "x.jsonl.gz")),
                               ("--summary", "--transcripts")),
    "report-out-is-results": (lambda s: ["report", str(s.results), "--out", str(s.results)], ("RESULTS", "--out")),
    "report-out-is-summary": (lambda s: ["report", str(s.results), "--summary", str(s.summary), "--out", str(s.summary)],
                              ("--summary", "--out")),
    "report-out-is-audit": (lambda s: ["report", str(s.results), "--audit", str(s.audit), "--out", str(s.audit)],
                            ("--audit", "--out")),
    "report-log-file-is-results": (lambda s: ["--log-file", str(s.results), "report", str(s.results), "--out",
                                              str(s.root / "r.html")], ("RESULTS", "--log-file")),
    "replay-log-file-is-audit": (lambda s: ["--log-file", str(s.audit), "policy", "replay", str(s.audit),
                                            "--policy", str(s.policy)], ("AUDIT", "--log-file")),
    "replay-log-file-is-policy": (lambda s: ["--log-file", str(s.policy), "policy", "replay", str(s.audit),
                                             "--policy", str(s.policy)], ("--policy", "--log-file")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_collision_exits_2_naming_both(scene: Scene, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    build, (first, second) = CASES[case]
    assert main(build(scene)) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsh-orchestra: ") and "Traceback" not in err
    assert first in err and second in err and ("same" in err or "inside" in err), err
    scene.unchanged()


def test_symlinks_hard_links_and_spellings_are_the_same_file(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    """Resolved, not compared as text: a symlink, a symlinked directory, a hard link, a relative
    spelling with ``..`` all name the dataset."""
    (scene.root / "link.jsonl").symlink_to(scene.dataset)
    (scene.root / "dirlink").symlink_to(scene.root)
    os.link(scene.dataset, scene.root / "hard.jsonl")
    (scene.root / "sub").mkdir()
    spellings = [scene.root / "link.jsonl", scene.root / "dirlink" / "ds.jsonl", scene.root / "hard.jsonl",
                 scene.root / "sub" / ".." / "ds.jsonl"]
    for spelling in spellings:
        for flag in ("--summary", "--audit"):
            assert main(scene.batch(flag, str(spelling))) == 2, (flag, spelling)
            err = capsys.readouterr().err
            assert "DATASET" in err and flag in err and str(spelling) in err
        assert main(scene.batch("--resume", out=spelling)) == 2
        capsys.readouterr()
    # a dangling symlink to a new output: the same path as the other output
    (scene.root / "dangling.json").symlink_to(scene.root / "new.jsonl")
    assert main(scene.batch("--summary", str(scene.root / "dangling.json"))) == 2
    assert "--summary" in capsys.readouterr().err
    scene.unchanged()


def test_distinct_paths_and_devices_pass(scene: Scene) -> None:
    """No false alarm: distinct outputs run; /dev/null may be given for several outputs."""
    status = main(scene.batch("--summary", os.devnull, "--audit", os.devnull, "--transcripts", str(scene.root / "t")))
    assert status == 0
    assert (scene.root / "new.jsonl").is_file() and scene.marker.exists()


def test_the_library_refuses_too(scene: Scene) -> None:
    """run_batch and write_report check the same rule (errors name parameters, not flags)."""
    import trio

    with pytest.raises(PathConflictError, match=r"dataset=.* and out=.* are the same file") as caught:
        trio.run(run_batch, scene.dataset, scene.dataset, None, BatchOptions(resume=True, progress="none"))
    assert caught.value.parameters == ("dataset", "out")
    with pytest.raises(PathConflictError, match="summary="):
        trio.run(run_batch, scene.dataset, scene.root / "new.jsonl", None,
                 BatchOptions(summary=scene.root / "new.jsonl", progress="none"))
    with pytest.raises(PathConflictError, match=r"results=.* and out="):
        write_report(scene.results, results=scene.results)
    scene.unchanged()


def test_output_directories_claim_only_their_names(tmp_path: Path) -> None:
    """A transcripts directory collides only with files it may write (``*.jsonl.gz``, temporaries)."""
    directory = tmp_path / "t"
    check_paths({"dataset": directory / "ds.jsonl"}, {"out": directory / "r.jsonl"},
                output_dirs={"transcripts": (directory, may_write)})
    with pytest.raises(PathConflictError, match="inside"):
        check_paths({}, {"out": directory / "r.jsonl.gz"}, output_dirs={"transcripts": (directory, may_write)})
    with pytest.raises(PathConflictError, match="same path"):
        check_paths({}, {"out": directory}, output_dirs={"transcripts": (directory, may_write)})
    check_paths({"a": tmp_path / "x", "b": tmp_path / "x"})  # inputs may be the same file


def test_bad_path_values_exit_2(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty path, a file given as the transcripts directory, an output that is a directory."""
    for args, message in [
        (scene.batch("--summary", ""), "--summary needs a path"),
        (scene.batch("--transcripts", str(scene.summary)), "--transcripts"),
        (scene.batch("--audit", str(scene.root)), "is a directory"),
        (["--log-file", str(scene.root), *scene.batch()], "--log-file"),
        (scene.batch("--workspace", ""), "--workspace needs a path"),
        (scene.batch("--dsh-home", ""), "--dsh-home needs a path"),
    ]:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (args, err)
    scene.unchanged()

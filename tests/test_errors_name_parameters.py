"""The library speaks Python, the CLI speaks flags: library errors name parameters (``out=``,
``resume=True``, ``policy=``) and carry them as attributes; one table in cli/ spells them as
flags; no module outside cli/ names one of our flags."""

from __future__ import annotations

import pickle
import subprocess
import sys
import re
from pathlib import Path

import pytest

import dsh_orchestra
from dsh_orchestra.approvals import PolicyFileError, load_policy
from dsh_orchestra.batch import BatchOptions, BatchUsageError, parse_shard, run_batch
from dsh_orchestra.cli._errors import FLAGS, message
from dsh_orchestra.cli._main import build_parser
from dsh_orchestra.questions import AnswererFileError, first_option, load_answerer


async def test_results_without_resume_name_out_and_resume(tmp_path: Path) -> None:
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "a", "prompt": "hi"}\n')
    out = tmp_path / "r.jsonl"
    out.write_text('{"id": "a", "status": "ok"}\n')
    with pytest.raises(BatchUsageError) as caught:
        await run_batch(dataset, out, progress="none")
    error = caught.value
    assert str(error) == (f"results file {str(out)!r} already has results; pass resume=True to finish it, "
                          "or choose another out=")
    assert message(error) == (f"results file {str(out)!r} already has results; pass --resume to finish it, "
                              "or choose another --out")
    assert error.param == "resume" and [p.name for p in error.params] == ["resume", "out"]


async def test_a_directory_as_out_names_out_and_carries_the_value(tmp_path: Path) -> None:
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "a", "prompt": "hi"}\n')
    with pytest.raises(BatchUsageError) as caught:
        await run_batch(dataset, tmp_path, progress="none")
    assert (caught.value.param, caught.value.value) == ("out", str(tmp_path))
    assert str(caught.value) == f"out={str(tmp_path)!r} is a directory; give a file path"
    assert message(caught.value) == f"--out {str(tmp_path)!r} is a directory; give a file path"


def test_option_values_name_the_parameter() -> None:
    with pytest.raises(BatchUsageError) as caught:
        BatchOptions(runtimes=0)
    assert str(caught.value) == "runtimes must be an integer >= 1, not 0"
    assert message(caught.value) == "--runtimes must be an integer >= 1, not 0"
    assert (caught.value.param, caught.value.value) == ("runtimes", 0)
    with pytest.raises(ValueError, match=r"^shard must be I/N with 0 <= I < N \(for example 0/4\), not '3/3'$"):
        parse_shard("3/3")


def test_policy_and_answerer_loaders_name_their_parameter(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError) as policy:
        load_policy("no_such_module_xyz:decide")
    assert str(policy.value).startswith("policy='no_such_module_xyz:decide': cannot import module")
    with pytest.raises(AnswererFileError) as answerer:
        load_answerer("no_such_module_xyz:answer")
    assert str(answerer.value).startswith("answerer='no_such_module_xyz:answer': cannot import module")
    assert message(answerer.value).startswith("--answerer 'no_such_module_xyz:answer': cannot import module")
    assert answerer.value.param == "answerer"
    with pytest.raises(PolicyFileError) as named:
        load_policy("no_such_module_xyz:decide", param="approvals")
    assert named.value.param == "approvals" and str(named.value).startswith("approvals=")
    restored = pickle.loads(pickle.dumps(answerer.value))  # crosses to Ray actors and back
    assert str(restored) == str(answerer.value) and restored.param == "answerer"


def test_load_answerer_reads_the_answerer_format(tmp_path: Path) -> None:
    assert load_answerer("first-option") is first_option
    good = tmp_path / "answers.toml"
    good.write_text('default = "dismiss"\n[answers]\nenv = "staging"\n')
    assert callable(load_answerer(str(good)))
    bad = tmp_path / "bad.toml"
    bad.write_text('default = "maybe"\nextra = 1\n[answers]\nenv = 3\n')
    with pytest.raises(AnswererFileError) as caught:
        load_answerer(str(bad))
    text = str(caught.value)
    assert text.startswith(f"answerer={str(bad)!r}: ")
    assert "must be one of 'first-option', 'dismiss' @ file.default" in text
    assert "@ file.answers['env']" in text and "unknown key(s) ['extra']" in text
    with pytest.raises(AnswererFileError, match=r"^answerer must be first-option, a TOML FILE or module:attr, not 'x'$"):
        load_answerer("x")


def test_every_flag_in_the_table_exists() -> None:
    """The table only holds flags the CLI really has."""
    parser = build_parser()
    known: set[str] = {s for option in parser._actions for s in option.option_strings}
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():  # type: ignore[union-attr]
            for option in sub._actions:
                known.update(option.option_strings)
    assert {f for f in FLAGS.values() if f.startswith("--")} - known == set()


def test_no_module_outside_cli_names_a_flag_of_ours() -> None:
    """Strings in the library (errors, log records, report text, docstrings) name parameters,
    not ``dsh-orchestra`` flags; the simulator's and dsh's own command lines are theirs."""
    parser = build_parser()
    ours: set[str] = set()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():  # type: ignore[union-attr]
            for option in sub._actions:
                ours.update(s for s in option.option_strings if s.startswith("--") and s != "--help")
    theirs = {"--profile", "--patch", "--script", "--port", "--store"}  # dsh's and the simulator's
    root = Path(dsh_orchestra.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("cli/", "testing/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]+", line):
                if flag in ours and flag not in theirs:
                    found.append(f"{relative}:{number}: {flag}")
    assert found == []


@pytest.mark.parametrize(("args", "expected"), [
    (["--max-tokens", "0"], "dsh-orchestra: --max-tokens must be a positive integer, not 0"),
    (["--model", " "], "dsh-orchestra: --model must be a non-empty string, not ' '"),
    (["--reasoning-effort", ""], "dsh-orchestra: --reasoning-effort must be a non-empty string, not ''"),
    (["--group-by", ""], "dsh-orchestra: --group-by must be a metadata key (a non-empty string), not ''"),
    (["--epoch-reducer", "pass@3"],
     "dsh-orchestra: --epoch-reducer 'pass@3' needs k <= the epochs (1); raise --epochs or lower k"),
])
def test_the_cli_names_the_flag_of_a_runtime_layer_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str,
) -> None:
    """Errors raised below the CLI (RuntimeSpec, the scoring plan) come out with flags: exit 2."""
    from dsh_orchestra.cli import main

    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "a", "prompt": "hi"}\n')
    out = tmp_path / "r.jsonl"
    status = main(["batch", str(dataset), "--out", str(out), "--no-progress", *args])
    err = capsys.readouterr().err
    assert (status, err.strip()) == (2, expected)
    assert not out.exists()


def test_a_report_option_checked_by_the_library_is_named_as_a_flag(tmp_path: Path) -> None:
    """A real process: the message names ``--max-transcript``, exit 2, no traceback."""
    results = tmp_path / "r.jsonl"
    results.write_text('{"id": "a", "status": "ok"}\n')
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())", "report", str(results), "--out", str(tmp_path / "r.html"),
         "--max-transcript", "0"], capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == "dsh-orchestra: --max-transcript must be an integer >= 1, not 0\n"
    assert not (tmp_path / "r.html").exists()


def test_runtime_layer_errors_are_param_errors_and_still_value_errors() -> None:
    from dsh_orchestra import RuntimePool, RuntimeSpec
    from dsh_orchestra._params import ParamError
    from dsh_orchestra.protocol import LineFramer
    from dsh_orchestra.scale import RayExecutor

    with pytest.raises(ValueError) as caught:
        RuntimeSpec(dsh_home="/tmp/h", handshake_timeout=0)
    assert isinstance(caught.value, ParamError) and (caught.value.param, caught.value.value) == ("handshake_timeout", 0)
    assert str(caught.value) == "handshake_timeout must be a positive number of seconds, not 0"
    assert message(caught.value) == "--handshake-timeout must be a positive number of seconds, not 0"
    with pytest.raises(ValueError) as relay:
        RuntimeSpec(dsh_home="/tmp/h", command=["x"], approval_relay="on")
    assert isinstance(relay.value, ParamError) and (relay.value.param, relay.value.value) == ("approval_relay", "on")
    with pytest.raises(TypeError) as env:
        RuntimeSpec(dsh_home="/tmp/h", env={"A": 1})
    assert isinstance(env.value, ParamError) and env.value.param == "env"
    with pytest.raises(ValueError) as actors:
        RayExecutor(actors=0)
    assert isinstance(actors.value, ParamError) and str(actors.value) == "actors must be an integer >= 1, not 0"
    with pytest.raises(ValueError) as framer:
        LineFramer(max_frame_size=0)
    assert isinstance(framer.value, ParamError) and framer.value.param == "max_frame_size"
    spec = RuntimeSpec(dsh_home="/tmp/h")
    with pytest.raises(ValueError) as size:
        RuntimePool(spec, 0)
    assert isinstance(size.value, ParamError) and str(size.value) == "pool size must be an integer >= 1, not 0"

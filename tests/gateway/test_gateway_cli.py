"""The gateway's flags and ``dsh-orchestra cache``: bad input exits 2 naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh_orchestra.cli import main
from dsh_orchestra.gateway import ResponseCache
from dsh_orchestra.gateway._cache import Entry

from gateway_support import write_dataset


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "ds.jsonl", [{"id": "a", "prompt": "hi"}])


@pytest.mark.parametrize(("flags", "expected"), [
    (["--cache-mode", "replay"], "--cache-mode replay needs --cache DIR"),
    (["--cache-mode", "record"], "--cache-mode record needs --cache DIR"),
    (["--model-concurrency", "many"], "--model-concurrency must be an integer >= 1 or auto"),
    (["--model-concurrency", "0"], "--model-concurrency"),
    (["--no-gateway", "--cache", "c"], "--cache needs the gateway: drop --no-gateway"),
    (["--upstream", "ftp://x"], "--upstream 'ftp://x' must be an http:// or https:// URL"),
    (["--model-rate", "fast"], "--model-rate must be a positive rate like 20/s or 600/min, not 'fast'"),
    (["--model-rate", "0/s"], "--model-rate must be a positive rate"),
    (["--no-gateway", "--model-rate", "2/s"], "--model-rate needs the gateway: drop --no-gateway"),
])
def test_bad_gateway_flags_exit_2(flags: list[str], expected: str, dataset: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["batch", str(dataset), "--out", str(tmp_path / "out.jsonl"), "--no-progress", *flags])
    assert status == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_replay_needs_a_recorded_cache_and_a_usable_directory(dataset: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "out.jsonl")
    assert main(["batch", str(dataset), "--out", out, "--cache", str(tmp_path / "empty"), "--cache-mode", "replay"]) == 2
    assert "holds no recorded answers" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["batch", str(dataset), "--out", out, "--cache", str(tmp_path / "file")]) == 2
    assert "--cache: the cache directory" in capsys.readouterr().err


def test_cache_stats_and_prune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = ResponseCache(tmp_path / "c")
    cache.put("k", Entry(body=b"x", headers=[], input_tokens=1, output_tokens=2))
    cache.get("k")
    cache.close()
    assert main(["cache", "stats", str(tmp_path / "c")]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["entries"], stats["hits"], stats["hit_rate"], stats["stored_tokens"]) == (1, 1, 1.0, 3)
    assert main(["cache", "prune", str(tmp_path / "c"), "--unused"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 0
    assert main(["cache", "prune", str(tmp_path / "c")]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0
    assert main(["cache", "stats", str(tmp_path / "nothing")]) == 2
    assert "holds no response cache" in capsys.readouterr().err


def test_run_takes_the_gateway_flags_too(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "code_review")
    assert main(["run", recipe, "--cache-mode", "replay"]) == 2
    assert "--cache-mode replay needs --cache DIR" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["batch", "run"])
@pytest.mark.parametrize(("flags", "expected"), [
    (["--cache-mode", "replay"], "--cache-mode replay needs --cache DIR"),
    (["--no-gateway", "--cache", "c"], "--cache needs the gateway: drop --no-gateway"),
])
def test_contradicting_gateway_flags_are_named_before_a_missing_credential(
        command: str, flags: list[str], expected: str, dataset: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The flags are wrong whatever the environment: the message names them, not the key."""
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "code_review")
    target = [str(dataset), "--out", str(tmp_path / "out.jsonl"), "--no-progress"] if command == "batch" else [recipe]
    assert main([command, *target, "--runtime", "dsh", "--dsh-home", str(tmp_path / "h"), *flags]) == 2
    err = capsys.readouterr().err
    assert expected in err and "credential" not in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "c").exists()

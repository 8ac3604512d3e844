"""Secrets never change identity (issue 31, part 5): an id holding a secret is refused up front
(naming the line, not the id), and detection covers PAT names, random-looking environment
values and base64 forms."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import trio

from dsh_orchestra._redact import SECRET_NAME, Redactor, environment_secrets, looks_random
from dsh_orchestra.batch import BatchOptions, BatchUsageError, run_batch
from dsh_orchestra.runtime import RuntimeSpec

SECRET = "s3cr3t-V4lue-0123456789"


def _spec(tmp_path: Path, script: Path | None = None, **env: str) -> RuntimeSpec:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return RuntimeSpec.simulator(script=script, dsh_home=home, cwd=tmp_path, env=env)


def _dataset(tmp_path: Path, ids: list[str]) -> Path:
    path = tmp_path / "ds.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": "hi"}) + "\n" for i in ids))
    return path


async def test_an_id_holding_a_secret_is_refused_naming_the_line(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, ["plain", f"id-{SECRET}", f"ID-{SECRET.upper()}", "other"])
    with trio.fail_after(60), pytest.raises(BatchUsageError) as caught:
        await run_batch(dataset, tmp_path / "r.jsonl", _spec(tmp_path, MY_API_KEY=SECRET), BatchOptions(progress="none"))
    message = str(caught.value)
    assert "line 2, 3:" in message and SECRET.lower() not in message.lower()
    assert not (tmp_path / "r.jsonl").exists()


async def test_ids_without_secrets_are_never_rewritten(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, ["plain", "token=abc"])
    with trio.fail_after(60):
        await run_batch(dataset, tmp_path / "r.jsonl", _spec(tmp_path, MY_API_KEY=SECRET),
                        BatchOptions(progress="none", transcripts=tmp_path / "tr"))
        again = await run_batch(dataset, tmp_path / "r.jsonl", _spec(tmp_path, MY_API_KEY=SECRET),
                                BatchOptions(progress="none", resume=True))
    ids = [json.loads(line)["id"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sorted(ids) == ["plain", "token=abc"] and again.resumed == 2


@pytest.mark.parametrize(("name", "secret"), [("GH_PAT", True), ("MY_PAT_2", True), ("PAT", True), ("PATH", False),
                                               ("PATTERN", False), ("GITHUB_TOKEN", True), ("DB_PASSWORD", True)])
def test_secret_names(name: str, secret: bool) -> None:
    assert bool(SECRET_NAME.search(name)) is secret


@pytest.mark.parametrize(("value", "random"), [
    ("sk-proj-8fJ2kLq9ZxW3mN7vB4tR1yP6", True), ("AKIAIOSFODNN7EXAMPLEwJalrXUtnFEMI", True),
    ("/usr/local/bin:/usr/bin:/bin:/usr/sbin", False), ("hello world this is a sentence", False),
    ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", False), ("1.2.3", False), ("abcdefghijklmnopqrstuvwxyzabcdef", False),
])
def test_random_looking_values(value: str, random: bool) -> None:
    assert looks_random(value) is random


def test_base64_forms_are_secrets_too() -> None:
    pat = "ghp_" + "Zx9" * 12
    found = environment_secrets({"GH_PAT": pat, "UNNAMED": "sk-proj-8fJ2kLq9ZxW3mN7vB4tR1yP6", "HOME": "/root"})
    encoded = base64.b64encode(pat.encode()).decode().rstrip("=")
    assert pat in found and encoded in found and "sk-proj-8fJ2kLq9ZxW3mN7vB4tR1yP6" in found and "/root" not in found
    text = Redactor(found).text(f"a {pat} b {base64.b64encode(pat.encode()).decode()} c")
    assert pat not in text and encoded not in text
    spec_secrets = RuntimeSpec.simulator(env={"GH_PAT": pat}, inherit_env=False, dsh_home="/nonexistent").secrets()
    assert pat in spec_secrets and encoded in spec_secrets


async def test_a_pat_and_its_base64_never_reach_the_results(tmp_path: Path) -> None:
    pat = "ghp_" + "Zx9" * 12
    encoded = base64.b64encode(pat.encode()).decode()
    script = tmp_path / "script.toml"
    script.write_text(f'default_reply = "token {pat} and {encoded}"\n')
    with trio.fail_after(60):
        await run_batch(_dataset(tmp_path, ["a"]), tmp_path / "r.jsonl", _spec(tmp_path, script, GH_PAT=pat),
                        BatchOptions(progress="none"))
    text = (tmp_path / "r.jsonl").read_text()
    assert "token ***" in text and pat not in text and encoded.rstrip("=") not in text

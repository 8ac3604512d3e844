"""A runtime that echoes the key: the secret never reaches a file the batch writes or a
message it shows (results, summary, audit, transcripts, log file, report, stdout, stderr)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dsh_orchestra.cli import main

from batch_support import write_dataset

KEY = "sk-harden-" + "0123456789abcdef" * 2

SCRIPT = f'''
[[rules]]
name = "echo"
match = "ECHO"
reply = "the key is {KEY}"

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children said {KEY}"
[[rules.spawn]]
description = "child {KEY}"
prompt = "child task"
reply = "child knows {KEY}"

[[rules]]
name = "ask"
match = "ASK"
reply = "approval was {{outcome}}"
approval = {{ tool = "bash", reason = "run with {KEY}" }}
'''


def test_an_echoed_key_is_redacted_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    script = tmp_path / "echo.toml"
    script.write_text(SCRIPT)
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "rejected"\n[[rules]]\nname = "r"\ntools = "bash"\nreason = "run"\noutcome = "allowed-once"\n')
    dataset = write_dataset(tmp_path / "ds.jsonl", [{"id": "echo", "prompt": "ECHO"}, {"id": "spawn", "prompt": "SPAWN"},
                                                    {"id": "ask", "prompt": "ASK"}])
    out, summary, audit, log = tmp_path / "r.jsonl", tmp_path / "s.json", tmp_path / "a.jsonl", tmp_path / "log.jsonl"
    status = main(["--log-file", str(log), "--log-level", "debug", "batch", str(dataset), "--out", str(out),
                   "--runtime", "sim", "--script", str(script), "--policy", str(policy), "--audit", str(audit),
                   "--summary", str(summary), "--transcripts", str(tmp_path / "t"), "--no-progress"])
    assert status == 0
    assert main(["report", str(out), "--summary", str(summary), "--audit", str(audit), "--transcripts",
                 str(tmp_path / "t"), "--out", str(tmp_path / "report.html")]) == 0
    shown = capsys.readouterr()
    results = out.read_text()
    assert "the key is ***" in results and "child knows ***" in results  # the runtime did echo it
    assert "run with ***" in audit.read_text()
    written = {path.name: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file() and path.name != "echo.toml"}
    for name, data in list(written.items()):
        if name.endswith(".gz"):
            written[name] = gzip.decompress(data)
    assert len([n for n in written if n.endswith(".jsonl.gz")]) == 3
    for name, data in written.items():
        assert KEY.encode() not in data, f"the key is in {name}"
    assert KEY not in shown.out and KEY not in shown.err


@pytest.mark.parametrize("secret", ["plain-secret-value", 'quo"te\\back', "line\nbreak\tx", "ünïcødé-sécret", "\u2028sep"])
def test_result_lines_are_encoded_once_and_redacted_wherever_a_secret_is(secret: str) -> None:
    """``Redactor.value_json`` (the results writer's path) gives what ``value`` + ``orjson.dumps``
    give: a secret in a key, a nested string or a list is found through its JSON escaping."""
    import orjson

    from dsh_orchestra._redact import Redactor

    redactor = Redactor([secret])
    clean = {"id": "a", "final_response": "nothing here", "metadata": {"n": 1, "l": ["x", None, 2.5]}}
    value, data = redactor.value_json(clean)
    assert value is clean and data == orjson.dumps(clean)
    for dirty in ({"final_response": f"the key is {secret}!"}, {"metadata": {f"k{secret}": 1}},
                  {"subagents": [{"text": ["deep", secret]}]}):
        value, data = redactor.value_json(dirty)
        assert value == redactor.value(dirty) and data == orjson.dumps(redactor.value(dirty))
        assert secret.encode() not in data and orjson.dumps(secret)[1:-1] not in data
    assert Redactor().value_json(clean) == (clean, orjson.dumps(clean))
    patterned = Redactor(patterns=True).value_json({"t": "token=abc123"})
    assert patterned[0] == {"t": "***"} and patterned[1] == b'{"t":"***"}'

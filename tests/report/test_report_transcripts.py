"""Per-item transcripts (``batch --transcripts DIR``): bounded, gzip JSON Lines, safe names, off by default."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from report_support import XSS_ID, SimRun
from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.batch._transcripts import SUFFIX, TranscriptWriter, encode_transcript, read_transcript, transcript_name
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import TurnResult, open_runtime

NOISY = '''
[[rules]]
name = "noisy"
match = "NOISE"
reply = "quiet now"
events = {count = 40, size = 300}
'''


def test_every_item_with_a_turn_has_its_transcript(sim_run: SimRun) -> None:
    lines = {line["id"]: line for line in sim_run.lines()}
    files = sorted(p.name for p in sim_run.transcripts.iterdir())
    assert all(name.endswith(SUFFIX) and not name.startswith(".") for name in files)
    expected = {transcript_name(item_id) for item_id in lines if item_id != "hang-1"}  # the hung item never settled
    assert set(files) == expected
    for item_id, result in lines.items():
        if item_id == "hang-1":
            continue
        records = read_transcript(sim_run.transcripts / transcript_name(item_id))
        header = records[0]["transcript"]
        assert header["item"] == item_id and header["session_id"] == result["session_id"] and header["version"] == 1
        events = [r["params"]["event"]["type"] for r in records[1:] if r.get("method") == "session.event"]
        assert events[0] == "agent/inbox/spliced" and "turn/end" in events
        sessions = {r["params"]["sessionId"] for r in records[1:] if r.get("method") == "session.event"}
        assert sessions == {result["session_id"], *(s["child_session_id"] for s in result["subagents"])}
    spawn = read_transcript(sim_run.transcripts / transcript_name("spawn-1"))
    methods = [r.get("method") for r in spawn]
    assert methods.count("subagent.started") == 2 and methods.count("subagent.finished") == 2


def test_ids_become_safe_distinct_file_names(sim_run: SimRun) -> None:
    for item_id in ("dir/../escape", XSS_ID, "..", ".hidden", "a" * 300, "a/b", "a_b", "ünïcode"):
        name = transcript_name(item_id)
        assert "/" not in name and not name.startswith(".") and len(name) < 120
    assert transcript_name("a/b") != transcript_name("a_b")
    assert transcript_name("plain-01") == "plain-01.jsonl.gz"
    assert (sim_run.transcripts / transcript_name("dir/../escape")).is_file()
    assert not (sim_run.directory / "escape.jsonl.gz").exists()


async def test_transcripts_are_capped_and_say_so(tmp_path: Path) -> None:
    script = tmp_path / "noisy.toml"
    script.write_text(NOISY, encoding="utf-8")
    spec = RuntimeSpec.simulator(script=script, dsh_home=tmp_path, cwd=tmp_path)
    with trio.fail_after(20):
        async with open_runtime(spec) as runtime:
            turn = await runtime.session().run("NOISE please")
    whole, cut = encode_transcript("noisy", turn, max_bytes=10**9)
    assert not cut and len(whole) > 12_000
    writer = TranscriptWriter(tmp_path / "t", max_bytes=4000)
    path = await writer.write("noisy", turn)
    assert path == tmp_path / "t" / "noisy.jsonl.gz"
    assert writer.written == 1 and writer.truncated == 1
    raw = gzip.decompress(path.read_bytes())
    records = [orjson.loads(line) for line in raw.splitlines()]
    note = records[-1]["truncated"]
    kept = raw[: raw.rindex(b'{"truncated"')]
    assert len(kept) <= 4000
    assert note["limit_bytes"] == 4000 and note["omitted_lines"] == len(whole.splitlines()) - (len(records) - 1)
    assert note["omitted_bytes"] == len(whole) - len(kept)
    assert records[0]["transcript"]["item"] == "noisy"
    assert len(path.read_bytes()) < len(raw)  # compressed


async def test_off_by_default(tmp_path: Path) -> None:
    assert BatchOptions().transcripts is None
    dataset = tmp_path / "data.jsonl"
    dataset.write_text('{"id": "one", "prompt": "hello"}\n', encoding="utf-8")
    spec = RuntimeSpec.simulator(dsh_home=tmp_path, cwd=tmp_path)
    with trio.fail_after(20):
        summary = await run_batch(dataset, tmp_path / "results.jsonl", spec, BatchOptions(progress="none"))
    assert summary.ok == 1
    assert not list(await trio.Path(tmp_path).rglob(f"*{SUFFIX}"))


def test_a_transcript_that_cannot_be_written_does_not_fail_the_item(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = TranscriptWriter(tmp_path / "t")
    (tmp_path / "t").rmdir()
    (tmp_path / "t").write_text("a file where the directory was")
    turn = TurnResult(session_id="s", message_id="m", final_response="", finish_reason="completed", error=None,
                      events=(), notifications=(), subagents=(), duration=0.0)
    assert writer.write_nowait("x", turn) is None
    assert writer.failed == 1 and writer.written == 0
    assert any("cannot write the transcript of item 'x'" in r.getMessage() for r in caplog.records)


async def test_secrets_never_reach_a_transcript(tmp_path: Path) -> None:
    """A registered secret (a runtime's api key) in a prompt is redacted in the file on disk."""
    from dsh_orchestra._logging import forget_secrets

    spec = RuntimeSpec.simulator(dsh_home=tmp_path, cwd=tmp_path, api_key="sk-transcript-secret-1234")
    try:
        with trio.fail_after(20):
            async with open_runtime(spec) as runtime:  # registers the spec's secrets
                turn = await runtime.session().run("my key is sk-transcript-secret-1234")
        assert any("sk-transcript-secret-1234" in str(e) for e in turn.events)  # the prompt's user/message
        path = await TranscriptWriter(tmp_path / "t").write("secret", turn)
        assert path is not None
        raw = gzip.decompress(path.read_bytes())
        assert b"sk-transcript-secret-1234" not in raw and b"***" in raw
    finally:
        forget_secrets()


def test_transcript_names_are_injective_also_when_case_is_folded() -> None:
    """Distinct ids never share a file name, and neither do ids that differ only in case (a
    case-insensitive file system): the kept names never look like hashed ones."""
    hashed = transcript_name("a/b")[: -len(SUFFIX)]
    assert transcript_name(hashed) != transcript_name("a/b")  # an id spelled like a hashed name
    assert transcript_name("a_b-c14cddc033f6") != transcript_name("a/b")
    ids = ["A", "a", "Item-1", "item-1", "ITEM-1", "a/b", "a_b", "a b", "a\\b", "..", ".", ".hidden", "_hidden",
           "x" * 80, "x" * 81, "x" * 200, "x" * 200 + "y", "é", "e\u0301", "ß", "ss", "SS", "\u0130", "i", "con", "",
           "a" * 40 + "-" + "0" * 16, hashed, hashed.upper(), "__proto__", "constructor"]
    names = [transcript_name(i) for i in ids]
    assert len({n.casefold() for n in names}) == len(ids)
    for name in names:
        assert name.endswith(SUFFIX) and not name.startswith(".") and "/" not in name and len(name.encode()) < 255
    assert transcript_name("plain-01") == "plain-01.jsonl.gz" and transcript_name("q.17_a") == "q.17_a.jsonl.gz"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=2, max_size=30, unique=True))
def test_transcript_names_never_collide(ids: list[str]) -> None:
    assert len({transcript_name(i).casefold() for i in ids}) == len(ids)

"""The simulator against the real runtime's recorded transcripts (virtual time, memory streams).

Each test replays a recording's client frames against the in-process simulator and compares the
ordered wire items: (method, event type) of every notification, server requests, and every
response with its error code and message. Plugin events and retry detail are ignored
(``sim_support.IGNORED_EVENTS``). Where the simulator follows the newest spec instead of
0.2.1-rc.2, the expected items are rewritten first, and the test says so.
"""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.testing._script import parse_script
from dsh_orchestra.testing._simulator import open_simulator

from sim_support import (
    TRANSCRIPT_SCRIPT,
    TRANSCRIPTS,
    RawClient,
    assert_same,
    client_requests,
    explain,
    items,
    load_transcript,
    per_session,
    replay,
    transcript_items,
)

pytestmark = pytest.mark.skipif(not TRANSCRIPTS.is_dir(), reason=f"no transcripts at {TRANSCRIPTS}")

SCRIPT = parse_script(tomllib.loads(TRANSCRIPT_SCRIPT), source="transcript keywords")


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    """Real directories for the sanitised paths; the workspace holds what transcript 05 reads."""
    workspace, elsewhere, home = tmp_path / "workspace", tmp_path / "elsewhere", tmp_path / "dsh-home"
    (workspace / "sub" / "deeper").mkdir(parents=True)
    (workspace / "hello.txt").write_text("hello from the workspace file\n")
    elsewhere.mkdir()
    home.mkdir()
    return {"/workspace": str(workspace), "/elsewhere": str(elsewhere), "/dsh-home": str(home)}


async def run_replay(entries: list[dict[str, Any]], paths: Mapping[str, str], *, store: str | None = None,
                     hooks: Mapping[Any, Callable[[], None]] | None = None,
                     answer: Callable[[str, dict[str, Any]], Any] | None = None) -> list[dict[str, Any]]:
    """Replay ``entries`` against a fresh simulator; returns every frame it sent."""
    async with open_simulator(SCRIPT, store=store, turn_latency=0.02, receipt_latency=0.005) as (_, stream):
        client = RawClient(stream, answer)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.read)
            with trio.fail_after(120):
                await replay(entries, client, paths, hooks)
            nursery.cancel_scope.cancel()
    return client.frames


def compare(name: str, frames: list[dict[str, Any]], paths: Mapping[str, str],
            rewrite: Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]] | None = None,
            new_sessions: tuple[str, ...] = (), new_frames: tuple[Any, ...] = ()) -> None:
    """Assert the same wire items and, per session, the same (seq, type) of every event
    (plugin events included), and the same structures. ``new_sessions`` exist only in the
    simulator, and ``new_frames`` (request ids and server-request methods) differ on purpose:
    both are newest-spec behaviour."""
    entries = load_transcript(name)
    expected = transcript_items(entries)
    if rewrite is not None:
        expected = rewrite(expected)
    assert_same(expected, items(frames, client_requests(entries), paths), what=name)
    recorded = seqs([e["frame"] for e in entries if e["dir"] == "s2c"])
    simulated = {name: events for name, events in seqs(frames).items() if name not in new_sessions}
    assert simulated == recorded, f"{name}: per-session (seq, type) lists differ"
    real = [e["frame"] for e in entries if e["dir"] == "s2c"]
    assert_same_shapes(name, [f for f in real if f.get("id") not in new_frames],
                       [f for f in frames if f.get("id") not in new_frames and f.get("method") not in new_frames],
                       new_sessions)


def assert_same_shapes(name: str, real: list[dict[str, Any]], simulated: list[dict[str, Any]],
                       new_sessions: tuple[str, ...]) -> None:
    """Every event (matched by session and seq) has the same envelope and data structure; every
    other notification and every response has the same params/result structure, in order.
    ``request/header`` is compared only in its config: the simulator declares short tools."""
    def events(frames: list[dict[str, Any]]) -> dict[tuple[str, int], Any]:
        out, names = {}, {}
        for frame in frames:
            if frame.get("method") == "session.event":
                session = frame["params"]["sessionId"]
                label = names.setdefault(session, session if session.startswith("session") else f"child-{len(names)}")
                event = dict(frame["params"]["event"])
                if event["type"] == "request/header":
                    event["data"] = {**event["data"], "header": {"config": event["data"]["header"]["config"]}}
                if label not in new_sessions:
                    out[label, event["seq"]] = shape({**event, "data": event["data"]})
        return out

    def others(frames: list[dict[str, Any]]) -> list[Any]:
        return [(f.get("method"), shape(f.get("params", f.get("result", f.get("error"))))) for f in frames
                if f.get("method") != "session.event" and (f.get("params") or {}).get("sessionId") not in new_sessions
                and f.get("method") != "session.query.completed"]

    expected, actual = events(real), events(simulated)
    for key in expected:
        assert expected[key] == actual[key], f"{name}: event {key} differs in structure"
    assert others(real) == others(simulated), f"{name}: notification or response structures differ"


def seqs(frames: list[dict[str, Any]]) -> dict[str, list[tuple[int, str]]]:
    """Per session (children in order of appearance), the seq and type of each notified event."""
    out: dict[str, list[tuple[int, str]]] = {}
    names: dict[str, str] = {}
    for frame in frames:
        if frame.get("method") == "session.event":
            session = frame["params"]["sessionId"]
            name = names.setdefault(session, session if session.startswith("session") else f"child-{len(names)}")
            event = frame["params"]["event"]
            out.setdefault(name, []).append((event["seq"], event["type"]))
    return out


async def test_simple_turn(autojump_clock: MockClock, paths: dict[str, str]) -> None:
    """01: the first events, receipt and turn start before the prompt response; idle before the wait's."""
    entries = load_transcript("01-simple-turn.jsonl")
    compare("01-simple-turn.jsonl", await run_replay(entries, paths), paths)


async def test_subagent_turn(autojump_clock: MockClock, paths: dict[str, str]) -> None:
    """02: root idles while the child runs; the child's result restarts the root before subagent.finished."""
    entries = load_transcript("02-subagent.jsonl")
    compare("02-subagent.jsonl", await run_replay(entries, paths), paths)


async def test_resume_in_a_new_process(autojump_clock: MockClock, paths: dict[str, str]) -> None:
    """03a then 03b over one store: errors before resume, a silent resume, seq continuing after a gap."""
    store = str(Path(paths["/dsh-home"]) / "sim-sessions")
    setup = load_transcript("03a-resume-setup.jsonl")
    compare("03a-resume-setup.jsonl", await run_replay(setup, paths, store=store), paths)
    resumed = load_transcript("03b-resume-new-process.jsonl")
    frames = await run_replay(resumed, paths, store=store)
    compare("03b-resume-new-process.jsonl", frames, paths)  # also: the first new seq is 18, not 17


async def test_model_failures(autojump_clock: MockClock, paths: dict[str, str]) -> None:
    """04: HTTP 500 (retried), malformed SSE, then a normal turn; waits answer {} after errors."""
    entries = load_transcript("04-model-failure.jsonl")
    frames = await run_replay(entries, paths)
    compare("04-model-failure.jsonl", frames, paths)
    ends = [f["params"]["event"]["data"]["reason"] for f in frames
            if f.get("method") == "session.event" and f["params"]["event"]["type"] == "turn/end"]
    assert [(r["kind"], r.get("error", {}).get("code")) for r in ends] == [
        ("error", "SERVER"), ("error", "MALFORMED_RESPONSE"), ("completed", None)]
    retries = [f for f in frames if f.get("method") == "session.event" and f["params"]["event"]["type"] == "llm/retry"]
    assert [r["params"]["event"]["data"]["retry"] for r in retries] == [1, 2, 3, 4, 5]


async def test_working_directory(autojump_clock: MockClock, paths: dict[str, str]) -> None:
    """05: get creates the session, relative sets, errors, queued notices, fallback after deletion, read."""
    entries = load_transcript("05-working-directory.jsonl")
    frames = await run_replay(entries, paths, hooks={"c12": lambda: shutil.rmtree(paths["/elsewhere"])})
    compare("05-working-directory.jsonl", frames, paths)
    results = {f["id"]: f.get("result") for f in frames if "id" in f and "method" not in f}
    assert results["c3"] == {"cwd": paths["/workspace"] + "/sub"}
    assert results["c5"] == {"cwd": paths["/workspace"] + "/sub"}
    assert results["c12"] == {"cwd": paths["/workspace"]}
    read = next(f["params"]["event"]["data"] for f in frames
                if f.get("method") == "session.event" and f["params"]["event"]["type"] == "tool/result")
    recorded = next(e["frame"]["params"]["event"]["data"] for e in entries if e["dir"] == "s2c"
                    and e["frame"].get("method") == "session.event" and e["frame"]["params"]["event"]["type"] == "tool/result")
    assert read["meta"]["lines"] == recorded["meta"]["lines"]
    assert read["message"]["content"][0]["text"] == recorded["message"]["content"][0]["text"].replace(
        "/workspace", paths["/workspace"])


def _newest_spec_errors(expected: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """06 as the newest spec has it: -32601 for unknown methods, session/query implemented,
    and with ``approvalRequests: true`` a real ``approval/request`` between asked and decided."""
    out: list[tuple[Any, ...]] = []
    for item in expected:
        if item == ("response", "no/such/method", None,
                    "error -32603: unknown DeepSeek Harness SDK runtime method: no/such/method"):
            out.append(("response", "no/such/method", None, "error -32601: method not found: no/such/method"))
        elif item[:2] == ("response", "session/query"):
            out += [("event", "session-q", "permission/preset"), ("event", "session-q", "sandbox/mode"),
                    ("event", "session-q", "approval/policy"), ("event", "session-q", "command/run"),
                    ("event", "session-q", "command/done"), ("session.query.completed", "session-q"),
                    ("response", "session/query", "session-q", "ok")]
        elif item == ("event", "session-approval", "approval/decided"):
            out += [("request", "approval/request"), item]
        else:
            out.append(item)
    return out


async def test_errors(autojump_clock: MockClock, paths: dict[str, str]) -> None:
    """06: every error message verbatim, no replies to junk, numeric ids kept (newest-spec rewrites)."""
    entries = load_transcript("06-errors.jsonl")
    frames = await run_replay(entries, paths, answer=lambda method, params: {"outcome": "rejected"})
    compare("06-errors.jsonl", frames, paths, rewrite=_newest_spec_errors, new_sessions=("session-q",),
            new_frames=("c15", "approval/request"))
    assert any(f.get("id") == 42 for f in frames)  # a numeric id comes back as a number
    decided = [f["params"]["event"]["data"]["outcome"] for f in frames
               if f.get("method") == "session.event" and f["params"]["event"]["type"] == "approval/decided"]
    assert decided == ["rejected"]


async def test_concurrent_sessions(autojump_clock: MockClock, paths: dict[str, str]) -> None:
    """07: two sessions at once and two queued prompts (turns 2 and 3, no idle between); per session,
    since how two independent sessions interleave is timing."""
    entries = load_transcript("07-concurrent-sessions.jsonl")
    frames = await run_replay(entries, paths)
    expected = per_session(transcript_items(entries))
    actual = per_session(items(frames, client_requests(entries), paths))
    assert sorted(expected, key=str) == sorted(actual, key=str)
    for session in expected:
        assert_same(expected[session], actual[session], what=f"07 session {session}")


def test_explain_names_the_difference() -> None:
    """The comparison helper says what is missing, extra or replaced, and where."""
    real = [("event", "s", "turn/start"), ("event", "s", "step/start"), ("status", "s", "idle")]
    simulated = [("event", "s", "turn/start"), ("event", "s", "step/end"), ("status", "s", "idle"), ("x", "s")]
    text = explain(real, simulated, what="demo")
    assert "after ('event', 's', 'turn/start'): the real runtime sent [('event', 's', 'step/start')]" in text
    assert "extra in the simulator after ('status', 's', 'idle'): [('x', 's')]" in text
    with pytest.raises(AssertionError, match="demo: the simulator's wire differs"):
        assert_same(real, simulated, what="demo")


def shape(value: Any) -> Any:
    """The structure of a JSON value: object keys (recursively) and scalar types, not values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__

"""``event_json``: a session.event's event sliced from its frame's bytes, never guessed. No trio."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from dsh_orchestra.protocol import SESSION_EVENT, event_json

TRANSCRIPTS = sorted((Path(__file__).parent / "transcripts").glob("*.jsonl"))


def session_events() -> list[dict[str, object]]:
    out = []
    for path in TRANSCRIPTS:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                frame = json.loads(line).get("frame")
                if isinstance(frame, dict) and frame.get("method") == SESSION_EVENT:
                    out.append(frame)
    return out


def test_every_transcript_event_slices_back_to_its_compact_json() -> None:
    frames = session_events()
    assert len(frames) > 100
    for frame in frames:
        raw = orjson.dumps(frame)  # compact, as the runtime writes it
        params = orjson.loads(raw)["params"]
        assert event_json(raw, params) == orjson.dumps(frame["params"]["event"])  # type: ignore[index]


def frame(session: object = "s1", event: object = None, **extra: object) -> tuple[bytes, dict[str, object]]:
    params = {"sessionId": session, "event": {"type": "x", "data": {"a": {}}} if event is None else event, **extra}
    raw = orjson.dumps({"jsonrpc": "2.0", "method": SESSION_EVENT, "params": params})
    return raw, orjson.loads(raw)["params"]


def test_the_slice_is_the_event_exactly() -> None:
    raw, params = frame('quote"d \\ é')
    assert event_json(raw, params) == b'{"type":"x","data":{"a":{}}}'


@pytest.mark.parametrize("raw", [
    b'{"jsonrpc":"2.0","method":"session.event","params":{"event":{"type":"x"},"sessionId":"s1"}}',  # member order
    b'{"jsonrpc": "2.0", "method": "session.event", "params": {"sessionId": "s1", "event": {"type": "x"}}}',  # spaces
    b'{"method":"session.event","jsonrpc":"2.0","params":{"sessionId":"s1","event":{"type":"x"}}}',
    b'{"jsonrpc":"2.0","method":"session.event","params":{"sessionId":"s1","event":{"type":"x"} }}',
    b'{"jsonrpc":"2.0","method":"session.event","params":{"sessionId":"s1","event":{"type":"x"}}}\r',
    b'{"jsonrpc":"2.0","method":"session.status","params":{"sessionId":"s1","event":{"type":"x"}}}',
])
def test_any_other_layout_gives_none(raw: bytes) -> None:
    params = orjson.loads(raw.strip())["params"]
    assert event_json(raw, params) is None


def test_params_that_are_not_exactly_a_session_and_an_event_give_none() -> None:
    assert event_json(*frame(extra={})) is None  # three members
    assert event_json(*frame(session=7)) is None
    raw, params = frame(event=[1, 2])
    assert event_json(raw, params) is None
    assert event_json(None, {"sessionId": "s1", "event": {}}) is None


def test_members_after_params_never_slice_to_valid_json() -> None:
    raw = b'{"jsonrpc":"2.0","method":"session.event","params":{"sessionId":"s1","event":{"type":"x"}},"x":{"a":{}}}'
    sliced = event_json(raw, {"sessionId": "s1", "event": {"type": "x"}})
    assert sliced is not None
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(sliced)

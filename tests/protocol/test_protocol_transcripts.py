"""The recorded real-runtime transcripts structure into the typed classes. No trio.

* every server-to-client notification structures into its typed params class, and no event
  of a type we model falls into ``UnknownEvent``;
* every successful response to a request we model structures into its result class;
* the client frames of the official client, re-encoded through our classes, come out
  byte-for-byte the same, and our output passes the strict (``forbid_extra_keys``) twin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_orchestra.protocol import (
    EVENT_CLASSES,
    NOTIFICATIONS,
    REQUESTS,
    SESSION_EVENT,
    SdkProtocolError,
    SessionEventParams,
    UnknownEvent,
    encode_frame,
    make_converter,
    request_frame,
    structure,
    unstructure,
)

TRANSCRIPTS = sorted((Path(__file__).parent / "transcripts").glob("*.jsonl"))
STRICT = make_converter(forbid_extra_keys=True)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def frames(direction: str) -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for path in TRANSCRIPTS:
        for index, record in enumerate(records(path)):
            if record["dir"] == direction and isinstance(record["frame"], dict):
                out.append((path.name, index, record["frame"]))
    return out


NOTIFICATION_FRAMES = [f for f in frames("s2c") if "method" in f[2] and "id" not in f[2]]


def test_the_transcripts_are_there() -> None:
    assert len(TRANSCRIPTS) == 8
    assert len(NOTIFICATION_FRAMES) > 250


@pytest.mark.parametrize(("name", "index", "frame"), NOTIFICATION_FRAMES, ids=lambda v: str(v)[:40])
def test_every_notification_structures_into_its_class(name: str, index: int, frame: dict[str, Any]) -> None:
    method = frame["method"]
    cls = NOTIFICATIONS[method]
    parsed = structure(frame["params"], cls, method=method)
    assert isinstance(parsed, cls)
    if method == SESSION_EVENT:
        assert isinstance(parsed, SessionEventParams)
        kind = frame["params"]["event"]["type"]
        assert kind in EVENT_CLASSES, f"{name}:{index}: event type {kind!r} is not modelled"
        assert not isinstance(parsed.event, UnknownEvent)
        assert type(parsed.event) is EVENT_CLASSES[kind]


def test_every_known_event_field_is_kept() -> None:
    """Re-encoding a typed event drops only fields we do not model, never a modelled one."""
    for name, index, frame in NOTIFICATION_FRAMES:
        if frame["method"] != SESSION_EVENT:
            continue
        parsed = structure(frame["params"], SessionEventParams, method=SESSION_EVENT)
        again = unstructure(parsed)
        assert again["sessionId"] == frame["params"]["sessionId"]
        assert _is_subset(again["event"], frame["params"]["event"]), f"{name}:{index}"


def _is_subset(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, dict):
        return isinstance(theirs, dict) and all(k in theirs and _is_subset(v, theirs[k]) for k, v in ours.items())
    if isinstance(ours, list):
        return isinstance(theirs, list) and len(ours) == len(theirs) and all(map(_is_subset, ours, theirs))
    return bool(ours == theirs and type(ours) is type(theirs) or (isinstance(ours, float) and ours == theirs))


def _requests() -> list[tuple[str, dict[str, Any]]]:
    return [(name, frame) for name, _, frame in frames("c2s") if frame.get("method") in REQUESTS and "id" in frame]


def test_every_successful_response_structures_into_its_result_class() -> None:
    checked = 0
    for path in TRANSCRIPTS:
        methods = {}
        for record in records(path):
            frame = record["frame"]
            if not isinstance(frame, dict):
                continue
            if record["dir"] == "c2s" and frame.get("method") in REQUESTS and frame.get("id") is not None:
                methods[frame["id"]] = frame["method"]
            elif record["dir"] == "s2c" and "result" in frame and frame.get("id") in methods:
                method = methods[frame["id"]]
                structure(frame["result"], REQUESTS[method][1], method=method, what="result")
                checked += 1
    assert checked > 40


def test_our_outgoing_frames_match_the_official_clients_byte_for_byte() -> None:
    """Client requests re-encoded through our params classes: same JSON, strict-clean."""
    rejected = []
    checked = 0
    for name, frame in _requests():
        method = frame["method"]
        params_cls = REQUESTS[method][0]
        raw = frame.get("params", {})
        try:
            params = structure(raw, params_cls, method=method)
        except SdkProtocolError:
            rejected.append((name, method))
            continue
        wire = unstructure(params)
        assert wire == raw, f"{name}: {method}"
        assert STRICT.structure(wire, params_cls) == params
        ours = encode_frame(request_frame(frame["id"], method, wire if "params" in frame else None))
        assert orjson.loads(ours) == frame
        checked += 1
    assert checked > 40
    # exactly the requests the recordings made invalid on purpose: working-directory/set
    # without a path (05); initialize without cwd / without model, session/wait without a
    # sessionId, session/prompt without contentBlocks (06)
    assert sorted(rejected) == [
        ("05-working-directory.jsonl", "session/working-directory/set"),
        ("06-errors.jsonl", "initialize"),
        ("06-errors.jsonl", "initialize"),
        ("06-errors.jsonl", "session/prompt"),
        ("06-errors.jsonl", "session/wait"),
    ]

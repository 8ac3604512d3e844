"""SseReader: events split at either separator, across chunks, in linear time; usage counting."""

from __future__ import annotations

import time

from dsh_orchestra.gateway._sse import COUNTED, SseReader, Usage, overloaded_event

FRAME = b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"' + b"x" * 64 + b'"}}\n\n'


def test_events_split_at_both_separators_and_across_chunks() -> None:
    reader = SseReader()
    events = reader.feed(b"event: a\r\ndata: {}\r\n\r\nevent: b\ndata: [1]\n")
    events += reader.feed(b"\nevent: error\ndata: {\"error\":{\"type\":\"overloaded_error\"}}\n\npart")
    assert [(e.name, e.data) for e in events][:2] == [("a", {}), ("b", [1])]
    assert overloaded_event(events[2]) and reader.pending == b"part"
    assert b"".join(e.raw for e in events) + reader.pending == (
        b"event: a\r\ndata: {}\r\n\r\nevent: b\ndata: [1]\n\nevent: error\ndata: {\"error\":{\"type\":\"overloaded_error\"}}\n\npart")


def test_a_large_stream_is_read_in_linear_time() -> None:
    data = FRAME * 16384  # 2.4 MB in one feed: was quadratic (minutes) before
    start = time.process_time()
    events = SseReader(COUNTED).feed(data)
    assert len(events) == 16384 and all(e.data is None for e in events)  # not a counted event: not decoded
    assert time.process_time() - start < 5.0


def test_usage_from_message_start_and_the_latest_message_delta() -> None:
    usage = Usage()
    for event in SseReader().feed(
        b'event: message_start\ndata: {"message":{"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
        b'event: message_delta\ndata: {"usage":{"output_tokens":4}}\n\n'
        b'event: message_delta\ndata: {"usage":{"output_tokens":9}}\n\n'
    ):
        usage.update(event)
    assert (usage.input_tokens, usage.output_tokens, usage.total) == (12, 9, 21)

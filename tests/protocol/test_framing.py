"""The sans-I/O line framer: chunking, blank lines, CRLF, bad lines, size limit. No trio."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_orchestra.protocol import (
    CLOSED,
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    FrameTooLargeError,
    LineFramer,
    SdkProtocolError,
    encode_frame,
)


def frames_fed(chunks: list[bytes], **options: Any) -> tuple[list[dict[str, Any]], int]:
    """Every frame decoded after feeding ``chunks`` one by one (calling frames() after each)."""
    framer = LineFramer(**options)
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        framer.receive_data(chunk)
        out.extend(framer.frames())
    return out, framer.ignored


def frames_via_feed(chunks: list[bytes]) -> tuple[list[dict[str, Any]], int]:
    """The same through the reader's ``feed()`` fast path."""
    framer = LineFramer()
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        out.extend(framer.feed(chunk))
    return out, framer.ignored


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(len(data), cut) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# ---- one line of every kind the stream can hold, with what the framer must make of it ----

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@st.composite
def lines(draw: st.DrawFn) -> tuple[bytes, dict[str, Any] | None, int]:
    """(line bytes without the newline, the frame it must yield or None, ignored count)."""
    kind = draw(st.sampled_from(["object", "object-crlf", "object-unicode", "blank", "whitespace",
                                 "non-object", "not-json", "bad-utf8"]))
    if kind.startswith("object"):
        value = draw(objects)
        if kind == "object-unicode":
            value = {**value, "text": draw(st.text(alphabet="é名🎉\u2028", min_size=1, max_size=6))}
        raw = json.dumps(value, ensure_ascii=False).encode()
        return (raw + b"\r" if kind == "object-crlf" else raw), value, 0
    if kind == "blank":
        return b"", None, 0
    if kind == "whitespace":
        return draw(st.sampled_from([b" ", b"\t", b"\r", b"  \r"])), None, 0
    if kind == "non-object":
        value = draw(st.one_of(json_scalars, st.lists(json_values, max_size=3)))
        return orjson.dumps(value), None, 1
    if kind == "not-json":
        return draw(st.sampled_from([b"hello", b"{", b'{"a":}', b"{'a': 1}", b"[1,", b"nul"])), None, 1
    return draw(st.sampled_from([b'{"a":"\xff"}', b"\xc3", b'{"\xe9":1}', b"\x80\x80"])), None, 1


@given(st.lists(lines(), max_size=12), st.lists(st.integers(0, 2000), max_size=12))
@settings(max_examples=300, deadline=None)
def test_any_chunking_gives_the_same_frames_and_ignored_count(
    stream: list[tuple[bytes, dict[str, Any] | None, int]], cuts: list[int]
) -> None:
    """However the bytes arrive, the same frames and the same count of ignored lines come out."""
    data = b"".join(line + b"\n" for line, _, _ in stream)
    expected = [frame for _, frame, _ in stream if frame is not None]
    expected_ignored = sum(ignored for _, _, ignored in stream)
    assert frames_fed([data]) == (expected, expected_ignored)
    chunks = split_at(data, cuts)
    assert frames_fed(chunks) == (expected, expected_ignored)
    assert frames_via_feed(chunks) == (expected, expected_ignored)
    assert frames_fed([data[i : i + 1] for i in range(len(data))]) == (expected, expected_ignored)


@pytest.mark.parametrize("data", [b'{"a":1}\n{"b":2}\n', b'{"a":1}\n{"unfinished', b'{"x":"\xc3\xa9"}\n'])
def test_chunking_does_not_change_the_lines(data: bytes) -> None:
    """Byte-by-byte delivery (a multi-byte character split in two included) changes nothing."""
    assert frames_fed([data]) == frames_fed([data[i : i + 1] for i in range(len(data))])


def test_several_frames_per_chunk_and_a_frame_across_chunks() -> None:
    framer = LineFramer()
    framer.receive_data(b'{"id":1}\n{"id":2}\n{"id"')
    assert framer.frames() == [{"id": 1}, {"id": 2}]
    assert framer.frames() == []
    framer.receive_data(b":3}\n")
    assert framer.frames() == [{"id": 3}]


def test_blank_lines_and_crlf_are_tolerated_and_not_counted() -> None:
    frames, ignored = frames_fed([b'\n\r\n  \n{"a":1}\r\n\n{"b":2}\n'])
    assert frames == [{"a": 1}, {"b": 2}]
    assert ignored == 0


def test_invalid_json_invalid_utf8_and_non_objects_are_ignored_and_counted() -> None:
    frames, ignored = frames_fed([b'nope\n{"a":"\xff"}\n[1,2]\n"text"\n3\nnull\n{"ok":true}\n'])
    assert frames == [{"ok": True}]
    assert ignored == 6


def test_a_line_longer_than_the_limit_raises_a_clear_error() -> None:
    framer = LineFramer(max_frame_size=10)
    framer.receive_data(b'{"a":"12345678"}\n')
    with pytest.raises(FrameTooLargeError, match=r"exceeds the maximum frame size of 10 bytes") as info:
        framer.frames()
    assert info.value.limit == 10 and info.value.size == 16
    assert "max_frame_size" in str(info.value)  # the remedy


def test_an_unfinished_line_past_the_limit_raises_before_its_newline() -> None:
    framer = LineFramer(max_frame_size=1000)
    for _ in range(5):
        framer.receive_data(b"x" * 150)
        assert framer.frames() == []
    framer.receive_data(b"x" * 300)
    with pytest.raises(FrameTooLargeError):
        framer.frames()


def test_a_frame_of_exactly_the_limit_passes() -> None:
    line = orjson.dumps({"a": "x" * 92})
    assert len(line) == 100
    assert frames_fed([line + b"\n"], max_frame_size=100) == ([{"a": "x" * 92}], 0)
    assert frames_fed([line[:50], line[50:] + b"\n"], max_frame_size=100)[0] == [{"a": "x" * 92}]


def test_the_limit_also_applies_through_feed_and_next_line() -> None:
    framer = LineFramer(max_frame_size=10)
    with pytest.raises(FrameTooLargeError):
        framer.feed(b'{"a":"12345678"}\n')
    framer = LineFramer(max_frame_size=10)
    framer.receive_data(b'{"a":"12345678"}\n')
    with pytest.raises(FrameTooLargeError):
        framer.next_line()


def test_the_default_limit_is_64_mib() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 64 * 1024 * 1024
    assert LineFramer().max_frame_size == DEFAULT_MAX_FRAME_SIZE
    with pytest.raises(ValueError, match="max_frame_size must be > 0"):
        LineFramer(max_frame_size=0)


def test_a_large_frame_in_many_small_chunks() -> None:
    """A 4 MiB frame in 4 KiB chunks arrives whole (and is not re-joined per chunk)."""
    frame = {"data": "A" * (4 * 1024 * 1024)}
    data = encode_frame(frame)
    framer = LineFramer()
    out: list[dict[str, Any]] = []
    for start in range(0, len(data), 4096):
        framer.receive_data(data[start : start + 4096])
        out.extend(framer.frames())
    assert out == [frame]


def test_next_line_need_data_closed_and_partial_line_at_eof() -> None:
    framer = LineFramer()
    assert framer.next_line() is NEED_DATA
    framer.receive_data(b"one\ntwo\nthr")
    assert framer.next_line() == b"one"
    assert framer.next_line() == b"two"
    assert framer.next_line() is NEED_DATA
    framer.receive_data(b"ee\n")
    assert framer.next_line() == b"three"
    framer.receive_data(b"")
    assert framer.eof
    assert framer.next_line() is CLOSED

    framer = LineFramer()
    framer.receive_data(b"partial")
    framer.receive_data(b"")
    with pytest.raises(SdkProtocolError, match="middle of a line"):
        framer.next_line()
    with pytest.raises(SdkProtocolError, match="middle of a line"):
        framer.check_closed()


def test_next_line_and_frames_share_one_buffer() -> None:
    framer = LineFramer()
    framer.receive_data(b'{"a":1}\n{"b":2}\n{"c":3}\n')
    assert framer.next_line() == b'{"a":1}'
    assert framer.frames() == [{"b": 2}, {"c": 3}]


def test_receive_data_after_eof_is_misuse() -> None:
    framer = LineFramer()
    framer.receive_data(b"")
    with pytest.raises(RuntimeError):
        framer.receive_data(b"x")


def test_bytearray_and_memoryview_chunks() -> None:
    assert frames_fed([bytearray(b'{"a":'), memoryview(b'1}\n')]) == ([{"a": 1}], 0)


def test_encode_frame_is_compact_json_with_one_newline() -> None:
    data = encode_frame({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"text": "é\n"}})
    assert data == b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"text":"\xc3\xa9\\n"}}\n'
    assert data.count(b"\n") == 1
    assert frames_fed([data]) == ([orjson.loads(data)], 0)

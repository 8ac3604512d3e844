"""The dataset file contract: every malformed input is reported with its line number, all at once,
before any work starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.batch import BatchItem, DatasetError, load_dataset


def problems_of(tmp_path: Path, data: bytes) -> list[tuple[int, str]]:
    path = tmp_path / "ds.jsonl"
    path.write_bytes(data)
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    assert str(path) in str(info.value) and "nothing was run" in str(info.value)
    return info.value.problems


GOOD = b'{"id": "ok", "prompt": "hello"}\n'


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"id": "a", "prompt": "x"', "not valid JSON"),
        (b"not json at all", "not valid JSON"),
        (b'{"id": "a", "prompt": "x"} trailing', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b'["id", "prompt"]', "expected a JSON object, not list"),
        (b'"a string"', "expected a JSON object, not str"),
        (b"42", "expected a JSON object, not int"),
        (b"null", "expected a JSON object, not NoneType"),
        (b'{"prompt": "x"}', "missing required field 'id'"),
        (b'{"id": 7, "prompt": "x"}', "'id' must be a non-empty string, not 7"),
        (b'{"id": null, "prompt": "x"}', "'id' must be a non-empty string, not None"),
        (b'{"id": "", "prompt": "x"}', "'id' must be a non-empty string, not ''"),
        (b'{"id": true, "prompt": "x"}', "'id' must be a non-empty string, not True"),
        (b'{"id": ["a"], "prompt": "x"}', "'id' must be a non-empty string"),
        (b'{"id": "a"}', "item 'a': missing required field 'prompt'"),
        (b'{"id": "a", "prompt": null}', "item 'a': 'prompt' must be a string or a non-empty list of content blocks"),
        (b'{"id": "a", "prompt": 3}', "'prompt' must be a string or a non-empty list"),
        (b'{"id": "a", "prompt": {"type": "text", "text": "x"}}', "'prompt' must be a string or a non-empty list"),
        (b'{"id": "a", "prompt": []}', "at least one content block"),
        (b'{"id": "a", "prompt": ["text"]}', "content block 0 must be an object"),
        (b'{"id": "a", "prompt": [{"text": "x"}]}', "content block 0 needs a string 'type'"),
        (b'{"id": "a", "prompt": [{"type": "text"}]}', "text block 0 needs a string 'text'"),
        (b'{"id": "a", "prompt": [{"type": "text", "text": "x"}, {"type": "image"}]}', "image block 1 needs base64"),
        (b'{"id": "a", "prompt": "x", "session_id": 5}', "'session_id' must be a non-empty string, not 5"),
        (b'{"id": "a", "prompt": "x", "session_id": ""}', "'session_id' must be a non-empty string, not ''"),
        (b'{"id": "a", "prompt": "x", "metadata": [1]}', "'metadata' must be an object, not list"),
        (b'{"id": "a", "prompt": "x", "metadata": "m"}', "'metadata' must be an object, not str"),
    ],
)
def test_malformed_line_is_reported_with_its_number(tmp_path: Path, line: bytes, expected: str) -> None:
    """One bad line between good ones: exactly that line is reported."""
    problems = problems_of(tmp_path, GOOD + line + b"\n" + b'{"id": "later", "prompt": "y"}\n')
    assert len(problems) == 1
    number, message = problems[0]
    assert number == 2
    assert expected in message


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, GOOD + b'{"id": "x", "prompt": "1"}\n' + GOOD)
    assert problems == [(3, "duplicate id 'ok' (first on line 1)")]


def test_every_problem_is_reported_at_once_with_true_line_numbers(tmp_path: Path) -> None:
    """Blank lines count for numbering; all problems are listed, not only the first."""
    data = b"\n".join([
        GOOD.strip(),
        b"",
        b"{broken",
        b'{"id": "b"}',
        b"   ",
        b'{"id": "ok", "prompt": "dup"}',
        b'{"prompt": "no id"}',
    ]) + b"\n"
    problems = problems_of(tmp_path, data)
    assert [n for n, _ in problems] == [3, 4, 6, 7]
    text = str(DatasetError("ds", problems))
    for number in (3, 4, 6, 7):
        assert f"line {number}:" in text


def test_many_problems_are_summarised(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, b"{bad\n" * 30)
    assert len(problems) == 30
    assert "and 10 more" in str(DatasetError("ds", problems))


@pytest.mark.parametrize("data", [b"", b"\n\n   \n"])
def test_empty_dataset_is_an_error(tmp_path: Path, data: bytes) -> None:
    assert problems_of(tmp_path, data) == [(1, "the dataset holds no items")]


def test_valid_dataset_fields(tmp_path: Path) -> None:
    """Strings and content blocks, session_id, metadata, CRLF endings, a last line without newline;
    unknown keys are returned (and ignored)."""
    path = tmp_path / "ds.jsonl"
    path.write_bytes(
        b'{"id": "a", "prompt": "hi", "metadata": {"k": [1, 2]}}\r\n'
        b'{"id": "b", "prompt": [{"type": "text", "text": "block"}], "session_id": "s-b", "extra": 1}\n'
        b'{"id": "c", "prompt": "x", "metadata": null}'
    )
    items, unknown = load_dataset(path)
    assert [(i.id, i.line) for i in items] == [("a", 1), ("b", 2), ("c", 3)]
    assert items[0].metadata == {"k": [1, 2]} and items[0].session_id is None
    assert items[1].prompt == [{"type": "text", "text": "block"}] and items[1].session_id == "s-b"
    assert items[2].metadata == {}
    assert unknown == ["extra"]


def test_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_dataset(tmp_path / "absent.jsonl")


def test_check_then_stream(tmp_path: Path) -> None:
    """A batch validates everything first, keeping only ids, then streams the items of its shard."""
    from dsh_orchestra.batch import check_dataset, in_shard, iter_dataset

    path = tmp_path / "ds.jsonl"
    path.write_bytes(b"".join(b'{"id": "i%d", "prompt": "p%d", "x": 1}\n\n' % (n, n) for n in range(30)))
    check = check_dataset(path, (1, 3))
    assert check.items == 30 and check.unknown == ("x",)
    assert check.ids == {f"i{n}" for n in range(30) if in_shard(f"i{n}", (1, 3))}
    streamed = list(iter_dataset(check, skip={"i4"}))
    assert [i.id for i in streamed] == [f"i{n}" for n in range(30) if f"i{n}" in check.ids and n != 4]
    assert all(i.line == int(i.id[1:]) * 2 + 1 for i in streamed)
    with pytest.raises(DatasetError, match="line 2: duplicate id"):
        path.write_bytes(b'{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
        check_dataset(path)


def test_dataset_changed_after_the_check_is_refused(tmp_path: Path) -> None:
    from dsh_orchestra.batch import check_dataset, iter_dataset

    path = tmp_path / "ds.jsonl"
    path.write_bytes(b'{"id": "a", "prompt": "x"}\n')
    check = check_dataset(path)
    path.write_bytes(b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n')
    with pytest.raises(DatasetError, match="changed after it was checked"):
        list(iter_dataset(check))


def test_dataset_from_a_pipe(tmp_path: Path) -> None:
    """A FIFO can be read only once: its content is kept for the second pass."""
    import os
    import threading

    from dsh_orchestra.batch import check_dataset, iter_dataset

    fifo = tmp_path / "ds.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as handle:
            handle.write(b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n')

    writer = threading.Thread(target=feed)
    writer.start()
    check = check_dataset(fifo)
    writer.join()
    assert [i.id for i in iter_dataset(check)] == ["a", "b"]


def test_every_problem_of_a_line_is_reported_at_once(tmp_path: Path) -> None:
    """The converter checks every field: one line, each bad field named (file order of fields)."""
    line = b'{"id": "a", "prompt": null, "session_id": "", "target": 5, "choices": "abc"}'
    problems = problems_of(tmp_path, GOOD + line + b"\n")
    assert problems == [(2, "item 'a': 'prompt' must be a string or a non-empty list of content blocks (a prompt is a "
                            "string or a list of content blocks, not NoneType); 'session_id' must be a non-empty string, "
                            "not ''; 'target' must be a string or a non-empty list of strings, not 5; 'choices' must be "
                            "a list of strings, not 'abc'")]


@pytest.mark.parametrize("raw", [
    {"id": "a", "prompt": "x"},
    {"id": "a", "prompt": "x", "metadata": None, "target": None, "choices": None, "session_id": None},
    {"id": "a", "prompt": "x", "metadata": {"k": [1]}, "target": "t", "choices": ["p", "q"], "session_id": "s"},
    {"id": "a", "prompt": "x", "target": ["t", "u"], "choices": []},
    {"id": "a", "prompt": [{"type": "text", "text": "x"}], "extra": 1},
])
def test_the_fast_path_and_the_converter_build_the_same_item(raw: dict[str, Any]) -> None:
    from dsh_orchestra.batch._dataset import _CONVERTER, _check_item

    item, problem, _ = _check_item(raw)
    assert problem is None and item == _CONVERTER.structure(raw, BatchItem)

"""The runs a viewer shows: results files found from the paths given (a file, or a folder
searched for them), each with the files of its run.

A run's summary is the JSON whose ``results`` names its results file (the batch writes the
absolute path); the summary's ``run`` object names the dataset, the transcripts directory and
the audit log (absolute, or relative to the results file, then to the summary). A run is live
while its batch holds the results file (the lock note ``<results>.lock`` names a live pid).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import orjson
import trio

from ._index import ResultsIndex, id_key

MAX_SCAN_FILES = 20_000  # files looked at under one folder
SNIFF = 64 << 10  # bytes read to tell a results file or a summary from another file


class ViewInputError(ValueError):
    """A path given to the viewer is unusable; the message says what to fix."""


def _first_line(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF)
    except OSError:
        return b""
    return head.split(b"\n", 1)[0]


def is_results_file(path: Path) -> bool:
    """An empty file named .jsonl, or one whose first line is a result object (``id`` and ``status``)."""
    if path.suffix != ".jsonl":
        return False
    line = _first_line(path)
    if not line.strip():
        return path.stat().st_size == 0
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and isinstance(value.get("id"), str) and isinstance(value.get("status"), str)


def _summary_of(path: Path) -> dict[str, Any] | None:
    if path.suffix != ".json" or path.stat().st_size > 64 << 20:
        return None
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if isinstance(value, dict) and isinstance(value.get("results"), str) and isinstance(value.get("total"), int):
        return value
    return None


WORKFLOW_STATUSES = ("ok", "failed", "cancelled", "interrupted")


def workflow_result(path: Path) -> dict[str, Any] | None:
    """The workflow result a JSON file holds (``WorkflowResult.to_json()``, what ``dsh-orchestra
    run`` prints as JSON), else None."""
    if path.suffix != ".json":
        return None
    try:
        if path.stat().st_size > 64 << 20:
            return None
        with open(path, "rb") as handle:
            if b'"steps"' not in handle.read(SNIFF) and path.stat().st_size <= SNIFF:
                return None
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if (isinstance(value, dict) and isinstance(value.get("name"), str) and value.get("status") in WORKFLOW_STATUSES
            and isinstance(value.get("steps"), dict) and "results" not in value):
        return value
    return None


def _walk(folder: Path) -> Iterator[Path]:
    seen = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            seen += 1
            if seen > MAX_SCAN_FILES:
                return
            yield Path(root) / name


def discover(paths: list[Path], workflows: list[Path] | None = None) -> tuple[list[Path], dict[str, tuple[Path, dict[str, Any]]]]:
    """The results files under ``paths`` and the summaries found beside them (by the absolute
    results path they name); the workflow results found go to ``workflows``.

    Raises:
        ViewInputError: a path does not exist, or a file given is neither a results file nor a
            workflow result.
    """
    results: list[Path] = []
    summaries: dict[str, tuple[Path, dict[str, Any]]] = {}
    found_workflows: list[Path] = []
    for path in paths:
        if not path.exists():
            raise ViewInputError(f"{str(path)!r} does not exist; give a results file of `dsh-orchestra batch` or a folder holding them")
        if path.is_file() and path.suffix == ".json" and workflow_result(path) is not None:
            found_workflows.append(path.resolve())
            continue
        if path.is_file():
            if not is_results_file(path):
                raise ViewInputError(f"{str(path)!r} is not a results file (JSON Lines of `dsh-orchestra batch` whose lines have 'id' and "
                                     "'status') nor a workflow result (WorkflowResult.to_json(): what `dsh-orchestra run` prints as JSON)")
            results.append(path.resolve())
            for candidate in _walk(path.parent) if path.parent != path else ():
                if candidate.parent == path.parent and candidate.suffix == ".json":
                    _note_summary(candidate, summaries)
            continue
        for candidate in _walk(path):
            if candidate.suffix == ".jsonl" and is_results_file(candidate):
                results.append(candidate.resolve())
            elif candidate.suffix == ".json":
                if not _note_summary(candidate, summaries) and workflow_result(candidate) is not None:
                    found_workflows.append(candidate.resolve())
    if workflows is not None:
        workflows.extend(dict.fromkeys(found_workflows))
    unique = list(dict.fromkeys(results))
    return unique, summaries


def _note_summary(path: Path, summaries: dict[str, tuple[Path, dict[str, Any]]]) -> bool:
    summary = _summary_of(path)
    if summary is None:
        return False
    named = Path(summary["results"])
    if not named.is_absolute():
        named = path.parent / named
    summaries[str(named.resolve())] = (path.resolve(), summary)
    return True


def resolve(name: Any, *bases: Path) -> Path | None:
    """A path a summary records: absolute, or relative to each base in turn; None when missing."""
    if not isinstance(name, str) or not name:
        return None
    if Path(name).is_absolute():
        return Path(name) if Path(name).exists() else None
    for base in bases:
        if (base / name).exists():
            return (base / name).resolve()
    return None


def live_holder(results: Path) -> dict[str, Any] | None:
    """The lock note of the batch writing ``results`` while its pid lives, else None."""
    note = Path(os.path.realpath(results) + ".lock")
    try:
        holder = orjson.loads(note.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    pid = holder.get("pid") if isinstance(holder, dict) else None
    if not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return dict(holder)


class DatasetIndex:
    """Where each item of a dataset is (sorted id keys and byte offsets): its prompt, target
    and choices read on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        keys, offsets = [], []
        position = 0
        with open(path, "rb") as handle:
            for raw in handle:
                if raw.strip():
                    try:
                        value = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        value = None
                    if isinstance(value, dict) and isinstance(value.get("id"), str):
                        keys.append(id_key(value["id"]))
                        offsets.append(position)
                position += len(raw)
        order = np.argsort(np.array(keys, dtype=np.int64), kind="stable")
        self.keys = np.array(keys, dtype=np.int64)[order]
        self.offsets = np.array(offsets, dtype=np.int64)[order]

    def items(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The dataset objects of these ids (those found)."""
        out: dict[str, dict[str, Any]] = {}
        with open(self.path, "rb") as handle:
            for item_id in ids:
                key = id_key(item_id)
                at = int(np.searchsorted(self.keys, key))
                while at < len(self.keys) and self.keys[at] == key:
                    handle.seek(int(self.offsets[at]))
                    value = orjson.loads(handle.readline())
                    if isinstance(value, dict) and value.get("id") == item_id:
                        out[item_id] = value
                        break
                    at += 1
        return out

    def search(self, needle: str) -> set[int]:
        """Id keys of the items whose prompt holds ``needle`` (any case)."""
        from ..report import prompt_text

        lowered = needle.lower()
        found: set[int] = set()
        with open(self.path, "rb") as handle:
            for raw in handle:
                if lowered.encode("utf-8") not in raw.lower() and lowered.isascii() and lowered.isalnum():
                    continue
                try:
                    value = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(value, dict) and isinstance(value.get("id"), str) and lowered in prompt_text(value.get("prompt")).lower():
                    found.add(id_key(value["id"]))
        return found


class Run:
    """One results file and what belongs to it."""

    def __init__(self, number: int, results: Path) -> None:
        self.number = number
        self.results = results
        self.index = ResultsIndex(results)
        self.cache: dict[str, Any] = {}
        self.summary_path: Path | None = None
        self.summary: dict[str, Any] | None = None
        self._dataset: DatasetIndex | None = None
        self._dataset_path: Path | None = None
        self.problem: str | None = None
        self.busy = False  # the viewer's background task is indexing it (in a worker thread)
        self.ready = trio.Event()  # set once its first lines are indexed

    def attach_summary(self, path: Path, summary: dict[str, Any]) -> None:
        self.summary_path, self.summary = path, summary

    @property
    def run_info(self) -> dict[str, Any]:
        run = self.summary.get("run") if self.summary else None
        return run if isinstance(run, dict) else {}

    def _bases(self) -> list[Path]:
        bases = [self.results.parent]
        if self.summary_path is not None:
            bases.append(self.summary_path.parent)
        return bases

    @property
    def dataset_path(self) -> Path | None:
        dataset = self.run_info.get("dataset")
        return resolve(dataset.get("path") if isinstance(dataset, dict) else None, *self._bases())

    @property
    def transcripts(self) -> Path | None:
        found = resolve(self.run_info.get("transcripts"), *self._bases())
        return found if found is not None and found.is_dir() else None

    @property
    def audit(self) -> Path | None:
        return resolve(self.run_info.get("audit"), *self._bases())

    def dataset(self) -> DatasetIndex | None:
        """The dataset's index (built at the first call), None without a dataset."""
        path = self.dataset_path
        if path is None:
            return None
        if self._dataset is None or self._dataset_path != path:
            self._dataset, self._dataset_path = DatasetIndex(path), path
        return self._dataset

    def live(self) -> dict[str, Any] | None:
        return live_holder(self.results)

"""The checkpoint journal: one SQLite file in WAL mode that a run writes as its work completes.

Why SQLite (stdlib ``sqlite3``) in WAL mode rather than an append-only file: a commit is atomic
(an item's record and its step's record land together or not at all, so there is no torn last
record to detect and skip), a key written again replaces its row (a retried item, a re-answered
interrupt or a second resume do not grow the file), the resume reads are indexed look-ups, and
compaction is a transaction plus VACUUM on the same file. With ``synchronous=NORMAL`` a commit
is in the WAL (in the OS page cache) when ``commit`` returns, so a SIGKILL at any instant loses
nothing committed; only an OS crash or power cut can drop the last commits (never corrupting
the file: those steps simply run again). ``synchronous=FULL`` would fsync every record, tens of
times slower (7.1 ms against 0.13 ms per commit on the shared test machine, docs/benchmarks.md).

Tables: ``meta`` (format, workflow name, inputs digest), ``steps`` (one row per step path:
fingerprint, status, timings, inputs by reference), ``items`` (one row per completed item:
its ItemResult as JSON, the output stored here once), ``interrupts`` (id, question, choices,
answer), ``sessions`` (named sessions' ids), ``result`` (a compacted run's final result).
Pure data access: no trio.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable

import attrs
import orjson

from .._params import Param, ParamError

FORMAT = "dsh-orchestra-checkpoint/1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    path TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, status TEXT NOT NULL, record BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    path TEXT NOT NULL, idx INTEGER NOT NULL, fingerprint TEXT NOT NULL, record BLOB NOT NULL,
    PRIMARY KEY (path, idx)
);
CREATE TABLE IF NOT EXISTS interrupts (
    id TEXT PRIMARY KEY, question TEXT NOT NULL, choices BLOB NOT NULL, answer TEXT
);
CREATE TABLE IF NOT EXISTS sessions (name TEXT PRIMARY KEY, session_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS result (id INTEGER PRIMARY KEY CHECK (id = 1), record BLOB NOT NULL);
"""

PLAIN = -1
"""The ``items.idx`` of a step that does not fan out."""


class CheckpointError(ParamError, ValueError):
    """The checkpoint cannot be used as asked; ``.param`` (also ``.parameter``) names the
    argument to fix (``checkpoint``, ``resume`` or ``inputs``), first in the message.

    ``CheckpointError(text, parameter=name)`` says ``<name>: <text>``; the CLI spells the name
    as its flag. ``CheckpointError(*parts)`` is any ``ParamError`` message.
    """

    def __init__(self, *parts: str | Param, parameter: str | None = None) -> None:
        if parameter is not None or (len(parts) == 1 and isinstance(parts[0], str)):
            parts = (Param(parameter or "checkpoint", spelled=parameter or "checkpoint"), ": ", *parts)
        super().__init__(*parts)

    @property
    def parameter(self) -> str:
        """The argument to fix (the same as ``.param``)."""
        return self.param or "checkpoint"

    @property
    def reason(self) -> str:
        """The message without the parameter it starts with."""
        parts = self.parts[2:] if len(self.parts) > 2 and self.parts[1] == ": " else self.parts
        return "".join(part if isinstance(part, str) else part.python() for part in parts)


@attrs.frozen(kw_only=True)
class StepRecord:
    """A step's row: what the run recorded when the step settled."""

    path: str
    fingerprint: str
    status: str
    record: dict[str, Any]


def expand_item(raw: dict[str, Any]) -> dict[str, Any]:
    """An item row as ItemResult JSON (the engine stores an untyped prompt step's final
    response once, as its output; fields left out take their defaults)."""
    out = {k: v for k, v in raw.items() if k != "final_response_is_output"}
    if raw.get("final_response_is_output"):
        out["final_response"] = raw.get("output")
    return out


def encode(value: Any) -> bytes:
    """Compact JSON (orjson). Raises TypeError for a value JSON cannot hold."""
    return orjson.dumps(value)


class Journal:
    """An open checkpoint file. ``Journal.open(path, workflow=..., resume=...)`` opens one."""

    def __init__(self, path: Path, connection: sqlite3.Connection) -> None:
        self.path = path
        self._db = connection
        self.steps: dict[str, StepRecord] = {}
        self.items: dict[str, dict[int, tuple[str, dict[str, Any]]]] = {}
        self.answers: dict[str, tuple[str, str | None]] = {}  # id -> (question, answer or None)
        self.choices: dict[str, tuple[str, ...]] = {}
        self.sessions: dict[str, str] = {}
        self.compacted: dict[str, Any] | None = None
        self.definition: dict[str, str] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, workflow: str, inputs_digest: str, resume: bool) -> Journal:
        """Create a checkpoint (``resume=False``) or open one to continue it (``resume=True``).

        Raises:
            CheckpointError: a new checkpoint's file exists already (nothing is overwritten),
                there is none to resume, it is not a checkpoint, or it belongs to another
                workflow or other inputs.
        """
        file = Path(path)
        exists = file.exists()
        if exists and not resume:
            raise CheckpointError(
                f"checkpoint {str(file)!r} exists already; resume it, or choose another path (nothing was overwritten)",
                parameter="resume",
            )
        if not exists and resume:
            raise CheckpointError(f"there is no checkpoint at {str(file)!r} to resume", parameter="checkpoint")
        if not file.parent.is_dir():
            raise CheckpointError(f"the directory of checkpoint {str(file)!r} does not exist")
        try:
            db = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            if exists and db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,):
                exists = False  # created by a run killed before its first commit: start it afresh
            if not exists:
                with db:
                    db.executescript(_SCHEMA)
                    db.executemany(
                        "INSERT INTO meta VALUES (?, ?)",
                        [("format", FORMAT), ("workflow", workflow), ("inputs", inputs_digest)],
                    )
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise CheckpointError(f"{str(file)!r} is not a checkpoint file: {exc}") from exc
        journal = cls(file, db)
        try:
            if meta.get("format") != FORMAT:
                raise CheckpointError(f"{str(file)!r} is not a checkpoint of this version (format {meta.get('format')!r})")
            if meta["workflow"] != workflow:
                raise CheckpointError(
                    f"checkpoint {str(file)!r} belongs to workflow {meta['workflow']!r}, not {workflow!r}"
                )
            if meta["inputs"] != inputs_digest:
                raise CheckpointError(
                    f"checkpoint {str(file)!r} was written with other workflow inputs; resume with the same "
                    "inputs, or start a new checkpoint", parameter="inputs",
                )
            journal._load()
        except BaseException:
            db.close()
            raise
        return journal

    def _load(self) -> None:
        db = self._db
        row = db.execute("SELECT record FROM result WHERE id = 1").fetchone()
        if row is not None:  # compacted: the rows live in the final result
            self.compacted = orjson.loads(row[0])
            for path, step in self.compacted["result"]["steps"].items():
                fingerprint = self.compacted["fingerprints"].get(path, "")
                record = {k: step[k] for k in ("name", "attempts", "started_s", "duration_s", "reason", "errors") if k in step}
                if step["status"] != "ok":
                    record["items"] = step["items"]
                self.steps[path] = StepRecord(path=path, fingerprint=fingerprint, status=step["status"], record=record)
                if step["status"] == "ok":
                    self.items[path] = {
                        PLAIN if item["index"] is None else item["index"]: (fingerprint, item) for item in step["items"]
                    }
        for path, fingerprint, status, record in db.execute("SELECT path, fingerprint, status, record FROM steps"):
            self.steps[path] = StepRecord(path=path, fingerprint=fingerprint, status=status, record=orjson.loads(record))
        for path, idx, fingerprint, record in db.execute("SELECT path, idx, fingerprint, record FROM items"):
            self.items.setdefault(path, {})[idx] = (fingerprint, orjson.loads(record))
        for id_, question, choices, answer in db.execute("SELECT id, question, choices, answer FROM interrupts"):
            self.answers[id_] = (question, answer)
            self.choices[id_] = tuple(orjson.loads(choices))
        self.sessions = dict(db.execute("SELECT name, session_id FROM sessions").fetchall())
        row = db.execute("SELECT value FROM meta WHERE key = 'definition'").fetchone()
        self.definition = orjson.loads(row[0]) if row is not None else {}

    # ---- writes (each one transaction) --------------------------------------------------

    def put_item(self, path: str, index: int | None, fingerprint: str, record: bytes) -> None:
        """Record one completed item (its ItemResult as encoded JSON)."""
        idx = PLAIN if index is None else index
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)", (path, idx, fingerprint, record))
        self.items.setdefault(path, {})[idx] = (fingerprint, orjson.loads(record))

    def put_step(self, path: str, fingerprint: str, status: str, record: dict[str, Any]) -> None:
        """Record a settled step (its own fields; its items are rows of their own)."""
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?)", (path, fingerprint, status, encode(record)))
        self.steps[path] = StepRecord(path=path, fingerprint=fingerprint, status=status, record=record)

    def discard(self, path: str) -> None:
        """Forget a step that changed: its rows, its items' and its subworkflows' (``path/...``, ``path[i]/...``)."""
        like = [path, f"{_escape(path)}/%", f"{_escape(path)}[%"]
        with self._db:
            for table in ("steps", "items"):
                self._db.execute(
                    f"DELETE FROM {table} WHERE path = ? OR path LIKE ? ESCAPE '\\' OR path LIKE ? ESCAPE '\\'", like
                )
        for table_rows in (self.steps, self.items):
            for key in [k for k in table_rows if k == path or k.startswith((f"{path}/", f"{path}["))]:
                del table_rows[key]

    def put_interrupt(self, id: str, question: str, choices: Iterable[str], answer: str | None) -> None:
        """Record an interrupt, pending (``answer`` None) or answered."""
        choices = tuple(choices)
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO interrupts VALUES (?, ?, ?, ?)", (id, question, encode(choices), answer))
        self.answers[id] = (question, answer)
        self.choices[id] = choices

    def put_session(self, name: str, session_id: str) -> None:
        """Record the runtime session id of a named session."""
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?)", (name, session_id))
        self.sessions[name] = session_id

    def pending(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """The interrupts still unanswered: (id, question, choices), by id."""
        return sorted((id_, q, self.choices[id_]) for id_, (q, a) in self.answers.items() if a is None)

    def put_definition(self, fingerprints: dict[str, str]) -> None:
        """Record the fingerprint of every step of the workflow as this run defines it."""
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('definition', ?)", (encode(fingerprints).decode(),))
        self.definition = dict(fingerprints)

    def put_final(self, result: dict[str, Any]) -> None:
        """Record how the run ended: the WorkflowResult's own fields (its steps are rows already)."""
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('final', ?)", (encode(result).decode(),))

    def final_result(self) -> dict[str, Any]:
        """The finished run's WorkflowResult as JSON, rebuilt from the rows (outputs as plain JSON).

        Raises:
            CheckpointError: the run has not finished, or ended with interrupts pending.
        """
        if self.compacted is not None:
            kept: dict[str, Any] = {k: v for k, v in self.compacted["result"].items() if k != "steps"}
            kept["steps"] = {path: self.step_json(path) for path in self.compacted["result"]["steps"]}
            return kept
        row = self._db.execute("SELECT value FROM meta WHERE key = 'final'").fetchone()
        if row is None:
            raise CheckpointError(f"the run in checkpoint {str(self.path)!r} has not finished; resume it first")
        final: dict[str, Any] = orjson.loads(row[0])
        if final.get("pending"):
            ids = ", ".join(p["id"] for p in final["pending"])
            raise CheckpointError(f"the run in checkpoint {str(self.path)!r} waits for answers ({ids}); resume it first")
        final["steps"] = {path: self.step_json(path) for path in final.pop("paths")}
        return final

    def step_json(self, path: str) -> dict[str, Any]:
        """One step's StepResult as JSON, from its row and its items' rows."""
        row = self.steps[path]
        rows = self.items.get(path, {})
        items = [expand_item(rows[i][1]) for i in sorted(rows)]
        plain = PLAIN in rows
        status = row.status
        ok = status == "ok"
        return {
            "name": path.rsplit("/", 1)[-1],
            "status": status,
            "output": (items[0]["output"] if plain else [i["output"] for i in items]) if ok and items else None,
            "items": items if ok else row.record.get("items", []),
            "approvals": [a for i in items for a in i.get("approvals", [])],
            "subagents": [s for i in items for s in i.get("subagents", [])],
            "subagent_outputs": [o for i in items for o in i.get("subagent_outputs", [])],
            **{k: v for k, v in row.record.items() if k != "items"},
        }

    def compact(self) -> tuple[int, int]:
        """Replace every row by the finished run's final result and shrink the file.

        Returns (bytes before, bytes after). Resuming a compacted checkpoint reuses every
        unchanged step from the result.

        Raises:
            CheckpointError: the run has not finished (or waits for answers).
        """
        before = size_of(self.path)
        result = self.final_result()
        derived = ("output", "approvals", "subagents", "subagent_outputs")  # rebuilt from the items
        result["steps"] = {
            path: {k: v for k, v in step.items() if k not in derived} for path, step in result["steps"].items()
        }
        for path, step in result["steps"].items():  # the items as stored: each output once
            if step["status"] == "ok" and path in self.items:
                step["items"] = [self.items[path][i][1] for i in sorted(self.items[path])]
        fingerprints = {path: row.fingerprint for path, row in self.steps.items()}
        with self._db:
            for table in ("steps", "items", "interrupts", "sessions", "result"):
                self._db.execute(f"DELETE FROM {table}")
            self._db.execute("DELETE FROM meta WHERE key = 'final'")
            self._db.execute(
                "INSERT INTO result VALUES (1, ?)", (encode({"result": result, "fingerprints": fingerprints}),)
            )
        self._db.execute("VACUUM")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return before, size_of(self.path)

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:  # pragma: no cover (closing anyway)
            pass
        self._db.close()


def compact_checkpoint(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Compact the checkpoint of a finished run to its final result: (bytes before, bytes after).

    Raises:
        CheckpointError: no checkpoint there, not a checkpoint, or the run has not finished.
    """
    file = Path(path)
    if not file.is_file():
        raise CheckpointError(f"there is no checkpoint at {str(file)!r}")
    try:
        db = sqlite3.connect(file, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise CheckpointError(f"{str(file)!r} is not a checkpoint file: {exc}") from exc
    journal = Journal(file, db)
    try:
        if meta.get("format") != FORMAT:
            raise CheckpointError(f"{str(file)!r} is not a checkpoint of this version (format {meta.get('format')!r})")
        journal._load()
        return journal.compact()
    finally:
        journal.close()


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def size_of(path: str | os.PathLike[str]) -> int:
    """Bytes on disk of a checkpoint: the file and its write-ahead log (the ``-shm`` index is
    a fixed-size scratch file SQLite rebuilds, not data)."""
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += os.path.getsize(f"{os.fspath(path)}{suffix}")
        except FileNotFoundError:
            pass
    return total

"""ResponseCache: model answers stored as their full SSE stream, in one SQLite file (WAL).

Owns the cache key (a hash of the request body in canonical form, volatile fields left out,
plus the epoch), the store and its counters. SQLite makes every write one transaction (a torn
write leaves no entry) and lets several processes share the file; each entry also keeps the
SHA-256 of its stream, checked on every read, so a damaged entry is a miss, never a bad hit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Final

import attrs
import trio

VOLATILE_FIELDS: Final = ("dsh_session_log", "dsh_plugin_packages", "metadata")
"""Top-level request fields left out of the cache key: the DeepSeek session-log and plugin
extensions (session ids, times, event ids of this run) and ``metadata`` (the user id)."""
VOLATILE_IDS: Final = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\bitem-[0-9a-f]{24}\b")
"""Ids that differ between identical runs inside the messages: subagent session UUIDs ("started
subagent <uuid>", "Background subagent <uuid> finished") and the batch's own session ids
("Your parent agent id is "item-..."); each is replaced by its order of first appearance."""
FILE_NAME: Final = "responses.sqlite3"
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY, body BLOB NOT NULL, digest TEXT NOT NULL, headers TEXT NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, created REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0, last_used REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class CacheError(OSError):
    """The cache directory cannot be used (unwritable, or its file is not a cache)."""


def cache_key(body: dict[str, Any], *, epoch: int | None) -> str:
    """SHA-256 of ``body`` without ``VOLATILE_FIELDS``, keys sorted, plus ``epoch`` (None: shared)."""
    kept = {k: v for k, v in body.items() if k not in VOLATILE_FIELDS}
    canonical = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    seen: dict[str, str] = {}
    canonical = VOLATILE_IDS.sub(lambda m: seen.setdefault(m.group(0), f"<id{len(seen) + 1}>"), canonical)
    salt = "shared" if epoch is None else f"epoch={epoch}"
    return hashlib.sha256(f"{salt}\n{canonical}".encode()).hexdigest()


@attrs.frozen
class Entry:
    """A stored answer: the SSE ``body`` as received, its response headers and usage."""

    body: bytes
    headers: list[tuple[str, str]]
    input_tokens: int
    output_tokens: int


class ResponseCache:
    """The SQLite store at ``DIR/responses.sqlite3``; blocking calls, run them in a thread."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise CacheError(f"the cache {str(self.path)!r} cannot be used: {exc}") from None
        except OSError as exc:
            raise CacheError(f"the cache directory {str(self.directory)!r} cannot be used: {exc.strerror or exc}") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, key: str) -> Entry | None:
        """The entry under ``key`` (its hit counted), or None (a damaged one counts as none)."""
        with self._lock:
            row = self._db.execute("SELECT body, digest, headers, input_tokens, output_tokens FROM entries WHERE key = ?",
                                   (key,)).fetchone()
            if row is None or hashlib.sha256(row[0]).hexdigest() != row[1]:
                self._count("misses")
                return None
            self._db.execute("UPDATE entries SET hits = hits + 1, last_used = ? WHERE key = ?", (time.time(), key))
            self._count("hits")
            return Entry(body=row[0], headers=[tuple(h) for h in json.loads(row[2])], input_tokens=row[3],
                         output_tokens=row[4])

    def put(self, key: str, entry: Entry) -> None:
        """Store ``entry`` under ``key`` in one transaction (replacing any older one)."""
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO entries (key, body, digest, headers, input_tokens, output_tokens, created, last_used)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, entry.body, hashlib.sha256(entry.body).hexdigest(), json.dumps(entry.headers), entry.input_tokens,
                 entry.output_tokens, now, now))
            self._count("stores")

    def _count(self, name: str) -> None:
        self._db.execute("INSERT INTO counters (name, value) VALUES (?, 1) "
                         "ON CONFLICT(name) DO UPDATE SET value = value + 1", (name,))

    def stats(self) -> dict[str, Any]:
        """Entries, bytes, hits, misses, hit rate and the tokens the stored answers cost."""
        with self._lock:
            entries, size, tokens, served = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0), COALESCE(SUM(input_tokens + output_tokens), 0),"
                " COALESCE(SUM(hits), 0) FROM entries").fetchone()
            counters = dict(self._db.execute("SELECT name, value FROM counters").fetchall())
        hits, misses = counters.get("hits", 0), counters.get("misses", 0)
        return {"path": str(self.path), "entries": entries, "bytes": size, "file_bytes": _file_size(self.path),
                "hits": hits, "misses": misses, "hit_rate": hits / (hits + misses) if hits + misses else None,
                "stores": counters.get("stores", 0), "stored_tokens": tokens, "entry_hits": served}

    def prune(self, *, older_than: float | None = None, unused: bool = False) -> int:
        """Remove entries created more than ``older_than`` seconds ago (None: any age), or, with
        ``unused``, only those never hit; returns how many went. Then compacts the file."""
        clauses, params = [], []
        if older_than is not None:
            clauses.append("created < ?")
            params.append(time.time() - older_than)
        if unused:
            clauses.append("hits = 0")
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        with self._lock:
            removed = self._db.execute(f"DELETE FROM entries{where}", params).rowcount
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.execute("VACUUM")
        return int(removed)

    async def aget(self, key: str) -> Entry | None:
        return await trio.to_thread.run_sync(self.get, key)

    async def aput(self, key: str, entry: Entry) -> None:
        await trio.to_thread.run_sync(self.put, key, entry)


def _file_size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())

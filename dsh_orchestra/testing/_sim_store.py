"""Persistence of simulated sessions: one JSON snapshot per session in a store directory.

Owns the session record (what survives a restart of the simulator), the escaping of session
ids into file names (as the real runtime does: ``a/b`` and ``名前`` are legal ids), atomic
snapshot writes, and the owner marks that stop two live simulators from opening one session.
Does blocking file I/O on small files and nothing else; imports nothing from dsh_orchestra.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path
from typing import Any, Final

import attrs
import orjson

from .._scratch import pid_alive
from ..protocol import SessionOwnedError, known_message

FORMAT_VERSION: Final = 1
NAME_MAX: Final = 255  # bytes of one file name on the usual file systems
_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_SUFFIX: Final = ".json"
_OWNER_SUFFIX: Final = ".owner"

# Owner marks held by simulators of this process: mark path -> token of the holder. A mark
# file names a pid; for our own pid this table says whether it is really held (a simulator
# that crashed in-process leaves its file behind, the table entry goes with it).
_HELD: dict[str, object] = {}


_RENAME_EXCHANGE: Final = 2  # linux/fs.h
_AT_FDCWD: Final = -100


def _find_renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28 and later
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2: Any = _find_renameat2()


def swap_in(temporary: Path, path: Path) -> None:
    """Put the file ``temporary`` at ``path`` atomically (a reader sees the old or the new one).

    ``os.replace`` over an existing file makes ext4 (``auto_da_alloc``) write the new file's
    data out first, which on a busy disk stalled the simulator for up to a second per snapshot
    (measured beside the test suite). Exchanging the two names (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``) is as atomic and writes nothing out; the old snapshot, now at the
    temporary name, is then removed. Elsewhere (no such call, no such file yet, a file system
    without exchange) it is ``os.replace``.
    """
    global _renameat2
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(temporary), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0:
            os.unlink(temporary)
            return
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            _renameat2 = None  # not on this file system or kernel: do not ask again
        elif code != errno.ENOENT:  # ENOENT: the first snapshot (nothing to exchange with)
            raise OSError(code, os.strerror(code), str(temporary), None, str(path))
    os.replace(temporary, path)


class StoreError(Exception):
    """A store operation failed; ``str()`` is the exact message the runtime would answer."""


def escape_segment(session_id: str) -> str:
    """Encode a session id as one file-name segment (``/``, spaces, non-ASCII -> ``~XXXX``).

    Raises:
        StoreError: the id is empty ("cannot encode an empty path segment").
    """
    if not session_id:
        raise StoreError("cannot encode an empty path segment")
    if session_id in (".", ".."):
        return "~002e" * len(session_id)
    out: list[str] = []
    for char in session_id:
        if char in _SAFE:
            out.append(char)
            continue
        data = char.encode("utf-16-be")  # astral characters become two code units
        out.extend(f"~{int.from_bytes(data[i:i + 2], 'big'):04x}" for i in range(0, len(data), 2))
    return "".join(out)


@attrs.define(kw_only=True, eq=False)
class SessionRecord:
    """What the simulator keeps of one session between processes.

    ``next_seq`` is the seq the next committed event gets. ``open_turn`` is true while a turn
    runs, so a restart after a crash knows the last turn was interrupted.
    """

    id: str
    origin_cwd: str
    cwd: str
    created_at: int
    parent_id: str | None = None
    turns: int = 0
    next_seq: int = 0
    open_turn: bool = False
    system_sent: bool = False
    context_key: str | None = None  # provider/model of the last request/context
    header_sent: bool = False
    last_context: str | None = None
    title: str | None = None
    history: list[dict[str, Any]] = attrs.Factory(list)  # {"role", "text"} per message
    next_turn: list[dict[str, Any]] = attrs.Factory(list)  # queued user messages (wire JSON)
    next_step: list[dict[str, Any]] = attrs.Factory(list)

    def to_json(self) -> dict[str, Any]:
        """The snapshot written to the store."""
        return {"format": FORMAT_VERSION, **attrs.asdict(self)}

    @classmethod
    def from_json(cls, raw: Any) -> SessionRecord:
        """Read a snapshot; raises StoreError when it is not one this simulator wrote."""
        if not isinstance(raw, dict) or raw.get("format") != FORMAT_VERSION:
            raise StoreError("session snapshot has an unknown format")
        names = {field.name for field in attrs.fields(cls)}
        try:
            return cls(**{key: value for key, value in raw.items() if key in names})
        except TypeError as exc:
            raise StoreError(f"session snapshot is incomplete: {exc}") from exc


class SessionStore:
    """Session snapshots under ``root`` (or nowhere: ``root=None`` keeps nothing).

    Every method does blocking file I/O on small files; the simulator calls them from its
    event loop on purpose (they are quick, and ordering them with events is simpler).
    """

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        self.root = None if root is None else Path(root).absolute()
        self._token = object()
        self._owned: set[str] = set()
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)

    @property
    def persistent(self) -> bool:
        """True when snapshots are written to a directory."""
        return self.root is not None

    def file_name(self, session_id: str) -> str:
        """The snapshot's file name; raises StoreError for an empty or too long id."""
        name = escape_segment(session_id) + _SUFFIX
        if len((name + _OWNER_SUFFIX).encode()) > NAME_MAX:
            where = self.root if self.root is not None else Path("sim-sessions")
            raise StoreError(f"ENAMETOOLONG: name too long, open '{where / name}'")
        return name

    def _path(self, session_id: str) -> Path:
        assert self.root is not None
        return self.root / self.file_name(session_id)

    def exists(self, session_id: str) -> bool:
        """Whether a snapshot of ``session_id`` is in the store."""
        self.file_name(session_id)
        return self.root is not None and self._path(session_id).is_file()

    def load(self, session_id: str) -> SessionRecord | None:
        """The stored record, or None when there is none."""
        if self.root is None:
            self.file_name(session_id)
            return None
        path = self._path(session_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read session {session_id!r}: {exc}") from exc
        try:
            return SessionRecord.from_json(orjson.loads(data))
        except orjson.JSONDecodeError as exc:
            raise StoreError(f"session \"{session_id}\" is unreadable: {exc}") from exc

    def save(self, record: SessionRecord) -> None:
        """Write ``record`` atomically (temporary file, then rename)."""
        if self.root is None:
            return
        path = self._path(record.id)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(orjson.dumps(record.to_json()))
        swap_in(temporary, path)

    # ---- owner marks -----------------------------------------------------------------

    def acquire(self, session_id: str) -> None:
        """Mark ``session_id`` as opened by this simulator.

        Raises:
            StoreError: another live simulator holds it
                ("session "<id>" is already owned by an active write handle").
        """
        if self.root is None:
            return
        mark = str(self._path(session_id)) + _OWNER_SUFFIX
        if _HELD.get(mark, self._token) is not self._token or self._held_elsewhere(mark):
            raise StoreError(known_message(SessionOwnedError, session_id=session_id))
        with open(mark, "w", encoding="ascii") as file:
            file.write(str(os.getpid()))
        _HELD[mark] = self._token
        self._owned.add(mark)

    def _held_elsewhere(self, mark: str) -> bool:
        try:
            with open(mark, encoding="ascii") as file:
                pid = int(file.read().strip() or "0")
        except (OSError, ValueError):
            return False
        if pid <= 0 or pid == os.getpid():
            return False  # ours: _HELD decides; a stale mark of a crashed in-process simulator
        return pid_alive(pid)

    def release_all(self) -> None:
        """Drop every owner mark this simulator holds (on shutdown, end of input, crash)."""
        for mark in self._owned:
            if _HELD.get(mark) is self._token:
                del _HELD[mark]
                try:
                    os.unlink(mark)
                except OSError:
                    pass
        self._owned.clear()

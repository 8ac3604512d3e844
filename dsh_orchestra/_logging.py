"""Logging: structured context fields on every record, secret redaction, and CLI configuration.

The library logs through one stdlib logger per layer (``dsh_orchestra.transport``, ``.runtime``,
``.session``, ``.approvals``, ``.pool``, ``.workflow``, ``.batch``) and prints nothing unless the
application configures logging: the ``dsh_orchestra`` logger has a ``NullHandler``.

Every record logged on those loggers carries ``record.runtime``, ``record.session`` and
``record.item`` (None when unknown), taken from a contextvars-based context that the layers set
with :func:`log_context`; trio tasks inherit the context of the task that started them. Values
registered with :func:`register_secrets` (a RuntimeSpec's api key and secret-looking environment
values, registered when a runtime starts) are replaced with ``***`` in the message, its
arguments and the exception text before any handler sees the record. A turn's fields are
also bound, for work done on its behalf in other tasks, in the :class:`SessionContexts` of the
runtime that owns the session (nothing here is keyed by bare session ids process-wide).

Imports nothing from dsh_orchestra but ``_redact`` and ``_params`` (every layer may use it).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import os
import sys
import traceback
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

import orjson

from ._params import Param, ParamValueError
from ._redact import Redactor

ROOT = "dsh_orchestra"
LAYERS = ("transport", "runtime", "session", "session.relay", "approvals", "questions", "pool", "workflow", "batch", "scale", "report", "cli", "testing.simulator", "testing._fake_model")
FIELDS = ("runtime", "session", "item")
MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words

_NO_CONTEXT: Mapping[str, str] = MappingProxyType({})  # read-only: the default is shared by every context
_CONTEXT: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("dsh_orchestra_log_context", default=_NO_CONTEXT)
_SECRETS = Redactor(min_length=MIN_SECRET_LENGTH)  # process-wide: every record is redacted
_OURS = "_dsh_orchestra_handler"  # marks the handlers configure_logging installed


# ---- context ---------------------------------------------------------------------------


def current_context() -> dict[str, str]:
    """The log context fields of the calling task (runtime, session, item; only those set)."""
    return dict(_CONTEXT.get())


class SessionContexts:
    """The log fields (and trace context) of the turns running on ONE runtime, by session id.

    Owned by the runtime connection's ``session.Runtime`` (``runtime.contexts``), never
    process-wide: two runtimes in one process may run sessions of the same id. Work done
    for a session in another task (approval handlers run in the connection's nursery, not
    in the turn's task, so contextvars do not flow) looks the turn up here to inherit its
    item id and parent span.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, list[tuple[Mapping[str, str], Any]]] = {}  # innermost last

    @contextmanager
    def bind(self, session_id: str, fields: Mapping[str, str], trace_context: Any = None) -> Iterator[None]:
        """While the block runs, ``session_id``'s turn has these log fields and trace context."""
        entry = self.push(session_id, fields, trace_context)
        try:
            yield
        finally:
            self.pop(session_id, entry)

    def push(self, session_id: str, fields: Mapping[str, str], trace_context: Any = None) -> object:
        """``bind`` without a context manager: returns the entry to give ``pop``."""
        entry = (fields, trace_context)
        entries = self._entries.get(session_id)
        if entries is None:
            self._entries[session_id] = [entry]
        else:
            entries.append(entry)
        return entry

    def pop(self, session_id: str, entry: object) -> None:
        """Remove an entry ``push`` returned."""
        entries = self._entries.get(session_id, [])
        for index in range(len(entries) - 1, -1, -1):
            if entries[index] is entry:
                del entries[index]
                break
        if not entries:
            self._entries.pop(session_id, None)

    def fields(self, session_id: str) -> dict[str, str]:
        """The log fields of ``session_id``'s innermost running turn (or {})."""
        entries = self._entries.get(session_id)
        return dict(entries[-1][0]) if entries else {}

    def trace_context(self, session_id: str) -> Any:
        """The trace context of ``session_id``'s innermost running turn (or None)."""
        entries = self._entries.get(session_id)
        return entries[-1][1] if entries else None

    def __len__(self) -> int:
        return len(self._entries)


@contextmanager
def log_context(**fields: str | None) -> Iterator[dict[str, str]]:
    """Add ``runtime``/``session``/``item`` fields to every record logged inside the block.

    Fields of enclosing contexts are kept unless given again; None values are ignored.
    Yields the merged fields. Must be entered and exited in the same task.
    """
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ParamValueError("log_context takes ", Param("fields", sorted(unknown), spelled=", ".join(FIELDS)), f", not {sorted(unknown)}")
    token, merged = enter_log_context(fields)
    try:
        yield dict(merged)
    finally:
        _CONTEXT.reset(token)


def enter_log_context(fields: Mapping[str, Any]) -> tuple[contextvars.Token[Mapping[str, str]], dict[str, str]]:
    """``log_context`` without a context manager, for wrappers of every turn: sets the merged
    fields (only ``FIELDS``, None ignored) and returns (token for ``exit_log_context``, them)."""
    merged = dict(_CONTEXT.get())
    for name in FIELDS:
        value = fields.get(name)
        if value is not None:
            merged[name] = str(value)
    return _CONTEXT.set(merged), merged


def exit_log_context(token: contextvars.Token[Mapping[str, str]]) -> None:
    """Undo ``enter_log_context``."""
    _CONTEXT.reset(token)


class ContextFilter(logging.Filter):
    """Stamps ``record.runtime``, ``record.session`` and ``record.item`` from the log context.

    A field passed explicitly (``extra={"session": ...}``) is kept. Always lets the record pass.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        context = _CONTEXT.get()
        for name in FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, context.get(name))
        return True


# ---- secrets ---------------------------------------------------------------------------


def register_secrets(values: Iterable[str]) -> None:
    """Redact these values from every dsh_orchestra log record from now on (process-wide)."""
    _SECRETS.add(values)


def registered_secrets() -> list[str]:
    """The values registered with :func:`register_secrets`, longest first."""
    return list(_SECRETS.secrets)


def forget_secrets() -> None:
    """Drop every registered secret (for tests)."""
    _SECRETS.clear()


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***`` (longest first)."""
    return _SECRETS.text(text)


def redact_bytes(data: bytes) -> bytes:
    """UTF-8 ``data`` with every registered secret replaced (unchanged when none is registered)."""
    return _SECRETS.bytes(data)


class RedactingFilter(logging.Filter):
    """Replaces registered secrets in the message, its arguments and the exception text.

    The message is formatted here (``msg % args``) and the arguments dropped, so no handler
    or formatter can see an unredacted argument. Always lets the record pass.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not _SECRETS:
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 (a bad format string: logging reports it later)
            return True
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for name in FIELDS:
            value = getattr(record, name, None)
            if isinstance(value, str):
                setattr(record, name, redact(value))
        return True


_CONTEXT_FILTER = ContextFilter()
_REDACTING_FILTER = RedactingFilter()


def install_library_logging() -> None:
    """Give ``dsh_orchestra`` a NullHandler and put the context and redacting filters on the
    library's loggers: the layers' and every ``dsh_orchestra.*`` logger that exists by now (so
    records are stamped and redacted whoever handles them). Idempotent."""
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    existing = [name for name in logging.Logger.manager.loggerDict if name.startswith(ROOT + ".")]  # e.g. session.relay
    for logger in (root, *(logging.getLogger(name) for name in sorted({*(f"{ROOT}.{layer}" for layer in LAYERS), *existing}))):
        if _CONTEXT_FILTER not in logger.filters:
            logger.addFilter(_CONTEXT_FILTER)
        if _REDACTING_FILTER not in logger.filters:
            logger.addFilter(_REDACTING_FILTER)


# ---- formatters and configuration --------------------------------------------------------


def _iso(created: float) -> str:
    stamp = dt.datetime.fromtimestamp(created, dt.timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, runtime, session, item
    (and ``exception`` with the traceback text when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            line[name] = getattr(record, name, None)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        return orjson.dumps(line, default=str).decode("utf-8")


class TextFormatter(logging.Formatter):
    """``LEVEL logger: message [runtime=.. session=.. item=..]`` (only the fields that are set)."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = [f"{name}={getattr(record, name)}" for name in FIELDS if getattr(record, name, None) is not None]
        if not fields:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} [{' '.join(fields)}]{newline}{rest}"


def parse_level(value: str | int | None, default: int) -> int:
    """``"info"``, ``"DEBUG"``, ``20`` -> a logging level.

    Raises:
        ValueError: not a level name or number.
    """
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    level = logging.getLevelName(text.upper())
    if not isinstance(level, int):
        raise ParamValueError("log ", Param("level", value, spelled="level"), f" must be debug, info, warning, error or critical, not {value!r}")
    return level


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each record (like logging.lastResort)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _shown_elsewhere(record: logging.LogRecord) -> bool:
    """Drop records the CLI already printed as its own ``dsh-orchestra: warning:`` line."""
    return getattr(record, "dsh_console", True) is not False


def configure_logging(
    level: str | int | None = None,
    file: str | os.PathLike[str] | None = None,
    *,
    stream: Any = None,
) -> None:
    """What the CLI's log level and log file options do (it calls this before dispatching).

    Records of ``level`` and above are written as JSON Lines to ``file`` when given, and
    stderr (or ``stream``) shows warnings and above; without a file stderr shows ``level``
    and above. ``level`` defaults to warning, or info with a file; with neither given the
    ``dsh_orchestra`` logger's own level is left alone (it follows the root logger's).
    Calling it again replaces the handlers it installed before.

    Raises:
        ValueError: an unknown level.
        OSError: the log file cannot be opened.
    """
    install_library_logging()
    chosen = parse_level(level, logging.INFO if file is not None else logging.WARNING)
    root = logging.getLogger(ROOT)
    for handler in list(root.handlers):
        if getattr(handler, _OURS, False):
            root.removeHandler(handler)
            handler.close()
    console: logging.Handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    console.setLevel(max(chosen, logging.WARNING) if file is not None else chosen)
    console.setFormatter(TextFormatter())
    console.addFilter(_shown_elsewhere)
    handlers: list[logging.Handler] = [console]
    if file is not None:
        to_file = logging.FileHandler(os.fspath(file), encoding="utf-8")
        to_file.setLevel(chosen)
        to_file.setFormatter(JsonFormatter())
        handlers.append(to_file)
    for handler in handlers:
        setattr(handler, _OURS, True)
        handler.addFilter(_CONTEXT_FILTER)  # also child loggers outside LAYERS
        handler.addFilter(_REDACTING_FILTER)
        root.addHandler(handler)
    if level is not None or file is not None:
        root.setLevel(chosen)


def unconfigure_logging() -> None:
    """Remove the handlers ``configure_logging`` installed and reset the logger's level."""
    root = logging.getLogger(ROOT)
    for handler in list(root.handlers):
        if getattr(handler, _OURS, False):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(logging.NOTSET)


def configure_cli_logging(level: str | None, file: str | None) -> ParamValueError | None:
    """``configure_logging`` for the CLI: None when done, else the problem to report (exit
    status 2), naming the parameter (``level`` is ``log_level``, ``file`` is ``log_file``)."""
    try:
        configure_logging(level, file)
    except ValueError as exc:
        return ParamValueError(Param("log_level", level, spelled="log_level"), f": {exc}")
    except OSError as exc:
        return ParamValueError(Param("log_file", file), f": {exc.strerror or exc}")
    return None

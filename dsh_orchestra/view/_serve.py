"""Serve the viewer: a listening socket bound first (a port in use is a clear error), then
Hypercorn's trio worker running the app, and the task that keeps every run indexed."""

from __future__ import annotations

import errno
import os
import secrets
import socket
from pathlib import Path
from typing import Any, Callable

import trio

from ._runs import ViewInputError

VIEW_EXTRA = "the viewer needs its web stack: pip install 'dsh-orchestra[view]' (Starlette and Hypercorn)"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7575


class ViewServeError(OSError):
    """The viewer cannot listen where asked; the message says what to change."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port).

    Raises:
        ViewServeError: the port is in use, or the address is not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ViewServeError(f"port {port} on {host} is in use; give another --port (0 picks a free one)") from None
        raise ViewServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def new_token() -> str:
    """A random access token (URL-safe, 128 bits)."""
    return secrets.token_urlsafe(16)


async def serve(
    paths: list[Path], sock: socket.socket, *, token: str | None = None, control: Any = None,
    on_ready: Callable[[str], None] | None = None, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the runs under ``paths`` on the bound ``sock`` until cancelled; the URL (with the
    token) goes to ``on_ready`` and ``task_status``. ``control`` sends a live run's buttons'
    commands (default: to its batch's control socket).

    Raises:
        ViewInputError: a path is unusable.
        ImportError: the ``view`` extra (Starlette, Hypercorn) is not installed; the message names it.
    """
    try:
        from hypercorn.config import Config
        from hypercorn.trio import serve as hypercorn_serve
        import starlette  # noqa: F401 - ._app needs it: say which extra is missing before it fails
    except ImportError as exc:
        raise ImportError(f"{VIEW_EXTRA} ({exc.name} is missing)", name=exc.name) from None

    from ._app import Viewer, batch_control

    token = token or new_token()
    viewer = Viewer(paths, token, batch_control if control is None else control)
    config = Config()
    config.bind = [f"fd://{os.dup(sock.fileno())}"]  # Hypercorn closes the socket it makes of the fd: a copy of ours
    config.accesslog = None
    config.errorlog = "-"
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 5.0
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/?token={token}"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(viewer.keep_indexed)
        await nursery.start(_hypercorn, hypercorn_serve, viewer, config)
        if on_ready is not None:
            on_ready(url)
        task_status.started(url)


async def _hypercorn(hypercorn_serve: Any, viewer: Any, config: Any, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    await hypercorn_serve(viewer.app(), config, task_status=task_status)


def check_paths(paths: list[Path]) -> list[Path]:
    """The paths to view (the current directory when none); each must exist.

    Raises:
        ViewInputError: a path is missing, a file is not a results file, or nothing is found.
    """
    from ._runs import discover

    chosen = paths or [Path(os.getcwd())]
    results, _ = discover(chosen)
    if not results:
        where = ", ".join(repr(str(p)) for p in chosen)
        raise ViewInputError(f"no results file of `dsh-orchestra batch` under {where}: give a results file (.jsonl) or a folder holding one")
    return chosen

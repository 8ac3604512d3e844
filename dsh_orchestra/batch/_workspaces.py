"""Per-item workspaces: a template checked before the first item, then one fresh copy per attempt.

The template is checked once, before anything runs (``check_workspace_template``): no FIFO,
socket or device anywhere in it; every symlink resolves inside it (copied as a link, an
absolute one rewritten relative to its copy); none of the run's outputs (results, summary,
audit, transcripts, the workspaces' own directory) inside it. ``RESULTS.workspaces`` that
exists as a file or a symlink is refused, never followed. A copy's name is a safe encoding of
the item's id (``workspace_name``): any character, NUL included, gives a plain file name.
"""

from __future__ import annotations

import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import trio

from .._params import Param
from .._scratch import scratch_path
from ._options import BatchUsageError
from ._transcripts import SUFFIX, transcript_name


def workspace_name(item_id: str, epoch: int) -> str:
    """The directory name of ``item_id``'s copy for ``epoch``: its transcript's name without the
    suffix (injective: the id itself when it is short and plain, else a prefix of ``a-z 0-9 . _ -``
    and a hash), then ``-e<epoch>``."""
    return f"{transcript_name(item_id)[: -len(SUFFIX)]}-e{epoch}"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _refuse(path: str, why: str) -> BatchUsageError:
    return BatchUsageError(Param("workspace_template", path), f": {why}")


def _check_tree(template: Path) -> None:
    root = os.path.realpath(template)
    for directory, dirnames, filenames in os.walk(template, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = os.path.join(directory, name)
            try:
                info = os.lstat(path)
            except OSError as exc:
                raise _refuse(path, f"cannot be read ({exc.strerror or exc})") from None
            mode = info.st_mode
            if stat.S_ISLNK(mode):
                target = os.path.realpath(path)
                if not _inside(target, root):
                    raise _refuse(path, f"is a symlink to {os.readlink(path)!r}, outside the template; a workspace "
                                        "may hold only links that resolve inside it (copy the file in instead)")
            elif stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
                raise _refuse(path, f"is {kind}; a workspace template may hold only files, directories and symlinks")


def workspaces_root(out: Path) -> Path:
    """``RESULTS.workspaces``: where ``keep_workspaces`` keeps the copies."""
    return Path(f"{out}.workspaces").absolute()


def check_workspace_template(options: Any, out: Path | None = None, outputs: Iterable[Any] = ()) -> Path | None:
    """The template directory, checked (None without one): before the first item.

    ``out`` is the results file; ``outputs`` the run's other outputs (summary, audit,
    transcripts): none may lie inside the template.

    Raises:
        BatchUsageError: it is not a directory, holds a FIFO, socket or device, a symlink that
            leaves it, or one of the run's outputs; ``RESULTS.workspaces`` is a file or a symlink.
    """
    if options.workspace_template is None:
        if options.keep_workspaces:
            raise BatchUsageError(Param("keep_workspaces", spelled="keep_workspaces=True"), " needs ", Param("workspace_template"), " (a directory)")
        return None
    template = Path(options.workspace_template).absolute()
    if not template.is_dir():
        raise BatchUsageError(Param("workspace_template", str(options.workspace_template)), " is not a directory")
    root = os.path.realpath(template)
    named: list[tuple[str, Any]] = []
    if out is not None:
        named += [("out", out), ("workspaces", workspaces_root(out))]
        kept = workspaces_root(out)
        if options.keep_workspaces and (kept.is_symlink() or (kept.exists() and not kept.is_dir())):
            raise BatchUsageError(Param("keep_workspaces", spelled="keep_workspaces=True"),
                                  f": {str(kept)!r} exists and is {'a symlink' if kept.is_symlink() else 'not a directory'}; "
                                  "remove it or choose another results file (it is never followed)")
    named += [(name, value) for name, value in (("summary", options.summary), ("audit", options.audit),
                                                 ("transcripts", options.transcripts))]
    named += [("output", value) for value in outputs]
    for name, value in named:
        if value is None:
            continue
        if _inside(os.path.realpath(value), root):
            raise BatchUsageError(Param("workspace_template", str(options.workspace_template)),
                                  f" holds the run's {name} ({str(value)!r}); it would be copied into every workspace: "
                                  "give a template directory that holds none of the run's outputs")
    _check_tree(template)
    return template


class Workspaces:
    """Fresh copies of a template directory, one per attempt, under ``root``.

    Without ``keep`` the root is a temporary directory removed at ``close()`` (each copy is
    removed as soon as its item is scored); with ``keep`` it is ``RESULTS.workspaces`` and
    the copies stay (their paths are in the result lines' ``workspace``).
    """

    def __init__(self, template: Path, out: Path, *, keep: bool) -> None:
        self.template = template
        self.keep = keep
        if keep:
            self.root = workspaces_root(out)
            self.root.mkdir(exist_ok=True)
            if self.root.is_symlink() or not self.root.is_dir():  # made by someone else meanwhile
                raise BatchUsageError(f"{str(self.root)!r} is not a directory of this run's; remove it")
        else:
            self.root = scratch_path("workspaces")  # swept by the next run if this one is killed

    async def create(self, item_id: str, epoch: int) -> Path:
        """A fresh copy of the template for one attempt (an earlier attempt's copy is replaced)."""
        path = self.root / workspace_name(item_id, epoch)
        await trio.to_thread.run_sync(self._copy, path)
        return path

    def _copy(self, path: Path) -> None:
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
        shutil.copytree(self.template, path, symlinks=True)
        _relative_links(self.template, path)

    async def remove(self, path: Path | None) -> None:
        """Remove one copy (kept with ``keep``)."""
        if path is not None and not self.keep:
            await trio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))

    def close(self) -> None:
        """Remove the temporary root and whatever is left in it (nothing with ``keep``)."""
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def _relative_links(template: Path, copy: Path) -> None:
    """Absolute links of the copy that point inside the template: relative, inside the copy."""
    root = os.path.realpath(template)
    for directory, dirnames, filenames in os.walk(copy, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                continue
            target = os.readlink(path)
            if not os.path.isabs(target):
                continue
            resolved = os.path.realpath(target)
            if _inside(resolved, root):
                os.unlink(path)
                os.symlink(os.path.relpath(os.path.join(copy, os.path.relpath(resolved, root)), directory), path)


@contextmanager
def open_workspaces(options: Any, out: Path) -> Iterator[Workspaces | None]:
    """The run's ``Workspaces`` (None without a template), root made now, before any runtime
    starts (a sandboxed runtime gets it writable); closed on exit."""
    template = check_workspace_template(options, out)
    workspaces = Workspaces(template, out, keep=options.keep_workspaces) if template is not None else None
    try:
        yield workspaces
    finally:
        if workspaces is not None:
            workspaces.close()

"""Path collisions: no output of a command may be one of its inputs or another of its outputs.

Two paths collide when they name the same file: compared after resolving symlinks (also in
their parent directories), with ``os.path.samefile`` where both exist (hard links, bind
mounts, a case-insensitive file system's other spelling), and, for paths that do not exist
yet, as resolved paths (case-folded where the directory folds case). An output directory
(a batch's transcripts) also collides with any input or output file inside it whose name it
may write. Character devices (``/dev/null``) never collide.

Used by the batch, the report and the CLI (which adds its log file) before anything is
written or started. Imports nothing from dsh_orchestra.
"""

from __future__ import annotations

import os
import stat
from typing import Callable, Iterable, Mapping, Union

PathLike = Union[str, "os.PathLike[str]"]
Claims = Callable[[str], bool]
"""Says whether an output directory may write a file of this name."""


def describe_parameter(name: str, path: str) -> str:
    """How the library names a path in a message: ``out='r.jsonl'``."""
    return f"{name}={path!r}"


class PathConflictError(ValueError):
    """Two paths of one command name the same file (or one lies where the other writes).

    ``parameters`` and ``paths`` hold both, in the order given; ``reason`` says how they meet.
    """

    def __init__(self, first: tuple[str, str], second: tuple[str, str], reason: str,
                 describe: Callable[[str, str], str] = describe_parameter) -> None:
        self.parameters = (first[0], second[0])
        self.paths = (first[1], second[1])
        self.reason = reason
        super().__init__(self.format(describe))

    def format(self, describe: Callable[[str, str], str]) -> str:
        """The message with each path named by ``describe(parameter, path)``."""
        first = describe(self.parameters[0], self.paths[0])
        second = describe(self.parameters[1], self.paths[1])
        return f"{first} and {second} {self.reason}; give each its own path (nothing was written or started)"


class _Entry:
    def __init__(self, name: str, path: PathLike, output: bool, claims: Claims | None) -> None:
        self.name = name
        self.text = os.fspath(path)
        self.output = output
        self.claims = claims  # set for an output directory
        self.real = os.path.realpath(os.path.abspath(self.text))
        try:
            self.stat: os.stat_result | None = os.stat(self.real)
        except OSError:
            self.stat = None

    @property
    def device(self) -> bool:
        return self.stat is not None and stat.S_ISCHR(self.stat.st_mode)

    def same_as(self, other: _Entry) -> bool:
        if self.stat is not None and other.stat is not None:
            return (self.stat.st_dev, self.stat.st_ino) == (other.stat.st_dev, other.stat.st_ino)
        if self.real == other.real:
            return True
        if self.stat is None and other.stat is None and self.real.casefold() == other.real.casefold():
            return _folds_case(os.path.dirname(self.real))
        return False

    def holds(self, other: _Entry) -> bool:
        """True when ``other`` is a file this output directory may write."""
        if self.claims is None or not self.claims(os.path.basename(other.real)):
            return False
        parent = os.path.dirname(other.real)
        if parent == self.real:
            return True
        try:
            return os.path.samefile(parent, self.real)
        except OSError:
            return False


def _folds_case(directory: str) -> bool:
    """Whether ``directory``'s file system treats names differing only in case as one.

    Probed on an entry of the directory (or the directory itself); when nothing can tell, the
    answer is True: two outputs then need names that differ in more than case.
    """
    probes: list[str] = []
    try:
        with os.scandir(directory) as entries:
            probes = [e.path for e in entries if e.name.swapcase() != e.name][:1]
    except OSError:
        pass
    probes.append(directory)
    for probe in probes:
        head, tail = os.path.split(probe)
        if tail.swapcase() == tail:
            continue
        other = os.path.join(head, tail.swapcase())
        try:
            return os.path.samefile(probe, other)
        except OSError:
            return False
    return True


def check_paths(
    inputs: Mapping[str, PathLike | None] = {},  # noqa: B006 (read only)
    outputs: Mapping[str, PathLike | None] = {},  # noqa: B006
    *,
    output_dirs: Mapping[str, tuple[PathLike | None, Claims]] = {},  # noqa: B006
    describe: Callable[[str, str], str] = describe_parameter,
) -> None:
    """Refuse outputs that are inputs, or other outputs, of the same command.

    ``inputs`` and ``outputs`` map a parameter name to a path (None: not given). A file that
    is read and then appended to (a results file on resume) is given once, as an output.
    ``output_dirs`` maps a parameter to a directory and a predicate naming the files it may
    write there (for example ``*.jsonl.gz``). Inputs may be the same file as each other.

    Raises:
        PathConflictError: the first collision found, naming both paths.
    """
    entries = [_Entry(name, path, False, None) for name, path in inputs.items() if path is not None]
    entries += [_Entry(name, path, True, None) for name, path in outputs.items() if path is not None]
    entries += [_Entry(name, path, True, claims) for name, (path, claims) in output_dirs.items() if path is not None]
    for index, first in enumerate(entries):
        for second in entries[index + 1:]:
            if not (first.output or second.output) or first.device or second.device:
                continue
            if first.same_as(second):
                what = "are the same file" if first.claims is None and second.claims is None else "are the same path"
                raise PathConflictError((first.name, first.text), (second.name, second.text), what, describe)
            for directory, inner in ((first, second), (second, first)):
                if directory.holds(inner):
                    raise PathConflictError(
                        (inner.name, inner.text), (directory.name, directory.text),
                        "collide: the first lies inside the second, where it may be overwritten", describe,
                    )


def existing_file(value: object) -> str | None:
    """``value`` when it is a path string naming an existing file (else None): for options that
    take a FILE or something else (``module:attr``, ``first-option``)."""
    if isinstance(value, (str, os.PathLike)) and os.path.isfile(value):
        return os.fspath(value)
    return None


def empty_paths(values: Iterable[tuple[str, object]]) -> str | None:
    """The first name whose path value is the empty string (None when there is none)."""
    for name, value in values:
        if isinstance(value, str) and not value.strip():
            return name
    return None


"""Fenced code blocks of README.md and docs/*.md: extraction and classification for the docs tests.

How a block is treated is decided by its fence's language, and only by it:

* ``python``: run, offline. A block is a program and runs as a script, as pasted, from the
  repository root (a scratch copy of it), unless its first line is a comment that marks it a
  fragment (``# fragment: ...``, saying what it needs: an async function under ``trio.run``, a
  ``spec`` or ``runtime`` from above). The fragments of one document run in order in one
  namespace (top-level ``await`` allowed), which starts with the public API, ``trio``, ``home``
  and ``workspace`` (fresh directories) and ``spec`` (the simulator on them); a fragment using
  ``runtime`` or ``session`` without defining it gets an open simulator runtime / a fresh
  session on it. The mark is checked both ways: a marked block must need that context (a
  top-level ``await`` or a name it does not define), an unmarked one must not.
* ``toml``, ``json``, ``jsonl``: parsed (JSON: the whole block, or each line).
* ``sh``, ``bash``, ``console``, ``shell``: every ``dsh-orchestra`` command is parsed by the real
  argument parser (valid flags and values), then **run**: the commands of a block in order, in
  a fresh copy of the repository (from its root), offline (the simulator, or the real runtime
  against the scripted model), each expected to exit 0 unless a ``# exit status N`` comment on
  its line says otherwise; ``> FILE`` after one sends its output there. Other commands of the
  block (``pip``, ``jq``, loops) are not run. Every ``python FILE`` names a file that exists.
  The few commands that cannot run here are in ``COMMAND_ALLOWLIST`` with a reason that is
  checked against the command (test_docs_examples.py).
* ``text``, ``output``, ``mermaid``: not code (output samples, synopses,
  diagrams). Their ``$ `` lines are checked as commands, like ``sh``. Such a block that
  parses as Python with an import, a ``def`` or an ``await`` is an error: label it ``python``.

There is no other way out: a real example cannot opt out of running (nor a command, but for the
checked allowlist).
"""

from __future__ import annotations

import ast
import builtins
import re
import shlex
import symtable
from collections.abc import Iterator
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
RUN = {"python", "py"}
PARSE = {"toml", "json", "jsonl"}
SHELL = {"sh", "bash", "console", "shell"}
NOT_CODE = {"text", "output", "mermaid"}
FRAGMENT_MARK = re.compile(r"^#\s*fragment\b")
_FENCE = re.compile(r"^```([^\s`]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


@attrs.frozen
class Block:
    path: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def fragment(self) -> bool:
        """A Python block marked ``# fragment`` on its first line (it runs in its document's namespace)."""
        first = next((line for line in self.text.splitlines() if line.strip()), "")
        return bool(FRAGMENT_MARK.match(first.strip()))

    @property
    def program(self) -> bool:
        """A Python block that runs as a script, as pasted."""
        return not self.fragment


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> Iterator[Block]:
    text = path.read_text(encoding="utf-8")
    for match in _FENCE.finditer(text):
        yield Block(path, text.count("\n", 0, match.start()) + 1, match.group(1).lower(), match.group(2))


def all_blocks() -> list[Block]:
    return [b for path in documents() for b in blocks(path)]


def looks_like_python(text: str) -> bool:
    """An unlabelled block that is really Python code (an import, a def, an await)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        try:
            tree = ast.parse("async def _():\n" + "".join(f"    {line}\n" for line in text.splitlines()))
        except SyntaxError:
            return False
    return any(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.Await)) for n in ast.walk(tree))


def needs_context(text: str) -> list[str]:
    """Why a Python block cannot run on its own as a script: a top-level ``await`` (or another
    syntax error of a script), or the names it uses without defining or importing them."""
    try:
        compile(text, "<block>", "exec", dont_inherit=True)
        top = symtable.symtable(text, "<block>", "exec")
    except SyntaxError as exc:
        return [f"not a script on its own: {exc.msg}"]
    defined = set(dir(builtins)) | {"__file__", "__name__"}
    used: set[str] = set()
    for symbol in top.get_symbols():
        if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
            defined.add(symbol.get_name())
        elif symbol.is_referenced():
            used.add(symbol.get_name())
    tables = list(top.get_children())
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        used |= {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    return [f"uses {name!r} without defining it" for name in sorted(used - defined)]


def command_lines(text: str, *, dollar_only: bool) -> list[str]:
    """Logical command lines (continuations joined, ``$ `` prompts and comments removed)."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not pending:
            if dollar_only:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            elif line.startswith("$ "):
                line = line[2:]
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full and not full.startswith("#"):
            out.append(full)
    return out


def commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ``&&``, ``||``, ``|``, ``;``)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    out: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", "|", ";", "&"):
            out.append([])
        else:
            out[-1].append(word)
    return [c for c in out if c]

"""Packages meet through public names only (issue 24): no module of ``dsh_orchestra`` imports
another package's private module or private name. A package's own private modules and the
shared private helpers at the root (``dsh_orchestra._params``, ``_redact``, ...) are fine.
The import-linter contract "private_modules" says the same for modules; this scan also sees
private names (``from ..batch import _x``) and imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import dsh_orchestra
import dsh_orchestra.protocol
import dsh_orchestra.protocol._events

ROOT = Path(dsh_orchestra.__file__).parent


def _module_parts(path: Path, root: Path) -> tuple[list[str], bool]:
    parts = ["dsh_orchestra", *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        return parts[:-1], True
    return parts, False


def cross_package_private_imports(root: Path = ROOT) -> list[str]:
    """``file:line: target [names]`` of every import from one package into another's private
    module or of another package's private name."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts, is_package = _module_parts(path, root)
        own = parts[1] if len(parts) > 2 or (is_package and len(parts) > 1) else None
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = parts if is_package else parts[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = [*base, *(node.module.split(".") if node.module else [])]
                else:
                    target = (node.module or "").split(".")
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = alias.name.split(".")
                    if target[0] == "dsh_orchestra" and len(target) > 2 and target[1] != own and any(p.startswith("_") for p in target[2:]):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: import {alias.name}")
                continue
            else:
                continue
            if target[0] != "dsh_orchestra" or len(target) < 2 or target[1].startswith("_") or target[1] == own:
                continue  # not ours, the root or a shared private helper, or this package itself
            private_module = any(p.startswith("_") for p in target[2:])
            private_names = [n for n in names if n.startswith("_")]
            if private_module or private_names:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {'.'.join(target)} {names}")
    return found


def test_no_package_imports_another_packages_private_parts() -> None:
    assert cross_package_private_imports() == []


def test_the_scan_sees_a_private_import(tmp_path: Path) -> None:
    """The scan itself: a report module reaching into batch's private modules is caught."""
    package = tmp_path / "report"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_x.py").write_text(
        "from ..batch._summary import percentile\nfrom ..batch import _secret\nfrom ._own import fine\n"
        "from .._params import Param\nimport dsh_orchestra.eval._metrics\n"
        "def later():\n    from ..eval._compare import reduce_items\n"
    )
    found = cross_package_private_imports(tmp_path)
    assert [line.split(": ", 1)[0] for line in found] == ["report/_x.py:1", "report/_x.py:2", "report/_x.py:5", "report/_x.py:7"]


def test_the_protocol_lists_the_event_vocabulary_explicitly() -> None:
    """``protocol/__init__.py`` names every event class (no ``import *``), the same as ``_events.__all__``."""
    source = (ROOT / "protocol" / "__init__.py").read_text()
    assert "from ._events import *" not in source
    assert set(dsh_orchestra.protocol._events.__all__) <= set(dsh_orchestra.protocol.__all__)

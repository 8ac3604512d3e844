"""The protocol core imports no trio and does no I/O (DESIGN.md, layers). No trio here either."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dsh_orchestra.protocol

PROTOCOL_DIR = Path(dsh_orchestra.protocol.__file__).parent
PACKAGE_DIR = PROTOCOL_DIR.parent
FORBIDDEN = {"trio", "anyio", "asyncio", "subprocess", "socket", "threading", "selectors", "signal", "os", "io",
             "pathlib", "shutil", "tempfile", "time"}
SIBLING_LAYERS = {"transport", "runtime", "session", "approvals", "questions", "pool", "workflow", "batch", "cli",
                  "testing"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found.add("." * node.level + module)
    return found


@pytest.mark.parametrize("path", sorted(PROTOCOL_DIR.glob("*.py")), ids=lambda p: p.name)
def test_protocol_modules_import_nothing_that_does_io(path: Path) -> None:
    for module in imported_modules(path):
        top = module.lstrip(".").split(".")[0]
        if module.startswith(".."):
            assert top not in SIBLING_LAYERS, f"{path.name} imports the {top!r} layer"
        elif not module.startswith("."):
            assert top not in FORBIDDEN, f"{path.name} imports {module!r}"


def test_the_protocol_package_loads_without_trio() -> None:
    """Loaded on its own (the parent package's __init__ stubbed out), protocol pulls in no trio."""
    code = (
        "import sys, types\n"
        f"parent = types.ModuleType('dsh_orchestra'); parent.__path__ = [{str(PACKAGE_DIR)!r}]\n"
        "sys.modules['dsh_orchestra'] = parent\n"
        "import dsh_orchestra.protocol as p\n"
        "p.structure({'sessionId': 's', 'status': 'idle'}, p.SessionStatusParams, method='session.status')\n"
        "f = p.LineFramer(); f.receive_data(b'{}\\n'); assert f.frames() == [{}]\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'trio', 'anyio', 'asyncio', 'outcome', 'sniffio'})\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_import_dsh_orchestra_protocol_does_not_load_trio() -> None:
    """The issue's literal check: ``import dsh_orchestra.protocol`` leaves trio unloaded."""
    code = "import dsh_orchestra.protocol, sys; assert 'trio' not in sys.modules, 'trio was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("path", sorted(Path(__file__).parent.glob("*.py")), ids=lambda p: p.name)
def test_the_protocol_tests_themselves_use_no_trio(path: Path) -> None:
    assert not {m for m in imported_modules(path) if m.split(".")[0] in {"trio", "pytest_trio"}}, path.name

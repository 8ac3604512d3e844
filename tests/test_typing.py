"""The public API is mypy-clean (strict, as configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_is_mypy_strict_clean(tmp_path: Path) -> None:
    """``mypy --strict`` over dsh_orchestra reports no error (py.typed is shipped)."""
    assert (ROOT / "dsh_orchestra" / "py.typed").is_file()
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "dsh_orchestra"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout

"""The suite's parallel run keeps its groups: tests marked ``xdist_group`` share one worker.

pyproject.toml's addopts run the suite on pytest-xdist workers with ``--dist loadgroup``;
tests/conftest.py says which tests are grouped and why (one Ray instance at a time, one real
run per session fixture). A pytest/xdist pair on which the marks silently stop taking effect
(pytest-dev/pytest-xdist#1386) fails here rather than as a load-dependent flake elsewhere.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GROUPED = '''
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(4))
def test_it(i):
    pass
'''


def test_xdist_groups_share_one_worker(tmp_path: Path) -> None:
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--dist loadgroup" in addopts
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(GROUPED, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    options = [*shlex.split(addopts), "-n", "2"]  # two workers, whatever the count configured
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *options],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    workers = re.findall(r"^\[(gw\d+)\] .*PASSED", run.stdout, re.MULTILINE)
    assert len(workers) == 8, run.stdout
    assert len(set(workers)) == 1, f"the group ran on {sorted(set(workers))}:\n{run.stdout}"

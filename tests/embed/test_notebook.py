"""docs/examples/notebook.ipynb, executed headless by nbclient with ipykernel (the ``notebook``
marker: slow; leave it out locally with ``-m "not notebook"``): a small batch on the simulator,
scored, as a polars frame, with the blocking API inside the kernel's running asyncio loop."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from contained_tmp import contained_tmp

pytestmark = pytest.mark.notebook

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "examples" / "notebook.ipynb"

EXECUTE = textwrap.dedent("""
    import sys
    import nbclient, nbformat
    notebook = nbformat.read(sys.argv[1], as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": sys.argv[3]}})
    client.execute()
    nbformat.write(notebook, sys.argv[2])
""")


def test_the_example_notebook_runs_headless(tmp_path: Path) -> None:
    executed = tmp_path / "executed.ipynb"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "IPYTHONDIR": str(tmp_path / "ipython"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data"), "JUPYTER_PLATFORM_DIRS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
           **contained_tmp(tmp_path)}
    done = subprocess.run([sys.executable, "-c", EXECUTE, str(NOTEBOOK), str(executed), str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    notebook = nbformat.read(executed, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code)
    errors = [output for cell in code for output in cell.outputs if output.output_type == "error"]
    assert not errors
    summary, scores, frame, turn = (cell.outputs[-1]["data"] for cell in code[1:])
    assert summary["text/html"].startswith("<table") and "BatchSummary" in summary["text/plain"]
    assert "includes" in scores["text/html"] and "exact" in scores["text/html"]
    assert "score.exact" in frame["text/html"] and "shape: (3, 6)" in frame["text/plain"]
    assert "echo: hello from a cell" in turn["text/html"] and turn["text/plain"].startswith("TurnResult(")

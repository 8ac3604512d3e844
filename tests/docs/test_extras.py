"""Without an optional extra, what needs it ends in one line naming the extra.

Each entry point that needs an extra (CLI commands, Python calls, and the docs' examples that
use one) runs in a subprocess where the extra's modules cannot be imported (a meta path finder
installed before anything else, see BLOCKER). The CLI: exit status 2 and stderr exactly one
line naming ``dsh-orchestra[EXTRA]``. Python: one exception (no exception group, no chained
ModuleNotFoundError) whose message is one line naming the extra. A docs example: exit 0 (it did
not need the extra after all) or stderr exactly one line naming it. And every docs block that
uses an extra says so next to it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from contained_tmp import contained_tmp
from docs_blocks import ROOT, RUN, SHELL, Block, all_blocks, documents

EXTRAS: dict[str, tuple[str, ...]] = {
    # extra -> the top-level modules it brings (blocked together)
    "ray": ("ray",),
    "view": ("starlette", "hypercorn"),
    "data": ("pyarrow", "polars", "pandas"),
    "otel": ("opentelemetry",),
    "docs": ("mkdocs", "material", "mkdocstrings"),
}
NOT_USER_EXTRAS = {"test", "bench"}  # development extras: nothing of the package needs them

BLOCKER = """\
import sys
from importlib.abc import MetaPathFinder
_BLOCKED = set(sys.argv[1].split(","))
class _Blocker(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Blocker())
for _name in list(sys.modules):
    if _name.partition(".")[0] in _BLOCKED:
        del sys.modules[_name]
sys.argv = sys.argv[2:]
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def env(home: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("DEEPSEEK_", "DSH_"))}
    out.update({"DSH_TELEMETRY_MODE": "DISABLED", "HOME": str(home), "NO_PROXY": "*", **contained_tmp(home)})
    return out


def without(extra: str, script: str | Path, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``script args`` (a file) with the extra's modules unimportable."""
    return subprocess.run([sys.executable, "-c", BLOCKER, ",".join(EXTRAS[extra]), str(script), *args], cwd=cwd,
                          env=env(cwd), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line_naming(extra: str, stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line naming the {extra} extra, got:\n{stderr[-3000:]}"
    assert f"dsh-orchestra[{extra}]" in lines[0], lines[0]
    return lines[0]


def test_every_user_extra_is_covered() -> None:
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert declared - NOT_USER_EXTRAS == set(EXTRAS), "a new extra: add it to EXTRAS (and its entry points below)"


def test_the_blocker_blocks(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text("import sys\ntry:\n    import polars\nexcept ImportError as exc:\n    sys.exit(f'blocked {exc.name}')\n")
    done = without("data", script, cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.strip() == "blocked polars"


# ---- the CLI ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small scored results file (the simulator)."""
    where = tmp_path_factory.mktemp("results")
    out = where / "qa.jsonl"
    program = shutil.which("dsh-orchestra")
    assert program is not None
    done = subprocess.run([program, "batch", str(ROOT / "recipes/eval_qa/dataset.jsonl"), "--out", str(out), "--score", "exact",
                           "--no-progress"], cwd=where, env=env(where), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


CLI = {
    # extra: the command's arguments ({results}: a results file, {dir}: an empty directory)
    "ray": ["batch", str(ROOT / "recipes/quickstart/prompts.jsonl"), "--out", "{dir}/r.jsonl", "--ray", "--no-progress"],
    "view": ["view", "{dir}", "--port", "0"],
    "data": ["export", "{results}", "--format", "parquet", "--out", "{dir}/qa.parquet"],
}


@pytest.mark.parametrize("extra", sorted(CLI))
def test_cli_without_the_extra_exits_2_with_one_line(extra: str, results: Path, tmp_path: Path) -> None:
    program = shutil.which("dsh-orchestra")
    assert program is not None
    args = [a.format(results=results, dir=tmp_path) for a in CLI[extra]]
    done = without(extra, program, *args, cwd=tmp_path)
    line = one_line_naming(extra, done.stderr)
    assert done.returncode == 2, (done.returncode, line)
    assert line.startswith("dsh-orchestra: ")


def test_cli_asked_for_spans_without_the_otel_extra_warns_in_one_line(results: Path, tmp_path: Path) -> None:
    """``DSH_ORCHESTRA_OTEL=1`` without OpenTelemetry: the command runs (spans are optional) and
    says once, in one line, that none are recorded and which extra records them."""
    program = shutil.which("dsh-orchestra")
    assert program is not None
    done = subprocess.run([sys.executable, "-c", BLOCKER, ",".join(EXTRAS["otel"]), program, "score", str(results),
                           "--dataset", str(ROOT / "recipes/eval_qa/dataset.jsonl"), "--score", "exact",
                           "--out", str(tmp_path / "s.jsonl")],
                          cwd=tmp_path, env={**env(tmp_path), "DSH_ORCHESTRA_OTEL": "1"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = one_line_naming("otel", done.stderr)
    assert line.startswith("dsh-orchestra: warning: DSH_ORCHESTRA_OTEL=1 ")


# ---- Python -------------------------------------------------------------------------------

PYTHON = {
    # (extra, what): a program whose last statement needs the extra ({results}: a results file)
    ("ray", "run_batch on a RayExecutor"): (
        "import trio\nfrom dsh_orchestra.batch import run_batch\nfrom dsh_orchestra.scale import RayExecutor\n"
        f"trio.run(lambda: run_batch({str(ROOT / 'recipes/quickstart/prompts.jsonl')!r}, 'r.jsonl', progress='none', "
        "executor=RayExecutor(actors=1)))\n"),
    ("ray", "sync.run_batch on a RayExecutor"): (
        "from dsh_orchestra import sync\nfrom dsh_orchestra.scale import RayExecutor\n"
        f"sync.run_batch({str(ROOT / 'recipes/quickstart/prompts.jsonl')!r}, 'r.jsonl', progress='none', "
        "executor=RayExecutor(actors=1))\n"),
    ("view", "view.serve"): (
        "import trio\nfrom pathlib import Path\nfrom dsh_orchestra import view\n"
        "trio.run(view.serve, [Path('.')], view.bind('127.0.0.1', 0))\n"),
    ("data", "to_arrow"): "from dsh_orchestra.eval import load_results\nload_results({results!r}).to_arrow()\n",
    ("data", "to_polars"): "from dsh_orchestra.eval import load_results\nload_results({results!r}).to_polars()\n",
    ("data", "to_pandas"): "from dsh_orchestra.eval import load_results\nload_results({results!r}).to_pandas()\n",
}


@pytest.mark.parametrize(("extra", "what"), sorted(PYTHON), ids=[f"{e}-{w}" for e, w in sorted(PYTHON)])
def test_python_without_the_extra_raises_one_exception_naming_it(extra: str, what: str, results: Path, tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(PYTHON[extra, what].format(results=str(results)), encoding="utf-8")
    done = without(extra, script, cwd=tmp_path)
    assert done.returncode == 1
    assert "ExceptionGroup" not in done.stderr and "+-+" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("Traceback (most recent call last)") == 1, (
        f"{what}: one exception, not one chained to the ModuleNotFoundError:\n{done.stderr[-3000:]}")
    last = done.stderr.strip().splitlines()[-1]
    assert f"dsh-orchestra[{extra}]" in last, last


# ---- the docs' examples -------------------------------------------------------------------

USES = {
    # extra: what in a block (or the command it runs) needs it
    "ray": re.compile(r"RayExecutor\(|--ray\b|^\s*import ray\b", re.M),
    "view": re.compile(r"dsh-orchestra view\b|dsh_orchestra\.view\b|\bstarlette\b|\bhypercorn\b"),
    "data": re.compile(r"\.to_(polars|pandas|arrow)\(\)|--format parquet|^\s*import (polars|pandas|pyarrow)\b", re.M),
    "otel": re.compile(r"^\s*from opentelemetry\b|^\s*import opentelemetry\b", re.M),
    "docs": re.compile(r"^\s*mkdocs (build|serve)\b", re.M),
}
_NOTE = "the `{0}` extra|`{0}` extra|{0} extra|dsh-orchestra\\[{0}\\]"


def uses(block: Block) -> list[str]:
    code = "\n".join(line.split("#", 1)[0] for line in block.text.splitlines())  # not in comments
    return [extra for extra, pattern in USES.items() if pattern.search(code)]


def before(block: Block, lines: int = 12) -> str:
    text = block.path.read_text(encoding="utf-8").splitlines()
    return "\n".join(text[max(0, block.line - 1 - lines): block.line - 1])


EXTRA_BLOCKS = [(b, e) for b in all_blocks() if b.language in RUN | SHELL for e in uses(b)]


def test_the_docs_use_extras() -> None:
    """The scan finds the blocks it must (so that the checks below check something)."""
    found = {(b.path.name, e) for b, e in EXTRA_BLOCKS}
    assert {("scale-out.md", "ray"), ("observability.md", "otel")} <= found, found


@pytest.mark.parametrize(("block", "extra"), EXTRA_BLOCKS, ids=[f"{b.where}-{e}" for b, e in EXTRA_BLOCKS])
def test_a_block_that_needs_an_extra_says_so(block: Block, extra: str) -> None:
    note = re.compile(_NOTE.format(re.escape(extra)))
    assert note.search(block.text) or note.search(before(block)), (
        f"{block.where} needs the {extra} extra: say so next to it (`pip install 'dsh-orchestra[{extra}]'`)")


PROGRAMS = [(b, e) for b, e in EXTRA_BLOCKS if b.language in RUN and b.program]


@pytest.mark.parametrize(("block", "extra"), PROGRAMS, ids=[f"{b.where}-{e}" for b, e in PROGRAMS])
def test_a_docs_example_without_its_extra_ends_in_one_line(block: Block, extra: str, tmp_path: Path) -> None:
    for name in ("recipes",):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    script = tmp_path / "example.py"
    script.write_text(block.text, encoding="utf-8")
    done = without(extra, script, cwd=tmp_path)
    if done.returncode != 0:
        one_line_naming(extra, done.stderr)


def test_docs_are_scanned() -> None:
    assert ROOT / "README.md" in documents()

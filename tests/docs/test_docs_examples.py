"""Every fenced code block of README.md and docs/*.md runs (or parses) as written, offline.

See docs_blocks.py for how a block is treated (by its fence's language only; there is no
opt-out for real examples). Python runs against the simulator, or the real bundled runtime
against the scripted model on 127.0.0.1 (``DEEPSEEK_BASE_URL`` points there, a placeholder key).
Nothing is written into the repository: programs run from a scratch copy of it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from docs_blocks import NOT_CODE, PARSE, ROOT, RUN, SHELL, Block, all_blocks, command_lines, commands, documents, looks_like_python

BLOCKS = all_blocks()
HERE = Path(__file__).resolve().parent

KNOWN_BROKEN: dict[str, str] = {
    # "<document>: <first line of the block>": why it does not run yet. Each entry is a defect
    # to fix (in the document), not a way out: the list only ever shrinks.
    "docs/batch.md: import trio": "reads dataset.jsonl from the current directory, which the text never creates",
    "docs/scale-out.md: import trio": "reads ds.jsonl from the current directory, which the text never creates",
    "docs/observability.md: from opentelemetry import trace": "needs opentelemetry-exporter-otlp, which no extra installs",
    "docs/workflows.md: import attrs": "typed outputs on the default simulator: its default reply is not JSON (OutputParseError)",
}


def ids(blocks: list[Block]) -> list[str]:
    return [b.where for b in blocks]


def key(block: Block) -> str:
    first = next((line.strip() for line in block.text.splitlines() if line.strip()), "")
    return f"{block.path.relative_to(ROOT)}: {first}"


def known(block: Block) -> None:
    reason = KNOWN_BROKEN.get(key(block))
    if reason is not None:
        pytest.xfail(reason)


def test_every_block_has_a_known_language() -> None:
    unknown = [f"{b.where} ```{b.language}" for b in BLOCKS if b.language not in RUN | PARSE | SHELL | NOT_CODE]
    assert not unknown, f"label each fence as one of {sorted(RUN | PARSE | SHELL | NOT_CODE)}: {unknown}"


def test_no_real_example_hides_as_output() -> None:
    hidden = [b.where for b in BLOCKS if b.language in NOT_CODE - {"mermaid"} and looks_like_python(b.text)]
    assert not hidden, f"these blocks are Python code: label their fences ```python so that they run: {hidden}"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's documents and recipes: examples run from its root."""
    root = tmp_path_factory.mktemp("repo")
    for name in ("README.md", "docs", "recipes", "bench"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__", "out"))
        elif source.exists():
            shutil.copy2(source, root / name)
    return root


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    """The scripted model as its own process (``dsh-orchestra fake-model``) on 127.0.0.1."""
    process = subprocess.Popen([sys.executable, "-m", "dsh_orchestra.testing", "fake-model", "--port", "0"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on "), line
        yield line.removeprefix("listening on ").strip()
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()  # type: ignore[union-attr]  # a pipe: not None


def offline_env(model_url: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEEPSEEK_", "DSH_"))}
    env.update({"DSH_TELEMETRY_MODE": "DISABLED", "DEEPSEEK_BASE_URL": model_url, "DEEPSEEK_API_KEY": "offline-placeholder",
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "HOME": str(home)})
    return env


PROGRAMS = [b for b in BLOCKS if b.language in RUN and b.program]


@pytest.mark.parametrize("block", PROGRAMS, ids=ids(PROGRAMS))
def test_python_programs_run(block: Block, scratch: Path, model_url: str, tmp_path: Path) -> None:
    known(block)
    script = tmp_path / "example.py"
    script.write_text(block.text, encoding="utf-8")
    for run in (1, 2):  # twice: an example must not trip over what its first run left behind
        done = subprocess.run([sys.executable, str(script)], cwd=scratch, env=offline_env(model_url, tmp_path),
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{block.where} (run {run}) failed:\n{done.stderr[-3000:]}"
        assert " error ()" not in done.stdout, f"{block.where} printed an unexplained error:\n{done.stdout}"


FRAGMENT_DOCS = sorted({b.path for b in BLOCKS if b.language in RUN and not b.program})


@pytest.mark.parametrize("document", FRAGMENT_DOCS, ids=[str(p.relative_to(ROOT)) for p in FRAGMENT_DOCS])
def test_python_fragments_run_in_order(document: Path, scratch: Path, model_url: str, tmp_path: Path) -> None:
    fragments = [b for b in BLOCKS if b.path == document and b.language in RUN and not b.program]
    broken = [b for b in fragments if key(b) in KNOWN_BROKEN]
    runnable = fragments[: fragments.index(broken[0])] if broken else fragments  # later ones build on it
    spec = tmp_path / "fragments.json"
    spec.write_text(json.dumps([{"where": b.where, "code": b.text} for b in runnable]), encoding="utf-8")
    done = subprocess.run([sys.executable, str(HERE / "run_fragments.py"), str(spec)], cwd=scratch,
                          env=offline_env(model_url, tmp_path), capture_output=True, text=True, timeout=300)
    mark = "@@docs-fragment@@ "
    reports = [json.loads(line.removeprefix(mark)) for line in done.stdout.splitlines() if line.startswith(mark)]
    failed = [r for r in reports if not r["ok"]]
    assert done.returncode == 0 and not failed, "\n".join(f"{r['where']}:\n{r['error']}" for r in failed) or done.stderr[-3000:]
    assert [r["where"] for r in reports] == [b.where for b in runnable]
    if broken:
        pytest.xfail(f"{broken[0].where}: {KNOWN_BROKEN[key(broken[0])]} (and the fragments after it)")


PARSED = [b for b in BLOCKS if b.language in PARSE]


@pytest.mark.parametrize("block", PARSED, ids=ids(PARSED))
def test_data_blocks_parse(block: Block) -> None:
    known(block)
    if block.language == "toml":
        tomllib.loads(block.text)
        return
    try:
        json.loads(block.text)
    except json.JSONDecodeError:
        for number, line in enumerate(block.text.splitlines(), 1):
            if line.strip():
                try:
                    json.loads(line)
                except json.JSONDecodeError as exc:
                    pytest.fail(f"{block.where}: line {number} is not JSON ({exc}); label output samples ```text")


def shell_blocks() -> list[Block]:
    return [b for b in BLOCKS if b.language in SHELL or (b.language in NOT_CODE and command_lines(b.text, dollar_only=True))]


SHELL_BLOCKS = shell_blocks()
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]+(\.[a-z]+)?$|[\[\]|<>]")


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=ids(SHELL_BLOCKS))
def test_documented_commands_are_valid(block: Block) -> None:
    """Each ``dsh-orchestra`` command line parses with the real parser; each ``python FILE`` exists."""
    known(block)
    from dsh_orchestra.cli._main import build_parser

    checked = 0
    for line in command_lines(block.text, dollar_only=block.language not in SHELL):
        for words in commands(line):
            if words[0] == "dsh-orchestra":
                checked += 1
                parser = build_parser()
                try:
                    parser.parse_args(words[1:])
                except SystemExit as exc:
                    if exc.code:
                        pytest.fail(f"{block.where}: `{' '.join(words)}` is rejected by the parser "
                                    "(a synopsis with placeholders belongs in a ```text block)")
            elif words[0] in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
                checked += 1
                assert (ROOT / words[1]).is_file(), f"{block.where}: {words[1]} does not exist"


def test_docs_name_the_documents_they_scan() -> None:
    assert ROOT / "README.md" in documents() and len(documents()) > 5

"""Every fenced code block of README.md and docs/*.md runs (or parses) as written, offline.

See docs_blocks.py for how a block is treated (by its fence's language only; there is no
opt-out for real examples). Python runs against the simulator, or the real bundled runtime
against the scripted model on 127.0.0.1 (``DEEPSEEK_BASE_URL`` points there, a placeholder key).
Nothing is written into the repository: programs run from a scratch copy of it, and each shell
block as a bash script from a fresh copy of its own (all at once, in threads; the blocks that
start Ray run alone, in the ``ray`` xdist group). The few shell blocks and commands that cannot
run here are in checked allowlists (BLOCK_ALLOWLIST, COMMAND_ALLOWLIST) with the reason.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from contained_tmp import contained_tmp
from docs_blocks import (
    NOT_CODE, PARSE, ROOT, RUN, SHELL, Block, all_blocks, command_lines, commands, documents, looks_like_python, needs_context,
)
from ray_serial import ray_serial

BLOCKS = all_blocks()
HERE = Path(__file__).resolve().parent

KNOWN_BROKEN: dict[str, str] = {
    # "<document>: <first line of the block>": why it does not run yet. Each entry is a defect
    # to fix (in the document), not a way out: the list only ever shrinks (it is empty).
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
    return copy_repository(tmp_path_factory.mktemp("repo"))


def copy_repository(root: Path) -> Path:
    """The documents and recipes of the repository, copied into ``root``."""
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
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "HOME": str(home),
                **contained_tmp(home)})
    return env


def _uses_ray(block: Block) -> bool:
    """A block that starts a local Ray instance (one Ray at a time: the xdist group ``ray``)."""
    return "RayExecutor" in block.text or "--ray" in block.text


EXAMPLE_FILES = sorted((ROOT / "docs" / "examples").glob("*.py"))


def example_file(block: Block) -> Path | None:
    """The docs/examples/ file this program is a verbatim part of: test_docs_example_files.py runs
    that file (and checks what it prints), so the block is not run a second time here."""
    return next((f for f in EXAMPLE_FILES if block.text.strip() in f.read_text(encoding="utf-8")), None)


PROGRAMS = [b for b in BLOCKS if b.language in RUN and b.program and example_file(b) is None]


def test_programs_run_as_example_files_are_those_files() -> None:
    quoted = [b.where for b in BLOCKS if b.language in RUN and b.program and example_file(b) is not None]
    assert [where.rsplit(":", 1)[0] for where in quoted] == ["docs/runtime.md"], quoted  # docs/examples/runtime_quickstart.py, in full


@pytest.mark.parametrize("block", [
    pytest.param(b, marks=[pytest.mark.xdist_group("ray")] if _uses_ray(b) else []) for b in PROGRAMS
], ids=ids(PROGRAMS))
def test_python_programs_run(block: Block, scratch: Path, model_url: str, tmp_path: Path,
                             tmp_path_factory: pytest.TempPathFactory) -> None:
    known(block)
    script = tmp_path / "example.py"
    script.write_text(block.text, encoding="utf-8")
    with ray_serial(tmp_path_factory) if _uses_ray(block) else contextlib.nullcontext():
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


PYTHON_BLOCKS = [b for b in BLOCKS if b.language in RUN]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=ids(PYTHON_BLOCKS))
def test_a_block_is_marked_a_fragment_exactly_when_it_is_one(block: Block) -> None:
    """A Python block runs as pasted (a script), or says on its first line that it is a fragment
    and what it needs; the mark is right both ways."""
    why = needs_context(block.text)
    if block.fragment:
        assert why, f"{block.where} runs as a script on its own: remove its `# fragment` mark"
    else:
        assert not why, (f"{block.where} does not run as pasted ({'; '.join(why)}): make it a whole program, "
                         "or mark it `# fragment: <what it needs>` on its first line")


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

    for command in documented_commands(block):
        try:
            build_parser().parse_args(list(command.words[1:]))
        except SystemExit as exc:
            if exc.code:
                pytest.fail(f"{block.where}: `{' '.join(command.words)}` is rejected by the parser "
                            "(a synopsis with placeholders belongs in a ```text block)")
    for line in command_lines(block.text, dollar_only=block.language not in SHELL):
        for words in commands(line):
            if words[0] in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
                assert (ROOT / words[1]).is_file(), f"{block.where}: {words[1]} does not exist"


# ---- the shell blocks run as written -----------------------------------------------------

_EXPECT = re.compile(r"#\s*exit(?: status)? (\d+)\b")
_REMOTE_RAY = re.compile(r"^(?!127\.|localhost)[\w.-]+:\d+$|^ray://")
_READERS_FILES = re.compile(r"(?<![\w/.-])(ds\.jsonl|/shared/[\w./-]*|results-\*\.jsonl)")


def _remote_ray(words: list[str]) -> bool:
    """``--ray HOST:PORT`` or ``ray://`` (batch), ``--address http://HOST:PORT`` (ray job submit): not this machine."""
    def after(flag: str) -> str:
        at = words.index(flag) + 1 if flag in words else len(words)
        return words[at] if at < len(words) else ""
    return bool(_REMOTE_RAY.search(after("--ray"))) or bool(re.match(r"https?://(?!127\.|localhost)", after("--address")))


COMMAND_KINDS: dict[str, Callable[[list[str]], bool]] = {
    # why a command of a block that runs cannot run here, each checked against the command itself:
    # an entry whose command no longer has that property would now run, and fails
    # test_command_allowlist_is_minimal. The line is replaced by `:` in the script run.
    "a remote Ray cluster": _remote_ray,
}

COMMAND_ALLOWLIST: dict[str, str] = {
    # "<document>: <the command's start>": a COMMAND_KINDS key
    "docs/scale-out.md: dsh-orchestra batch ds.jsonl --out results.jsonl --ray head.example:6379": "a remote Ray cluster",
}

BLOCK_KINDS: dict[str, Callable[[Block], bool]] = {
    # why a whole shell block cannot run here, each checked against the block's text
    "the reader's own files (their dataset ds.jsonl, /shared/..., the shards' results), not in the repository":
        lambda block: any(not (ROOT / m.lstrip("/")).exists() for m in _READERS_FILES.findall(block.text)),
    "the whole test suite (the suite is this command)": lambda block: "python -m pytest" in block.text,
    "a remote Ray cluster": lambda block: any(_remote_ray(words) for line in command_lines(block.text, dollar_only=False)
                                              for words in commands(line)),
    "a benchmark (minutes of CPU at full size; bench/ scripts have their own smoke tests)":
        lambda block: all(words[:2] == ["python", words[1]] and words[1].startswith("bench/")
                          for line in command_lines(block.text, dollar_only=False) for words in commands(line)),
}

BLOCK_ALLOWLIST: dict[str, str] = {
    # "<document>: <first line of the block>": a BLOCK_KINDS key
    "README.md: python3 -m venv .venv && . .venv/bin/activate && pip install '.[test,ray]' && python -m pytest":
        "the whole test suite (the suite is this command)",
    "docs/batch.md: $ dsh-orchestra batch ds.jsonl --out results.jsonl                  # exit status 2":
        "the reader's own files (their dataset ds.jsonl, /shared/..., the shards' results), not in the repository",
    "docs/batch.md: # four shards on one machine (or one per host: same dataset, same N, different I)":
        "the reader's own files (their dataset ds.jsonl, /shared/..., the shards' results), not in the repository",
    "docs/batch.md: seq 0 15 | parallel --jobs 4 --joblog shards.log --retries 3 \\":
        "the reader's own files (their dataset ds.jsonl, /shared/..., the shards' results), not in the repository",
    "docs/batch.md: #!/bin/bash": "the reader's own files (their dataset ds.jsonl, /shared/..., the shards' results), not in the repository",
    "docs/batch.md: jq -r .id ds.jsonl | sort > want.txt":
        "the reader's own files (their dataset ds.jsonl, /shared/..., the shards' results), not in the repository",
    "docs/batch.md: # failures with their reason":
        "the reader's own files (their dataset ds.jsonl, /shared/..., the shards' results), not in the repository",
    "docs/scale-out.md: dsh-orchestra batch /shared/ds.jsonl --out /shared/results.jsonl --resume \\": "a remote Ray cluster",
    "docs/scale-out.md: ray job submit --address http://head.example:8265 \\": "a remote Ray cluster",
    "docs/benchmarks.md: python bench/report_eval.py --items 10000 --trials 3 --json":
        "a benchmark (minutes of CPU at full size; bench/ scripts have their own smoke tests)",
}

# Installing is not run: the tests run in the environment the install made. `pip install ...`
# says so and does nothing; `python3 -m venv DIR` makes DIR/bin/activate an empty file, so that
# `. DIR/bin/activate` keeps this environment. Everything else of a block runs as written.
PRELUDE = """set -eo pipefail
trap 'echo "docs test: \\`$BASH_COMMAND\\` exited $?" >&2' ERR
pip() { if [ "$1" = install ]; then echo "docs test: the package is installed here: pip $* not run" >&2; else command pip "$@"; fi; }
python3() { if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && : > "$3/bin/activate"; else command python3 "$@"; fi; }
"""


@attrs.frozen
class Command:
    block: Block
    words: tuple[str, ...]
    expect: int
    stdout: str | None  # "> FILE"

    @property
    def key(self) -> str:
        return f"{self.block.path.relative_to(ROOT)}: {' '.join(self.words)}"

    @property
    def allowed(self) -> str | None:
        return next((kind for prefix, kind in COMMAND_ALLOWLIST.items() if self.key.startswith(prefix)), None)


def documented_commands(block: Block) -> list[Command]:
    """The ``dsh-orchestra`` commands of a shell block (or ``$`` lines), in order. Expected exit
    status: 0, or what a ``# exit status N`` comment on the line says."""
    found = []
    for line in command_lines(block.text, dollar_only=block.language not in SHELL):
        expect = int(m.group(1)) if (m := _EXPECT.search(line)) else 0
        for words in commands(line):
            if "dsh-orchestra" not in words:
                continue
            words = words[words.index("dsh-orchestra"):]  # after `until`, `parallel ...`
            stdout = None
            if ">" in words:
                at = words.index(">")
                stdout, words = words[at + 1], words[:at] + words[at + 2:]
            found.append(Command(block, tuple(words), expect, stdout))
    return found


def block_allowed(block: Block) -> str | None:
    return BLOCK_ALLOWLIST.get(key(block))


COMMANDS = [c for b in SHELL_BLOCKS for c in documented_commands(b)]
RUN_BLOCKS = [b for b in SHELL_BLOCKS if block_allowed(b) is None]


def test_command_allowlist_is_minimal() -> None:
    """Every entry names a documented command that still cannot run, for the reason it gives."""
    for prefix, kind in COMMAND_ALLOWLIST.items():
        assert kind in COMMAND_KINDS, f"{prefix!r}: unknown reason {kind!r}"
        matching = [c for c in COMMANDS if c.key.startswith(prefix) and block_allowed(c.block) is None]
        assert matching, f"{prefix!r} matches no command of a block that runs: remove it from COMMAND_ALLOWLIST"
        for command in matching:
            assert COMMAND_KINDS[kind](list(command.words)), (
                f"{command.key!r} no longer has {kind!r}: it can run now, remove {prefix!r} from COMMAND_ALLOWLIST")


def test_block_allowlist_is_minimal() -> None:
    """Every entry names a shell block that still cannot run here, for the reason it gives."""
    by_key = {key(b): b for b in SHELL_BLOCKS}
    for name, kind in BLOCK_ALLOWLIST.items():
        assert kind in BLOCK_KINDS, f"{name!r}: unknown reason {kind!r}"
        assert name in by_key, f"{name!r} is no shell block: remove it from BLOCK_ALLOWLIST"
        assert BLOCK_KINDS[kind](by_key[name]), f"{name!r} no longer has {kind!r}: it can run now, remove it"


def test_the_allowlist_reasons_are_checked_against_the_command() -> None:
    (cluster,) = COMMAND_KINDS.values()
    assert cluster(["dsh-orchestra", "batch", "d", "--ray", "head.example:6379"]) and cluster(["x", "--ray", "ray://h:10001"])
    for local in (["--ray"], ["--ray", "--ray-actors", "2"], ["--ray", "127.0.0.1:6379"], ["--ray", "auto"]):
        assert not cluster(["dsh-orchestra", "batch", "d", *local]), local
    readers, suite, remote, bench = BLOCK_KINDS.values()
    block = functools.partial(Block, ROOT / "docs" / "x.md", 1, "sh")
    assert readers(block("jq .id ds.jsonl\n")) and readers(block("dsh-orchestra batch /shared/ds.jsonl --out r\n"))
    assert not readers(block("dsh-orchestra batch recipes/quickstart/prompts.jsonl --out results.jsonl\n"))
    assert suite(block("pip install . && python -m pytest\n")) and not suite(block("python -m pip list\n"))
    assert remote(block("dsh-orchestra batch d --ray head.example:6379\n")) and not remote(block("dsh-orchestra batch d --ray\n"))
    assert remote(block("ray job submit --address http://head.example:8265 -- x\n"))
    assert not remote(block("ray job submit --address http://127.0.0.1:8265 -- x\n"))
    assert bench(block("python bench/x.py --n 3\n")) and not bench(block("python bench/x.py\ndsh-orchestra batch d\n"))
    found = documented_commands(Block(ROOT / "docs" / "x.md", 1, "sh", "until dsh-orchestra batch d --out r; do\n"
                                      "dsh-orchestra policy replay a --policy p > o.txt   # exit status 1\ndone\n"))
    assert [(c.words, c.expect, c.stdout) for c in found] == [
        (("dsh-orchestra", "batch", "d", "--out", "r"), 0, None),
        (("dsh-orchestra", "policy", "replay", "a", "--policy", "p"), 1, "o.txt")]


def shell_script(block: Block) -> str:
    """The block as a bash script: its command lines as written (``$`` prompts and output lines of
    a console sample left out), a line with ``# exit status N`` checked for N (and going on), a
    line holding an allowlisted command replaced by ``:``, after PRELUDE."""
    out = [PRELUDE]
    for line in command_lines(block.text, dollar_only=block.language not in SHELL):
        skipped = [c.allowed for words in commands(line) if "dsh-orchestra" in words
                   for c in documented_commands(Block(block.path, block.line, "sh", line + "\n")) if c.allowed]
        if skipped:
            out.append(f": docs test: not run here: {skipped[0]}")
        elif (m := _EXPECT.search(line)) and int(m.group(1)) != 0:
            want = int(m.group(1))
            quoted = shlex.quote(line)
            out.append(f"__status=0; {line[:m.start()].rstrip()} || __status=$?\n"
                       f"[ \"$__status\" -eq {want} ] || {{ echo \"docs test: \"{quoted}\" exited $__status, the text says {want}\" >&2; exit 1; }}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_the_shell_script_of_a_block() -> None:
    script = shell_script(Block(ROOT / "docs" / "scale-out.md", 1, "text", "$ dsh-orchestra batch a --out b   # exit status 2\n"
                                "output line\n$ echo done\n$ dsh-orchestra batch ds.jsonl --out results.jsonl --ray head.example:6379\n"))
    body = script.removeprefix(PRELUDE).strip().splitlines()
    assert body[0] == "__status=0; dsh-orchestra batch a --out b || __status=$?"
    assert body[1].startswith('[ "$__status" -eq 2 ] || {') and body[2:] == ["echo done", ": docs test: not run here: a remote Ray cluster"]


def run_block(block: Block, workdir: Path, env: dict[str, str]) -> list[str]:
    """Run a block as a bash script in a fresh copy of the repository; the problems found."""
    repo = workdir / "repo"
    repo.mkdir()
    copy_repository(repo)
    script = workdir / "block.sh"
    script.write_text(shell_script(block), encoding="utf-8")
    env = {**env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])}
    try:
        done = subprocess.run(["bash", str(script)], cwd=repo, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired as exc:
        return [f"{block.where}: did not end in {exc.timeout} s"]
    if done.returncode != 0:
        return [f"{block.where} exited {done.returncode}:\n{done.stderr[-3000:]}"]
    return [f"{block.where}: `{' '.join(c.words)} > {c.stdout}` does not write JSON (add --json?): {problem}"
            for c in documented_commands(block) if c.stdout and c.allowed is None and c.stdout.endswith((".json", ".jsonl"))
            if (problem := json_problem(repo / c.stdout))]


def json_problem(path: Path) -> str | None:
    """Why the file a documented command's stdout went to is not JSON (or JSON lines); None if it is."""
    text = path.read_text(encoding="utf-8")
    try:
        json.loads(text)
    except json.JSONDecodeError:
        try:
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
        except json.JSONDecodeError as exc:
            return f"{exc}: {text[:200]!r}"
    return None


@pytest.fixture(scope="module")
def command_runs(model_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every runnable block but the Ray ones, run at once (threads, each its own repository copy)."""
    blocks = [b for b in RUN_BLOCKS if not _uses_ray(b)]
    work = tmp_path_factory.mktemp("commands")

    def one(index: int, block: Block) -> list[str]:
        workdir = work / str(index)
        workdir.mkdir()
        return run_block(block, workdir, offline_env(model_url, workdir))

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {b.where: pool.submit(one, i, b) for i, b in enumerate(blocks)}
        return {where: future.result() for where, future in futures.items()}


@pytest.mark.parametrize("block", [
    pytest.param(b, marks=[pytest.mark.xdist_group("ray")] if _uses_ray(b) else []) for b in RUN_BLOCKS
], ids=ids(RUN_BLOCKS))
def test_shell_blocks_run_as_written(block: Block, request: pytest.FixtureRequest, model_url: str, tmp_path: Path,
                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each shell block (and each console sample's ``$`` lines) runs offline as a bash script from a
    copy of the repository, with ``set -eo pipefail``: every command exits 0, or with the status a
    ``# exit status N`` comment on its line gives."""
    if _uses_ray(block):  # a local Ray instance: not next to the others (one Ray at a time)
        with ray_serial(tmp_path_factory):
            problems = run_block(block, tmp_path, offline_env(model_url, tmp_path))
    else:
        problems = request.getfixturevalue("command_runs")[block.where]
    assert not problems, "\n".join(problems)


def test_docs_name_the_documents_they_scan() -> None:
    assert ROOT / "README.md" in documents() and len(documents()) > 5


def test_a_json_file_a_command_writes_is_checked(tmp_path: Path) -> None:
    for text, ok in (('{"a": 1}\n', True), ('{"a": 1}\n{"b": 2}\n', True), ("scorer  mean\nexact   1.000\n", False)):
        (tmp_path / "out.json").write_text(text)
        assert (json_problem(tmp_path / "out.json") is None) is ok, text

"""Durable runs through ``dsh-orchestra run`` as real processes: SIGKILL at random moments and
``--resume``, interrupts answered with ``--answer`` or on a terminal (a pty), exit status 3.

The simulator runs as a process behind ``wire_tap.py``, which logs every ``session/prompt`` the
client writes, so prompts are counted on the wire across kills.
"""

from __future__ import annotations

import json
import os
import pty
import random
import selectors
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh_orchestra.cli._main import build_parser

from .workflow_support import RECIPES

CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]
TAP = Path(__file__).with_name("wire_tap.py")


def tapped(log: Path, script: Path) -> list[str]:
    """Runtime options: the simulator as a process, behind the wire tap writing ``log``."""
    sim = shlex.join([sys.executable, "-m", "dsh_orchestra.testing", "sim", "--script", str(script)])
    return ["--runtime-command", f"{shlex.join([sys.executable, str(TAP), str(log)])} -- {sim}"]


def prompts(log: Path) -> list[str]:
    """The text of every prompt in a tap log (a line cut short by a kill is left out)."""
    if not log.exists():
        return []
    out = []
    for line in log.read_bytes().splitlines():
        try:
            frame = json.loads(line)
        except json.JSONDecodeError:
            continue
        out.append(frame["params"]["contentBlocks"][0]["text"])
    return out


def comparable(data: dict[str, Any]) -> dict[str, Any]:
    """A result document without timings and session ids."""
    data = json.loads(json.dumps(data))
    data.pop("duration_s")
    for step in data["steps"].values():
        step.pop("started_s"), step.pop("duration_s")
        for item in step["items"]:
            item.pop("started_s"), item.pop("duration_s"), item.pop("session_id")
    return data


def leftovers(marker: str) -> list[psutil.Process]:
    """Processes whose command line mentions ``marker`` (a test's own temporary path)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def reap(marker: str) -> None:
    """Wait for every process of a killed run to be gone (bounded); fail if one stays."""
    gone, alive = psutil.wait_procs(leftovers(marker), timeout=20)
    assert alive == [], f"processes left behind: {alive}"


FIFTY = '''
from dsh_orchestra.workflow import StepContext, Workflow

SCRIPT = "scenario.toml"
workflow = Workflow("fifty")


@workflow.step()
async def seed(ctx: StepContext) -> list[int]:
    return list(range(10))


workflow.prompt("work", "WORK item {item}", fan_out="seed")
previous = "work"
for n in range(1, 39):
    name = f"c{n:02d}"
    workflow.prompt(name, "CHAIN " + name + " after {" + previous + "!s:.12}", depends_on=previous)
    previous = name
for n in range(1, 10):
    workflow.prompt(f"s{n}", f"SIDE s{n}")


@workflow.step(depends_on=[previous] + [f"s{n}" for n in range(1, 10)])
async def final(ctx: StepContext) -> dict[str, str]:
    return {key: str(value)[:20] for key, value in sorted(ctx.inputs.items())}
'''

FIFTY_SCENARIO = """
[[rules]]
name = "work"
match = "WORK"
reply = "worked"
delay = 0.4

[[rules]]
name = "chain"
match = "CHAIN"
reply = "linked"
delay = 0.06

[[rules]]
name = "side"
match = "SIDE"
reply = "side"
delay = 1.5
"""


def key_of(prompt: str) -> tuple[str, int]:
    """The (step path, items.idx) a prompt of the fifty-step recipe belongs to."""
    words = prompt.split()
    if words[0] == "WORK":
        return "work", int(words[2])
    return words[1], -1


def completed(checkpoint: Path) -> set[tuple[str, int]]:
    if not checkpoint.exists():
        return set()
    with sqlite3.connect(checkpoint) as db:
        return set(db.execute("SELECT path, idx FROM items"))


def run_and_kill(argv: list[str], fifo: Path, after: int, cwd: Path) -> tuple[list[str], bool]:
    """Run ``argv`` (its wire tap writing to the named pipe ``fifo``); SIGKILL its whole process
    group right after the ``after``-th prompt crossed the wire. Returns the prompts seen and
    whether it was killed (False: it finished first)."""
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a reader (and a writer: never end of file)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
    seen: list[str] = []
    buffer = b""
    killed = False
    deadline = time.monotonic() + 120
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while not killed:
                assert time.monotonic() < deadline, "the run neither finished nor reached its kill point"
                if selector.select(timeout=0.2):
                    buffer += os.read(fd, 1 << 16)
                    *lines, buffer = buffer.split(b"\n")
                    seen += [json.loads(line)["params"]["contentBlocks"][0]["text"] for line in lines if line]
                    if len(seen) >= after:
                        os.killpg(proc.pid, signal.SIGKILL)
                        killed = True
                elif proc.poll() is not None:
                    break
        proc.wait(timeout=30)
    finally:
        os.close(fd)
    return seen, killed


def test_five_sigkills_at_random_moments_then_resume_equal_an_uninterrupted_run(tmp_path: Path) -> None:
    """Five rounds, each SIGKILLed (the CLI, the wire tap and the simulator: the process group)
    at a random point of its progress: right after the k-th prompt it sends, k drawn with a
    fixed seed among the prompts still to send; each round resumes the last one."""
    recipe = tmp_path / "fifty.py"
    recipe.write_text(FIFTY)
    (tmp_path / "scenario.toml").write_text(FIFTY_SCENARIO)
    home = tmp_path / "home"
    home.mkdir()
    base = [*CLI, "run", str(recipe), "--json", "--no-progress", "--dsh-home", str(home)]

    baseline = subprocess.run(base, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert baseline.returncode == 0, baseline.stderr
    expected = comparable(json.loads(baseline.stdout))
    assert len(expected["steps"]) == 50

    checkpoint = tmp_path / "fifty.ckpt"
    rng = random.Random(20261201)
    total = 10 + 38 + 9  # prompts: the fan-out items, the chain, the side steps
    done_before: set[tuple[str, int]] = set()
    all_sent: list[tuple[str, int]] = []
    for round_ in range(5):
        resume = ["--resume"] if checkpoint.exists() else []
        fifo = tmp_path / f"wire-{round_}.fifo"
        argv = [*base, "--checkpoint", str(checkpoint), *resume, *tapped(fifo, tmp_path / "scenario.toml")]
        left = total - len(done_before)
        seen, killed = run_and_kill(argv, fifo, rng.randint(1, max(1, left // 3)), tmp_path)
        assert killed, f"round {round_} finished before its kill point"
        reap(str(tmp_path))
        sent = [key_of(p) for p in seen]
        assert not set(sent) & done_before, f"round {round_} sent completed prompts again: {set(sent) & done_before}"
        all_sent += sent
        done_before = completed(checkpoint)
    assert 0 < len(done_before) < total

    log = tmp_path / "wire-final.jsonl"
    final = subprocess.run(
        [*base, "--checkpoint", str(checkpoint), "--resume", *tapped(log, tmp_path / "scenario.toml")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert final.returncode == 0, final.stderr
    sent = [key_of(p) for p in prompts(log)]
    assert not set(sent) & done_before
    assert len(sent) == len(set(sent))
    assert comparable(json.loads(final.stdout)) == expected
    all_sent += sent
    assert set(all_sent) == {("work", i) for i in range(10)} | {(f"c{n:02d}", -1) for n in range(1, 39)} | {
        (f"s{n}", -1) for n in range(1, 10)
    }


def test_review_with_human_recipe_answered_with_answer(tmp_path: Path) -> None:
    recipe = RECIPES / "review_with_human"
    script = recipe / "scenario.toml"
    checkpoint = tmp_path / "review.ckpt"
    home = tmp_path / "home"
    home.mkdir()
    base = [*CLI, "run", str(recipe), "--json", "--checkpoint", str(checkpoint), "--dsh-home", str(home)]
    first = subprocess.run([*base, *tapped(tmp_path / "w1", script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    data = json.loads(first.stdout)
    question = "Publish this summary? Batch retries now back off for at most 30 s, with jitter."
    assert data["pending"] == [{"id": "approval:0", "question": question, "choices": ["approve", "reject"]}]
    assert f"  approval:0: {question} (choices: approve, reject)" in first.stderr
    assert data["status"] == "interrupted"

    second = subprocess.run(
        [*base, "--resume", "--answer", "approval:0=approve", *tapped(tmp_path / "w2", script)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    data = json.loads(second.stdout)
    assert data["pending"] == []
    assert data["steps"]["approval"]["output"] == "approve"
    assert data["steps"]["publish"]["output"].startswith("Published: ")
    assert data["steps"]["revise"]["status"] == "skipped"
    assert [p.split()[0] for p in prompts(tmp_path / "w2")] == ["PUBLISH"]  # the summary was not asked again

    rejected = tmp_path / "rejected.ckpt"
    run = [*CLI, "run", str(recipe), "--json", "--checkpoint", str(rejected)]
    assert subprocess.run(run, capture_output=True, timeout=60, cwd=tmp_path).returncode == 3
    third = subprocess.run([*run, "--resume", "--answer", "approval:0=reject"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["steps"]["publish"]["status"] == "skipped"


SUB = '''
from dsh_orchestra.workflow import StepContext, Workflow

SCRIPT = "scenario.toml"
child = Workflow("child")
child.prompt("draft", "DRAFT the post")


@child.step(depends_on="draft")
async def check(ctx: StepContext) -> str:
    return await ctx.interrupt("publish it?", choices=["yes", "no"])


child.prompt("publish", "PUBLISH {draft}", depends_on=["draft", "check"])
workflow = Workflow("parent")
workflow.prompt("intro", "INTRO")
workflow.subworkflow("post", child, depends_on="intro")
'''

SUB_SCENARIO = """
[[rules]]
name = "draft"
match = "DRAFT"
reply = "drafted"

[[rules]]
name = "publish"
match = "PUBLISH"
reply = "published"

[[rules]]
name = "intro"
match = "INTRO"
reply = "hello"
"""


def test_an_interrupt_in_a_subworkflow_survives_a_kill_on_a_terminal_and_resumes_in_place(tmp_path: Path) -> None:
    """On a pty the terminal asks; the run is SIGKILLed while it waits; --answer then resumes."""
    (tmp_path / "sub.py").write_text(SUB)
    script = tmp_path / "scenario.toml"
    script.write_text(SUB_SCENARIO)
    checkpoint = tmp_path / "sub.ckpt"
    home = tmp_path / "home"
    home.mkdir()
    base = [*CLI, "run", str(tmp_path / "sub.py"), "--json", "--checkpoint", str(checkpoint), "--dsh-home", str(home)]
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*base, *tapped(tmp_path / "w1", script)], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=tmp_path, start_new_session=True,
    )
    os.close(slave)
    try:
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 60
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stderr, selectors.EVENT_READ)
            while b"(empty: answer later) >" not in seen:
                assert time.monotonic() < deadline, seen
                if selector.select(timeout=1):
                    chunk = os.read(proc.stderr.fileno(), 4096)
                    assert chunk, seen
                    seen += chunk
        assert b"post/check:0: publish it? [yes/no]" in seen
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        os.close(master)
    reap(str(tmp_path))
    assert sorted(p.split()[0] for p in prompts(tmp_path / "w1")) == ["DRAFT", "INTRO"]

    resumed = subprocess.run(
        [*base, "--resume", "--answer", "post/check:0=yes", *tapped(tmp_path / "w2", script)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["steps"]["post"]["output"] == {"draft": "drafted", "check": "yes", "publish": "published"}
    assert data["steps"]["post/draft"]["status"] == "ok"
    assert [p.split()[0] for p in prompts(tmp_path / "w2")] == ["PUBLISH"]  # intro and draft were not run again


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--answer", "approval:0=approve"], "--answer answers the interrupts of a checkpoint"),
        (["--resume"], "--resume needs --checkpoint PATH"),
        (["--checkpoint", "{ckpt}", "--resume", "--answer", "nope:0=x"], "no pending interrupt 'nope:0' (pending: approval:0)"),
        (["--checkpoint", "{ckpt}", "--resume", "--answer", "approval:0=maybe"], "choose one of approve, reject"),
        (["--checkpoint", "{ckpt}", "--resume", "--answer", "novalue"], "--answer takes ID=VALUE"),
        (["--checkpoint", "{ckpt}"], "--resume: checkpoint"),
        (["--checkpoint", "{missing}", "--resume"], "--checkpoint: there is no checkpoint at"),
        (["--checkpoint", "{ckpt}", "--resume", "--input", "change=other"], "--input: checkpoint"),
    ],
)
def test_cli_durability_flags_exit_2_for_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    ckpt = tmp_path / "r.ckpt"
    args = build_parser().parse_args(["run", str(RECIPES / "review_with_human"), "--checkpoint", str(ckpt), "--no-progress"])
    assert args.func(args) == 3
    capsys.readouterr()
    filled = [a.format(ckpt=ckpt, missing=tmp_path / "missing") for a in argv]
    args = build_parser().parse_args(["run", str(RECIPES / "review_with_human"), "--no-progress", *filled])
    assert args.func(args) == 2
    assert message in capsys.readouterr().err

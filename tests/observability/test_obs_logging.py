"""Logging: one logger per layer, silent unless configured, context fields on every record,
secrets redacted, JSON lines for --log-file."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import trio

from obs_support import SCENARIO
from dsh_orchestra import Decision, log_context
from dsh_orchestra._logging import (
    JsonFormatter,
    SessionContexts,
    TextFormatter,
    configure_logging,
    current_context,
    register_secrets,
)
from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.runtime import RuntimeSpec

LAYERS = ("transport", "runtime", "session", "approvals", "pool", "workflow", "batch", "session.relay")
SECRET = "sk-obs-test-0123456789abcdef"


def records_of(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name or r.name.startswith(name + ".")]


def test_the_library_prints_nothing_unless_configured() -> None:
    """A NullHandler on "dsh_orchestra", so Python's last-resort handler never prints our warnings."""
    code = (
        "import logging, dsh_orchestra\n"
        "assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger('dsh_orchestra').handlers)\n"
        "logging.getLogger('dsh_orchestra.batch').warning('you should not see this')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""


def test_context_fields_on_every_layer_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="dsh_orchestra")
    with log_context(runtime="rt-1"):
        with log_context(session="s-1", item="i-1"):
            for layer in LAYERS:
                logging.getLogger(f"dsh_orchestra.{layer}").info("hello from %s", layer)
            with log_context(item="i-2", session=None):  # None keeps the outer value
                logging.getLogger("dsh_orchestra.batch").info("inner")
        logging.getLogger("dsh_orchestra.runtime").info("outer")
    logging.getLogger("dsh_orchestra.runtime").info("outside")
    by_message = {r.getMessage(): r for r in caplog.records}
    for layer in LAYERS:
        record = by_message[f"hello from {layer}"]
        assert (record.runtime, record.session, record.item) == ("rt-1", "s-1", "i-1")  # type: ignore[attr-defined]
    assert (by_message["inner"].session, by_message["inner"].item) == ("s-1", "i-2")  # type: ignore[attr-defined]
    assert (by_message["outer"].runtime, by_message["outer"].session) == ("rt-1", None)  # type: ignore[attr-defined]
    assert by_message["outside"].runtime is None  # type: ignore[attr-defined]
    explicit = logging.LogRecord("dsh_orchestra.batch", logging.INFO, __file__, 1, "x", None, None)
    explicit.session = "given"
    with log_context(session="ctx"):
        logging.getLogger("dsh_orchestra.batch").handle(explicit)
    assert explicit.session == "given"
    with pytest.raises(ValueError, match="log_context takes"):
        with log_context(user="x"):  # type: ignore[arg-type]
            pass


async def test_trio_tasks_inherit_the_context(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dsh_orchestra")
    log = logging.getLogger("dsh_orchestra.pool")

    async def child(name: str) -> None:
        await trio.lowlevel.checkpoint()
        log.info("child %s", name)

    async with trio.open_nursery() as nursery:
        with log_context(item="a"):
            nursery.start_soon(child, "a")
        with log_context(item="b"):
            nursery.start_soon(child, "b")
    items = {r.getMessage(): r.item for r in caplog.records}  # type: ignore[attr-defined]
    assert items == {"child a": "a", "child b": "b"}
    assert current_context() == {}


def test_session_contexts_find_the_turn_of_a_session() -> None:
    contexts = SessionContexts()
    with log_context(item="item-7"):
        with log_context(runtime="rt", session="s-7") as fields, contexts.bind("s-7", fields, "span-ctx"):
            assert contexts.fields("s-7") == {"item": "item-7", "runtime": "rt", "session": "s-7"}
            assert contexts.trace_context("s-7") == "span-ctx"
            assert SessionContexts().fields("s-7") == {}  # another runtime's registry knows nothing
    assert contexts.fields("s-7") == {} and contexts.trace_context("s-7") is None
    assert len(contexts) == 0


def test_secrets_are_redacted_from_message_args_and_exceptions(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dsh_orchestra")
    register_secrets([SECRET, "ab"])  # too short values are never registered
    log = logging.getLogger("dsh_orchestra.runtime")
    log.info("key=%s in %r", SECRET, {"k": SECRET})
    log.info(f"inline {SECRET} and abc")
    try:
        raise RuntimeError(f"failed with {SECRET}")
    except RuntimeError:
        log.exception("boom")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    for record in caplog.records:
        handler.handle(record)
    text = stream.getvalue() + "".join(r.getMessage() for r in caplog.records)
    assert SECRET not in text
    assert "key=*** in {'k': '***'}" in text and "inline *** and abc" in text
    assert "RuntimeError: failed with ***" in text


def test_json_formatter_and_log_file(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    console = io.StringIO()
    configure_logging("debug", path, stream=console)
    with log_context(runtime="r", session="s", item="i"):
        logging.getLogger("dsh_orchestra.session").debug("debug line")
        logging.getLogger("dsh_orchestra.session").warning("warn line")
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [(r["level"], r["logger"], r["message"], r["runtime"], r["session"], r["item"]) for r in lines] == [
        ("debug", "dsh_orchestra.session", "debug line", "r", "s", "i"),
        ("warning", "dsh_orchestra.session", "warn line", "r", "s", "i"),
    ]
    assert lines[0]["time"].endswith("Z")
    assert console.getvalue() == "WARNING dsh_orchestra.session: warn line [runtime=r session=s item=i]\n"  # stderr: warnings only
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "m", None, None)
    assert orjson.loads(JsonFormatter().format(record))["runtime"] is None
    with pytest.raises(ValueError, match="log level"):
        configure_logging("loud")


async def test_real_batch_records_carry_runtime_session_and_item(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On the simulator: the approval decision's record (logged in a handler task of the
    connection, not in the item's task) still knows its item."""
    caplog.set_level(logging.DEBUG, logger="dsh_orchestra")
    (tmp_path / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    dataset = tmp_path / "data.jsonl"
    dataset.write_text('{"id": "ask", "prompt": "APPROVE this"}\n{"id": "plain", "prompt": "hi"}\n', encoding="utf-8")
    spec = RuntimeSpec.simulator(script=tmp_path / "scenario.toml", dsh_home=tmp_path, cwd=tmp_path, api_key=SECRET)
    options = BatchOptions(policy=lambda request: Decision(outcome="allowed-once", rule=f"allow-{SECRET}"), progress="none")
    with trio.fail_after(30):
        summary = await run_batch(dataset, tmp_path / "results.jsonl", spec, options)
    assert summary.ok == 2
    results = {orjson.loads(line)["id"]: orjson.loads(line) for line in (tmp_path / "results.jsonl").read_bytes().splitlines()}
    decisions = [r for r in records_of(caplog, "dsh_orchestra.approvals") if r.getMessage().startswith("approval ")]
    assert len(decisions) == 1
    decision = decisions[0]
    assert decision.item == "ask"  # type: ignore[attr-defined]
    assert decision.session == results["ask"]["session_id"]  # type: ignore[attr-defined]
    assert decision.runtime == "sim#0"  # type: ignore[attr-defined]
    assert SECRET not in decision.getMessage() and "allow-***" in decision.getMessage()
    ready = [r for r in records_of(caplog, "dsh_orchestra.runtime") if "ready" in r.getMessage()]
    assert ready and all(r.runtime == "sim#0" for r in ready)  # type: ignore[attr-defined]
    for record in caplog.records:
        if record.name.startswith("dsh_orchestra"):
            assert hasattr(record, "runtime") and hasattr(record, "session") and hasattr(record, "item")
            assert SECRET not in record.getMessage()


def test_cli_log_options(tmp_path: Path) -> None:
    """``dsh-orchestra --log-level info --log-file F batch ...``: JSON records with their fields,
    the inherited secret redacted (registered when the runtime starts)."""
    (tmp_path / "scenario.toml").write_text(SCENARIO, encoding="utf-8")
    (tmp_path / "policy.toml").write_text(f'[[rules]]\nname = "allow-{SECRET}"\noutcome = "allowed-once"\ntools = "bash"\n', encoding="utf-8")
    (tmp_path / "data.jsonl").write_text('{"id": "ask-1", "prompt": "APPROVE"}\n{"id": "kids", "prompt": "SPAWN"}\n', encoding="utf-8")
    script = Path(sys.executable).with_name("dsh-orchestra")
    command = [str(script)] if script.exists() else [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]
    env = {**os.environ, "DSH_ORCHESTRA_TEST_TOKEN": SECRET, "DSH_TELEMETRY_MODE": "DISABLED"}
    done = subprocess.run(
        [*command, "--log-level", "info", "--log-file", "run.log", "batch", "data.jsonl", "--out", "results.jsonl",
         "--runtime", "sim", "--script", "scenario.toml", "--policy", "policy.toml", "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "run.log").read_text(encoding="utf-8")
    assert SECRET not in log and SECRET not in done.stderr
    records = [orjson.loads(line) for line in log.splitlines()]
    approval = [r for r in records if r["logger"] == "dsh_orchestra.approvals" and r["message"].startswith("approval ")]
    assert len(approval) == 1 and approval[0]["item"] == "ask-1" and approval[0]["runtime"] == "sim#0"
    assert "allow-***" in approval[0]["message"]
    assert approval[0]["session"].startswith("item-")
    assert {r["level"] for r in records} <= {"info", "warning", "error"}
    bad = subprocess.run([*command, "--log-level", "loud", "batch", "x", "--out", "y"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--log-level" in bad.stderr

"""The runtime actor against a tiny stand-in runtime process (tiny_runtime.py).

Covers: ready only after initialize; what reaches the child (argv, env, absolute cwd);
failed, timed-out and retried handshakes; crash detection for every waiter; the close ladder
(shutdown, stdin EOF, SIGTERM, SIGKILL); reaping on every path; secrets kept out of errors and
logs. Every test checks the process table afterwards (and conftest checks for leaked children).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
import trio.testing
from process_table import assert_gone, group_members

from dsh_orchestra.protocol import RuntimeExitedError, RuntimeStartError, TransportClosedError
from dsh_orchestra.runtime import RuntimeActor, RuntimeSpec, StderrTail
from dsh_orchestra.session import open_runtime

TINY = Path(__file__).with_name("tiny_runtime.py")
API_KEY = "sk-live-0123456789abcdef"
TOKEN = "tok-fedcba9876543210"
FAST_LADDER = dict(shutdown_timeout=0.3, eof_grace=0.3, terminate_grace=0.3)


def tiny(tmp_path: Path, mode: str, *, env: dict[str, str] | None = None, **kwargs: Any) -> RuntimeSpec:
    """A spec launching tiny_runtime.py in ``mode``, recording into tmp_path/record.jsonl."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    kwargs.setdefault("cwd", tmp_path)
    base = {"TINY_RECORD": str(tmp_path / "record.jsonl")}
    return RuntimeSpec(command=(sys.executable, "-I", str(TINY), mode), dsh_home=home, env={**base, **(env or {})},
                       **kwargs)


def recorded(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ---- start and handshake ------------------------------------------------------------------


async def test_ready_only_after_initialize(tmp_path: Path) -> None:
    """nursery.start returns once initialize was answered, not when the process is up.

    The runtime answers initialize only once the probe has looked (it opens the gate), so the
    probe sees the in-between state however long the spawn takes (a fixed wait of 0.2 s, the
    test before, assumed the spawn took less on a loaded machine)."""
    gate = tmp_path / "answer-initialize"
    actor = RuntimeActor(tiny(tmp_path, "ok", env={"TINY_INIT_GATE": str(gate)}))
    seen: list[tuple[bool, bool]] = []

    async def probe() -> None:
        while not (tmp_path / "record.jsonl").exists():  # noqa: ASYNC110 - another process's file: no event
            await trio.sleep(0.01)  # it has received initialize
        seen.append((actor.process is not None, actor.connection is None))
        await trio.Path(gate).touch()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe)
            await nursery.start(actor.run)
            assert seen == [(True, True)]  # spawned, but not usable until initialize was answered
            assert actor.connection is not None and actor.server_info is not None
            assert actor.server_info.server_info.name == "tiny-runtime"
            pid = actor.pid
            await actor.aclose()
    assert pid is not None
    assert_gone(pid)
    assert actor.process is not None and actor.process.returncode == 0


async def test_relative_directories_are_absolute_in_initialize_and_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative workspace reaches initialize absolute; the process runs in process_cwd."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "proc").mkdir()
    monkeypatch.chdir(tmp_path)
    spec = tiny(tmp_path, "ok", cwd="ws", process_cwd="proc")
    monkeypatch.chdir("/")  # fixed when the spec was made, not when it is launched
    with trio.fail_after(30):
        async with open_runtime(spec):
            pass
    [start] = recorded(tmp_path)
    assert start["initialize"]["cwd"] == str(tmp_path / "ws")
    assert os.path.isabs(start["initialize"]["cwd"])
    assert await trio.Path(start["cwd"]).resolve() == await trio.Path(tmp_path, "proc").resolve()


async def test_workspace_is_the_process_cwd_by_default(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    with trio.fail_after(30):
        async with open_runtime(tiny(tmp_path, "ok", cwd=tmp_path / "ws")):
            pass
    [start] = recorded(tmp_path)
    assert await trio.Path(start["cwd"]).resolve() == await trio.Path(tmp_path, "ws").resolve()


async def test_child_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """env overrides reach the child; base_url/api_key win over env and inherited values."""
    monkeypatch.setenv("INHERITED_VAR", "from-parent")
    monkeypatch.setenv("DEEPSEEK_BASE_URL", "http://inherited.invalid")
    names = "INHERITED_VAR,EXTRA,DEEPSEEK_BASE_URL,DEEPSEEK_API_KEY,DSH_HOME,DSH_TELEMETRY_MODE"
    spec = tiny(tmp_path, "ok", base_url="http://127.0.0.1:9", api_key=API_KEY,
                env={"TINY_ENV_NAMES": names, "EXTRA": "x", "DEEPSEEK_BASE_URL": "http://env.invalid",
                     "DSH_TELEMETRY_MODE": "DISABLED"})
    with trio.fail_after(30):
        async with open_runtime(spec):
            pass
        async with open_runtime(spec.evolve(inherit_env=False)):
            pass
    inherited, isolated = recorded(tmp_path)
    assert inherited["env"] == {
        "INHERITED_VAR": "from-parent", "EXTRA": "x", "DEEPSEEK_BASE_URL": "http://127.0.0.1:9",
        "DEEPSEEK_API_KEY": API_KEY, "DSH_HOME": str(tmp_path / "home"), "DSH_TELEMETRY_MODE": "DISABLED"}
    assert isolated["env"]["INHERITED_VAR"] is None and isolated["env"]["EXTRA"] == "x"
    assert inherited["argv"][1:] == ["ok"]  # an explicit command gets no --profile


async def test_rejected_handshake_reaps_and_keeps_secrets_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """RuntimeStartError names command and profile and carries the stderr tail, redacted."""
    caplog.set_level(logging.DEBUG)
    spec = tiny(tmp_path, "reject", api_key=API_KEY, env={"MY_SERVICE_TOKEN": TOKEN})
    actor = RuntimeActor(spec)
    with trio.fail_after(30), pytest.raises(RuntimeStartError) as caught:
        await actor.run()  # bare; nursery.start inside a nursery would wrap it in a group
    error = caught.value
    text = str(error)
    assert "tiny_runtime.py reject" in text and "(profile 'sdk')" in text
    assert "initialize was rejected: bad credentials ***" in text
    assert "using key *** and token ***" in error.stderr_tail
    assert error.command == spec.display_name and error.profile == "sdk"
    everything = [text, repr(error), error.stderr_tail, error.reason, repr(spec), str(spec)]
    everything += [record.getMessage() for record in caplog.records]
    everything += [str(record.args) for record in caplog.records]
    for item in everything:
        assert API_KEY not in item and TOKEN not in item
    assert actor.pid is not None
    assert_gone(actor.pid)


async def test_open_runtime_raises_the_start_error_bare(tmp_path: Path) -> None:
    """A failed start is a plain RuntimeStartError from open_runtime, not an ExceptionGroup."""
    with trio.fail_after(30), pytest.raises(RuntimeStartError, match=r"went away during initialize \(exit status 3\)") as caught:
        async with open_runtime(tiny(tmp_path, "die", api_key=API_KEY)):
            pytest.fail("the block must not run")  # pragma: no cover
    assert caught.value.stderr_tail == "fatal: key=***"


async def test_handshake_timeout(tmp_path: Path) -> None:
    """A runtime that never answers initialize is reaped after handshake_timeout."""
    actor = RuntimeActor(tiny(tmp_path, "silent", handshake_timeout=0.5, **FAST_LADDER))
    start = trio.current_time()
    with trio.fail_after(30), pytest.raises(RuntimeStartError, match=r"initialize did not answer within 0\.5 s"):
        await actor.run()
    # Given up at 0.5 s, then the runtime exits at stdin EOF. The upper bound only tells the
    # 0.5 s from the 30 s default; 3 s (before) left a loaded machine's spawn and exit too little.
    assert 0.5 <= trio.current_time() - start < 15.0
    assert actor.pid is not None
    assert_gone(actor.pid)


async def test_spawn_failure(tmp_path: Path) -> None:
    spec = RuntimeSpec(command=[str(tmp_path / "no-such-runtime")], dsh_home=tmp_path, cwd=tmp_path)
    with trio.fail_after(30), pytest.raises(RuntimeStartError, match="no-such-runtime.*cannot spawn"):
        async with open_runtime(spec):
            pass  # pragma: no cover


async def test_handshake_attempts_retry_with_a_fresh_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The first process dies; the second is a new process and the runtime works normally."""
    counter = tmp_path / "starts"
    spec = tiny(tmp_path, "flaky", handshake_attempts=2, env={"TINY_COUNTER": str(counter)})
    with trio.fail_after(30):
        async with open_runtime(spec) as runtime:
            assert counter.read_text() == "2"
            [start] = recorded(tmp_path)
            assert start["pid"] == runtime.actor.pid
            # the failed attempt must not have failed the session router
            with runtime.session("s1").events() as events:
                with pytest.raises(trio.WouldBlock):
                    events.receive_nowait()
            assert await runtime.connection.request("anything") == {}
    assert any("handshake attempt 1/2 failed" in r.getMessage() for r in caplog.records)
    with trio.fail_after(30), pytest.raises(RuntimeStartError):
        counter.unlink()
        async with open_runtime(spec.evolve(handshake_attempts=1)):
            pass  # pragma: no cover


async def test_cancelled_during_handshake_reaps(tmp_path: Path) -> None:
    actor = RuntimeActor(tiny(tmp_path, "silent"))
    with trio.fail_after(30):
        with trio.move_on_after(0.5) as scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(actor.run)
    assert scope.cancelled_caught
    assert actor.pid is not None
    assert_gone(actor.pid)


# ---- crashes ------------------------------------------------------------------------------


async def test_crash_fails_every_waiter_with_exit_status_and_stderr(tmp_path: Path) -> None:
    """Pending requests, a subscription and later requests all learn the exit status."""
    failures: list[BaseException] = []

    async def pending(call: Any) -> None:
        try:
            await call()
        except TransportClosedError as exc:
            failures.append(exc)

    # exit_wait 60: had the actor waited for it (instead of seeing the exit), fail_after fires
    with trio.fail_after(30):
        async with open_runtime(tiny(tmp_path, "ok", api_key=API_KEY, exit_wait=60.0)) as runtime:
            pid = runtime.actor.pid
            events = runtime.session("s1").events()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pending, lambda: runtime.connection.request("test/hang-1"))
                nursery.start_soon(pending, lambda: runtime.connection.request("test/hang-2"))
                nursery.start_soon(pending, events.receive)
                await trio.testing.wait_all_tasks_blocked()  # both requests written, all three waiting
                start = trio.current_time()
                nursery.start_soon(pending, lambda: runtime.connection.request(
                    "test/crash", {"code": 7, "stderr": f"segfault near {API_KEY}"}))
            # at once, not after a timeout: the waits on this path are under a second (the stderr
            # drain's); 2 s (before) left a loaded machine's child too little to exit
            assert trio.current_time() - start < 10.0
            assert len(failures) == 4
            for failure in failures:
                assert isinstance(failure, TransportClosedError)
                assert failure.returncode == 7
                assert failure.stderr_tail == "segfault near ***"
                assert "exit status 7" in str(failure) and API_KEY not in str(failure)
            assert isinstance(runtime.actor.exit_error, RuntimeExitedError)
            assert not runtime.alive
            with pytest.raises(TransportClosedError, match="exit status 7"):
                await runtime.connection.request("anything")
    assert pid is not None
    assert_gone(pid)


async def test_crash_is_noticed_while_a_child_holds_stdout_open(tmp_path: Path) -> None:
    """No end of file (a grandchild inherited stdout): the exit itself still fails waiters."""
    with trio.fail_after(30):  # exit_wait 60: had the actor waited for it, fail_after fires
        async with open_runtime(tiny(tmp_path, "ok", exit_wait=60.0)) as runtime:
            pid = runtime.actor.pid
            grandchild = (await runtime.connection.request("test/spawn"))["pid"]
            start = trio.current_time()
            with pytest.raises(TransportClosedError) as caught:
                await runtime.connection.request("test/crash", {"code": 5, "stderr": "bye"})
            # the exit is seen after EOF_AFTER_EXIT (0.5 s) and the stderr drain's 0.5 s: about
            # 1 s; 3 s (before) left a loaded machine too little
            assert trio.current_time() - start < 10.0
            assert caught.value.returncode == 5
    assert pid is not None
    assert_gone(pid)
    assert grandchild not in group_members(pid)


async def test_runtime_exiting_by_itself_stops_the_actor(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_runtime(tiny(tmp_path, "ok")) as runtime:
            with pytest.raises(TransportClosedError):
                await runtime.connection.request("test/crash", {"code": 0})
            await runtime.actor.wait_stopped()
            assert runtime.actor.exit_error is not None and runtime.actor.exit_error.returncode == 0


# ---- closing ------------------------------------------------------------------------------


async def test_close_ladder_shutdown_request(tmp_path: Path) -> None:
    """A cooperative runtime answers shutdown and exits 0 at once.

    shutdown_timeout 20: closing ends well before it only when the answer ends the wait (the
    1 s default, with "< 1 s" as the check before, was crossed by a slow-but-correct child)."""
    mark = tmp_path / "shutdown-answered"
    with trio.fail_after(30):
        async with open_runtime(tiny(tmp_path, "ok", shutdown_timeout=20.0, env={"TINY_SHUTDOWN_MARK": str(mark)})) as runtime:
            actor = runtime.actor
            start = trio.current_time()
        assert trio.current_time() - start < 10.0
    assert mark.exists()  # it was asked, and answered
    assert actor.process is not None and actor.process.returncode == 0
    assert actor.pid is not None
    assert_gone(actor.pid)
    await actor.aclose()  # idempotent


@pytest.mark.parametrize(("ignore_term", "returncode", "lower"), [(False, -signal.SIGTERM, 0.6), (True, -signal.SIGKILL, 0.9)])
async def test_close_ladder_escalates(tmp_path: Path, ignore_term: bool, returncode: int, lower: float) -> None:
    """No shutdown answer, stdin EOF ignored: SIGTERM after the grace; ignored too: SIGKILL."""
    env = {"TINY_IGNORE_TERM": "1" if ignore_term else "0"}
    with trio.fail_after(30):
        async with open_runtime(tiny(tmp_path, "stubborn", env=env, **FAST_LADDER)) as runtime:
            actor = runtime.actor
            start = trio.current_time()
        elapsed = trio.current_time() - start
    assert lower <= elapsed < lower + 1.5
    assert actor.process is not None and actor.process.returncode == returncode
    assert actor.pid is not None
    assert_gone(actor.pid)


async def test_close_kills_the_whole_process_group(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_runtime(tiny(tmp_path, "ok")) as runtime:
            pid = runtime.actor.pid
            grandchild = (await runtime.connection.request("test/spawn"))["pid"]
            assert psutil.pid_exists(grandchild)
    assert pid is not None
    assert_gone(pid)
    assert grandchild not in group_members(pid)


async def test_cancelled_nursery_reaps(tmp_path: Path) -> None:
    """Cancelling the owning nursery walks the ladder too (shielded) and reaps."""
    actor = RuntimeActor(tiny(tmp_path, "stubborn", **FAST_LADDER))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            nursery.cancel_scope.cancel()
    assert actor.process is not None and actor.process.returncode is not None
    assert actor.pid is not None
    assert_gone(actor.pid)


async def test_error_in_the_block_reaps(tmp_path: Path) -> None:
    with trio.fail_after(30), pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="boom"), flatten_subgroups=True):
        async with open_runtime(tiny(tmp_path, "ok")) as runtime:
            pid = runtime.actor.pid
            raise ValueError("boom")
    assert pid is not None
    assert_gone(pid)


# ---- the stderr tail ----------------------------------------------------------------------


def test_stderr_tail_keeps_the_last_lines() -> None:
    """Bounded in lines and in bytes per line; the unfinished last line is shown too."""
    tail = StderrTail(max_lines=3, max_line_bytes=10)
    tail.feed(b"one\ntwo\nthr")
    tail.feed(b"ee\nfour\nfive-is-a-very-long-line\nsix")
    assert tail.text() == "three\nfour\nfive-is-a-\nsix"
    tail.feed(bytearray(b"\xff\r\n"))
    assert tail.text() == "four\nfive-is-a-\nsix\ufffd"


def test_the_name_is_worked_out_once_per_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every turn reads ``actor.name``: a command spec's name (its argv, redacted with the
    secrets found in the environment) is worked out once, again only for a new spec."""
    calls: list[RuntimeSpec] = []
    secrets = RuntimeSpec.secrets

    def counted(self: RuntimeSpec) -> list[str]:
        calls.append(self)
        return secrets(self)

    monkeypatch.setattr(RuntimeSpec, "secrets", counted)
    spec = tiny(tmp_path, "ok", api_key=API_KEY)
    actor = RuntimeActor(spec)
    assert [actor.name for _ in range(5)] == [spec.display_name] * 5
    assert len(calls) == 2  # once for the name, once for the expected value above
    renamed = spec.evolve(name="renamed")
    actor.spec = renamed
    assert actor.name == "renamed"
    other = tiny(tmp_path, "crash", api_key=API_KEY)
    actor.spec = other
    assert actor.name == other.display_name and "crash" in actor.name

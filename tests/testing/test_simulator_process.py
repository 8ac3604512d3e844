"""The simulator as a process: ``python -m dsh_orchestra.testing sim`` on stdio, and as the
official Python SDK's launch hook. Every process runs under ``trio.fail_after`` and is reaped
(the conftest fails a test that leaves a child behind).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from dsh_orchestra.protocol import JsonRpcResponseError, TransportClosedError
from dsh_orchestra.transport import Connection

from sim_support import INIT

SIM = (sys.executable, "-m", "dsh_orchestra.testing", "sim")
TIMEOUT = 30


def _env(dsh_home: Path | None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "DSH_HOME"}
    if dsh_home is not None:
        env["DSH_HOME"] = str(dsh_home)
    return env


class Sim:
    """A running simulator process and a client Connection on its stdio."""

    def __init__(self, process: trio.Process, connection: Connection) -> None:
        self.process = process
        self.connection = connection

    async def request(self, method: str, params: Any = None) -> Any:
        return await self.connection.request(method, params)

    async def run(self, session: str, text: str) -> str:
        result = await self.request("session/prompt", {"sessionId": session, "contentBlocks": [{"type": "text", "text": text}]})
        await self.request("session/wait", {"sessionId": session})
        return str(result["messageId"])

    async def exit_status(self) -> int:
        return await self.process.wait()

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        chunks = []
        while chunk := await self.process.stderr.receive_some(65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()


@asynccontextmanager
async def sim_process(*args: str, dsh_home: Path | None = None, cwd: Path | None = None,
                      initialize: bool = True) -> AsyncIterator[Sim]:
    """Spawn the simulator; the process is killed (if still running) and reaped on exit."""
    process = await trio.lowlevel.open_process(
        [*SIM, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=_env(dsh_home), cwd=cwd)
    try:
        assert process.stdin is not None and process.stdout is not None
        async with trio.open_nursery() as nursery:
            connection = Connection(trio.StapledStream(process.stdin, process.stdout), name="sim process")
            await nursery.start(connection.run)
            sim = Sim(process, connection)
            if initialize:
                await sim.request("initialize", {"cwd": str(cwd or os.getcwd()), **INIT})
            yield sim
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                with trio.move_on_after(5):
                    await process.wait()
            if process.returncode is None:
                process.kill()
            await process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    await pipe.aclose()


async def test_a_turn_then_shutdown_exits_0(tmp_path: Path) -> None:
    """--profile and --patch are accepted and ignored; after shutdown the process exits 0."""
    store = tmp_path / "store"
    with trio.fail_after(TIMEOUT):
        async with sim_process("--profile", "sdk", "--patch", str(tmp_path / "x.json"), "--store", str(store),
                               cwd=tmp_path) as sim:
            seen: list[Any] = []
            sim.connection.add_sink(seen.extend)
            await sim.run("p", "hello")
            ends = [n.params["event"]["data"] for n in seen if n.method == "session.event"
                    and n.params["event"]["type"] == "turn/end"]
            assert ends == [{"turn": 1, "reason": {"kind": "completed"}}]
            assert await sim.request("shutdown") == {}
            assert await sim.exit_status() == 0
        assert (store / "p.json").is_file()


async def test_the_default_store_is_under_dsh_home(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with sim_process(dsh_home=tmp_path) as sim:
            await sim.run("home-session", "hi")
            await sim.request("shutdown")
            assert await sim.exit_status() == 0
    assert (tmp_path / "sim-sessions" / "home-session.json").is_file()


async def test_without_a_store_it_refuses_to_start(tmp_path: Path) -> None:
    """No DSH_HOME and no --store: exit 2, and never a fallback to the home directory."""
    with trio.fail_after(TIMEOUT):
        result = await trio.run_process([*SIM], env=_env(None), cwd=tmp_path, capture_stdout=True,
                                        capture_stderr=True, check=False)
    assert result.returncode == 2
    assert b"give --store DIR or set DSH_HOME" in result.stderr and result.stdout == b""


async def test_a_bad_script_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rules]]\ndelay = -1\n")
    with trio.fail_after(TIMEOUT):
        result = await trio.run_process([*SIM, "--script", str(bad), "--store", str(tmp_path)], capture_stderr=True, check=False)
    assert result.returncode == 2 and b"key 'delay'" in result.stderr


async def test_end_of_input_exits_0(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with sim_process("--store", str(tmp_path)) as sim:
            await sim.run("s", "hi")
            assert sim.process.stdin is not None
            await sim.process.stdin.aclose()
            assert await sim.exit_status() == 0


async def test_a_scripted_crash_exits_3(tmp_path: Path) -> None:
    script = tmp_path / "crash.toml"
    script.write_text('[[rules]]\nmatch = "CRASH"\ncrash = true\n')
    with trio.fail_after(TIMEOUT):
        async with sim_process("--script", str(script), "--store", str(tmp_path / "store")) as sim:
            await sim.request("session/prompt", {"sessionId": "c", "contentBlocks": [{"type": "text", "text": "CRASH"}]})
            with pytest.raises(TransportClosedError):
                await sim.request("session/wait", {"sessionId": "c"})
            assert await sim.exit_status() == 3
            assert "simulated crash" in await sim.stderr()
        async with sim_process("--script", str(script), "--store", str(tmp_path / "store")) as sim:
            assert await sim.request("session/resume", {"sessionId": "c"}) == {}  # the owner mark was stale
            await sim.run("c", "after the crash")
            await sim.request("shutdown")


@pytest.mark.parametrize(("signal_number", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
async def test_signals(tmp_path: Path, signal_number: int, status: int) -> None:
    with trio.fail_after(TIMEOUT):
        async with sim_process("--store", str(tmp_path)) as sim:
            await sim.run("s", "hi")
            sim.process.send_signal(signal_number)
            assert await sim.exit_status() == status


async def test_sessions_survive_a_process_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    with trio.fail_after(TIMEOUT):
        async with sim_process("--store", store) as sim:
            await sim.run("persisted", "first")
            await sim.request("shutdown")
        async with sim_process("--store", store) as sim:
            with pytest.raises(JsonRpcResponseError, match='session "persisted" already exists'):
                await sim.request("session/prompt", {"sessionId": "persisted", "contentBlocks": []})
            assert await sim.request("session/resume", {"sessionId": "persisted"}) == {}
            seen: list[Any] = []
            sim.connection.add_sink(seen.extend)
            await sim.run("persisted", "second")
            starts = [n.params["event"] for n in seen if n.method == "session.event" and n.params["event"]["type"] == "turn/start"]
            assert [(e["seq"], e["data"]["turn"]) for e in starts] == [(19, 2)]  # 0-17 stored, 18 restore marker
            await sim.request("shutdown")


async def test_a_session_open_in_another_live_process_is_owned(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    with trio.fail_after(TIMEOUT):
        async with sim_process("--store", store) as holder:
            await holder.run("shared", "hi")
            async with sim_process("--store", store) as other:
                with pytest.raises(JsonRpcResponseError, match='session "shared" is already owned by an active write handle'):
                    await other.request("session/resume", {"sessionId": "shared"})
                await other.request("shutdown")
            await holder.request("shutdown")


# ---- the official Python SDK 0.2.1rc2 with the simulator as its launch hook -------------

deepseek_harness = pytest.importorskip("deepseek_harness")


def _in_thread(work: Any, timeout: float = TIMEOUT) -> Any:
    """Run blocking SDK code with a deadline (the SDK has no timeout on a turn)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 (re-raised below)
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"the SDK call did not finish within {timeout} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# deepseek-harness-sdk 0.2.1rc2: HarnessClient.close() closes the runtime's stdin but leaves
# its stdout and stderr pipes to the garbage collector (deepseek_harness/client.py)
SDK_LEAVES_PIPES = pytest.mark.filterwarnings("ignore:unclosed file <_io.TextIOWrapper:ResourceWarning")


@SDK_LEAVES_PIPES
def test_the_official_sdk_runs_a_turn(tmp_path: Path) -> None:
    """DeepSeekHarness(..., _launch_args=sim).run("hi") returns the scripted final response."""
    from deepseek_harness import DeepSeekHarness

    script = tmp_path / "scenario.toml"
    script.write_text('default_reply = "scripted hello from the simulator"\n'
                      '[[rules]]\nmatch = "THINK"\nthinking = "hmm"\nreply = "thought"\n')
    home = tmp_path / "home"
    home.mkdir()
    harness = DeepSeekHarness(cwd=str(tmp_path), dsh_home=str(home), env={"DSH_HOME": str(home)},
                              _launch_args=(*SIM, "--script", str(script)))
    try:
        result = _in_thread(lambda: harness.run("hi"))
        assert result.final_response == "scripted hello from the simulator"
        assert result.finish_reason == "completed"
        assert result.events[0]["type"] == "agent/inbox/spliced"
        second = _in_thread(lambda: harness.run("THINK first", session_id=result.session_id))
        assert second.final_response == "thought"
    finally:
        harness.close()


@SDK_LEAVES_PIPES
def test_the_official_harness_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HarnessClient(HarnessConfig(dsh_home=..., cwd=...), _launch_args=sim): handshake, prompt,
    working directory, resume errors, close. With _launch_args the SDK does not export dsh_home,
    so DSH_HOME comes from the environment (as for any launch of the real runtime)."""
    from deepseek_harness.client import HarnessClient, HarnessConfig
    from deepseek_harness.errors import JsonRpcError

    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "sub").mkdir()
    monkeypatch.setenv("DSH_HOME", str(home))
    client = HarnessClient(HarnessConfig(dsh_home=str(home), cwd=str(tmp_path)), _launch_args=SIM)

    def work() -> None:
        client.start()
        info = client.initialize(cwd=str(tmp_path), provider="deepseek-official", model="deepseek-v4-flash")
        assert info.serverInfo.name == "deepseek-harness-sdk-runtime"
        with client.subscribe_session_notifications("h1") as subscription:
            message_id = client.session_prompt("h1", [{"type": "text", "text": "hi"}], notification_subscription=subscription)
            while True:
                note = subscription.next()
                if note.method == "session.status" and note.payload.get("status") == "idle":
                    break
        assert message_id
        assert client.get_working_directory("h1") == str(tmp_path)
        assert client.set_working_directory("h1", "sub") == str(tmp_path / "sub")
        with pytest.raises(JsonRpcError) as info_error:
            client.resume_session("h1")
        assert (info_error.value.code, info_error.value.message) == (-32603, "SDK session is already open or opening: h1")

    try:
        _in_thread(work)
    finally:
        client.close()
    assert (home / "sim-sessions" / "h1.json").is_file()

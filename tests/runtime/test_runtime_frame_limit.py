"""An oversized frame or an endless line: callers fail at once, then the close ladder runs.

Also: a handshake that times out says so with RequestTimeoutError as the cause.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import psutil
import pytest
import trio
from process_table import assert_gone

from dsh_orchestra.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameTooLargeError,
    RequestTimeoutError,
    RuntimeExitedError,
    RuntimeStartError,
    TransportClosedError,
)
from dsh_orchestra.runtime import RuntimeActor, RuntimeSpec
from dsh_orchestra.session import open_runtime

FLOOD = Path(__file__).with_name("flood_runtime.py")
TINY = Path(__file__).with_name("tiny_runtime.py")
FAST_LADDER = dict(shutdown_timeout=0.3, eof_grace=0.3, terminate_grace=0.3)


def flood(tmp_path: Path) -> RuntimeSpec:
    return RuntimeSpec(command=(sys.executable, "-I", str(FLOOD)), dsh_home=tmp_path, cwd=tmp_path, **FAST_LADDER)


@pytest.mark.parametrize(
    ("method", "params"),
    [("test/endless", None), ("test/oversized", {"size": DEFAULT_MAX_FRAME_SIZE + 1})],
)
async def test_frame_over_the_limit_fails_callers_at_once_then_the_ladder_closes(
    tmp_path: Path, method: str, params: dict[str, int] | None
) -> None:
    with trio.fail_after(30):
        async with open_runtime(flood(tmp_path)) as runtime:
            pid = runtime.actor.pid
            assert pid is not None
            events = runtime.session("s1").events()
            with pytest.raises(TransportClosedError, match="sent a frame over the limit") as caught:
                await runtime.connection.request(method, params)
            # Told while the runtime is still alive (not "exited" once it is gone).
            assert not isinstance(caught.value, RuntimeExitedError)
            assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            cause = caught.value.__cause__
            assert isinstance(cause, FrameTooLargeError)
            assert cause.limit == DEFAULT_MAX_FRAME_SIZE
            assert cause.size > DEFAULT_MAX_FRAME_SIZE
            assert f"maximum frame size of {DEFAULT_MAX_FRAME_SIZE} bytes" in str(caught.value)
            with pytest.raises(TransportClosedError, match="over the limit") as subscriber:
                await events.receive()
            assert isinstance(subscriber.value.__cause__, FrameTooLargeError)
            assert not runtime.alive
        process = runtime.actor.process
        assert process is not None
        # The ladder ran: the flooder, busy writing, ignores stdin EOF, so SIGTERM ended it.
        assert process.returncode == -signal.SIGTERM
        assert_gone(pid)


async def test_handshake_timeout_has_request_timeout_as_cause(tmp_path: Path) -> None:
    spec = RuntimeSpec(command=(sys.executable, "-I", str(TINY), "silent"), dsh_home=tmp_path, cwd=tmp_path,
                       handshake_timeout=0.5, **FAST_LADDER)
    actor = RuntimeActor(spec)
    with trio.fail_after(10), pytest.raises(RuntimeStartError, match=r"within 0\.5 s") as caught:
        await actor.run()
    cause = caught.value.__cause__
    assert isinstance(cause, RequestTimeoutError)
    assert (cause.what, cause.seconds) == ("initialize", 0.5)
    assert str(cause) == "initialize did not complete within 0.5 s"
    assert actor.pid is not None
    assert_gone(actor.pid)

"""The connection's state machine (``transport._machine.RpcState``) on its own: no trio, no I/O.

Bytes in, what happens next out: replies to their targets, notifications to the sinks, server
requests to ``spawn``; the ordering rule (a reply after the notifications before it), however
the wire is cut into chunks (Hypothesis).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, strategies as st

from dsh_orchestra.protocol import FrameTooLargeError, JsonRpcResponseError, TransportClosedError, encode_frame
from dsh_orchestra.transport import Notification
from dsh_orchestra.transport._machine import RpcState

PACKAGE = Path(__file__).resolve().parents[2] / "dsh_orchestra"


def test_the_state_machine_imports_no_trio() -> None:
    """Imported without its package's ``__init__`` (which wires in the trio driver), the state
    machine and everything it imports leave trio unimported."""
    code = (
        "import sys, types\n"
        "import dsh_orchestra\n"
        "package = types.ModuleType('dsh_orchestra.transport')\n"
        f"package.__path__ = [{str(PACKAGE / 'transport')!r}]\n"
        "sys.modules['dsh_orchestra.transport'] = package\n"
        "from dsh_orchestra.transport._machine import RpcState\n"
        "state = RpcState('peer', lambda *args: None)\n"
        "state.receive(b'{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":{}}\\n')\n"
        "assert 'trio' not in sys.modules, sorted(m for m in sys.modules if m.startswith('trio'))\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


class Log:
    """Records, in order, what the state machine hands on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def sink(self, notifications: list[Notification]) -> None:
        self.events.extend(("n", n.params.get("i")) for n in notifications)

    def spawn(self, request_id: Any, method: str, params: Any, handler: Any) -> None:
        self.events.append(("req", (request_id, method, params, handler is not None)))

    def target(self, name: Any) -> Target:
        return Target(self, name)


class Target:
    def __init__(self, log: Log, name: Any) -> None:
        self.log = log
        self.name = name
        self.replies: list[dict[str, Any] | None] = []

    def wake(self, reply: dict[str, Any] | None = None) -> None:
        self.replies.append(reply)
        self.log.events.append(("reply", self.name if reply is not None else None))


def machine() -> tuple[RpcState, Log]:
    log = Log()
    state = RpcState("peer", log.spawn, max_frame_size=1000)
    state.add_sink(log.sink)
    return state, log


def note(index: int) -> bytes:
    return encode_frame({"jsonrpc": "2.0", "method": "n", "params": {"i": index}})


def reply(request_id: Any, result: Any = None) -> bytes:
    return encode_frame({"jsonrpc": "2.0", "id": request_id, "result": result if result is not None else {}})


def test_a_request_gets_an_id_a_frame_and_its_reply_once() -> None:
    state, log = machine()
    target = log.target("a")
    request_id, data = state.start_request("session/wait", {"sessionId": "s1"}, target)
    assert orjson.loads(data) == {"jsonrpc": "2.0", "id": request_id, "method": "session/wait",
                                  "params": {"sessionId": "s1"}}
    assert state.pending == {request_id: target}
    assert state.receive(reply(request_id, {"x": 1}) + reply(request_id, {"x": 2})) is None  # the duplicate is dropped
    assert target.replies == [{"jsonrpc": "2.0", "id": request_id, "result": {"x": 1}}]
    assert state.pending == {} and state.result_of("session/wait", target.replies[0]) == {"x": 1}
    assert state.frames_received == 2


def test_a_forgotten_request_is_never_woken() -> None:
    state, log = machine()
    target = log.target("a")
    request_id, _ = state.start_request("m", None, target)
    assert state.forget(request_id) is True and state.forget(request_id) is False
    state.receive(reply(request_id))
    assert target.replies == []


def test_a_reply_comes_after_the_notifications_before_it_and_before_those_after_it() -> None:
    state, log = machine()
    request_id, _ = state.start_request("m", None, log.target("a"))
    state.receive(note(0) + note(1) + reply(request_id) + note(2))
    assert log.events == [("n", 0), ("n", 1), ("reply", "a"), ("n", 2)]
    assert state.notifications == 3 and state.frames_received == 4


def test_server_requests_go_to_spawn_with_their_handler() -> None:
    state, log = machine()

    async def handler(params: Any) -> Any:
        return params

    state.handlers["known"] = (handler, None)
    state.receive(encode_frame({"jsonrpc": "2.0", "id": 7, "method": "known", "params": {"a": 1}})
                  + encode_frame({"jsonrpc": "2.0", "id": 8, "method": "unknown"}))
    assert log.events == [("req", (7, "known", {"a": 1}, True)), ("req", (8, "unknown", {}, False))]


def test_unusable_lines_are_counted_and_skipped() -> None:
    state, log = machine()
    state.receive(b"not json\n[1, 2]\n\n" + encode_frame({"jsonrpc": "2.0", "result": 1}) + note(5))
    assert log.events == [("n", 5)] and state.framer.ignored == 3


def test_an_error_reply_is_raised_by_result_of() -> None:
    state, log = machine()
    target = log.target("a")
    request_id, _ = state.start_request("m", None, target)
    state.receive(encode_frame({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": "no"}}))
    with pytest.raises(JsonRpcResponseError):
        state.result_of("m", target.replies[0])


def test_fail_delivers_what_was_read_wakes_every_target_and_tells_sink_owners() -> None:
    state, log = machine()

    class Owner:
        def __init__(self) -> None:
            self.failed: list[BaseException] = []
            self.got: list[int] = []

        def push_many(self, notifications: list[Notification]) -> None:
            self.got.extend(n.params["i"] for n in notifications)

        def fail(self, error: BaseException) -> None:
            self.failed.append(error)

    owner = Owner()
    state.add_sink(owner.push_many)
    first, second = log.target("a"), log.target("b")
    state.start_request("m", None, first)
    state.start_request("m", None, second)
    error = TransportClosedError("gone")
    assert state.fail(error) is True and state.fail(TransportClosedError("again")) is False
    assert first.replies == second.replies == [None] and state.pending == {} and state.sinks == []
    assert owner.failed == [error]
    with pytest.raises(TransportClosedError, match="got no reply: gone"):
        state.result_of("m", None)
    with pytest.raises(TransportClosedError, match="gone"):
        state.start_request("m", None, log.target("c"))
    state.receive(note(1))
    assert owner.got == []  # nothing after the close


def test_a_sink_closing_mid_read_stops_the_rest_of_it() -> None:
    state, log = machine()
    target = log.target("a")
    request_id, _ = state.start_request("m", None, target)
    state.add_sink(lambda notifications: state.fail(TransportClosedError("closed by a sink")))
    state.receive(note(0) + reply(request_id) + note(1))
    assert target.replies == [None]  # woken once, by the close
    assert log.events == [("n", 0), ("reply", None)]


def test_an_oversized_frame_fails_the_connection() -> None:
    state, log = machine()
    target = log.target("a")
    state.start_request("m", None, target)
    reason = state.receive(b"x" * 2000)
    assert reason is not None and "over the limit" in reason
    assert state.error is not None and isinstance(state.error.__cause__, FrameTooLargeError)
    assert target.replies == [None]


frames = st.lists(st.one_of(st.tuples(st.just("n"), st.integers(0, 10**6)), st.tuples(st.just("r"), st.integers(1, 20))),
                  max_size=40)


@given(frames=frames, cuts=st.lists(st.integers(0, 4000), max_size=12))
def test_any_chunking_hands_everything_on_in_wire_order(frames: list[tuple[str, int]], cuts: list[int]) -> None:
    """Whatever chunks the wire arrives in: every notification and every first reply to a
    pending request is handed on exactly once, in wire order."""
    state, log = machine()
    targets: dict[int, int] = {}
    for _ in range(20):
        target = log.target(None)
        request_id, _ = state.start_request("m", None, target)
        target.name = targets[request_id] = request_id
    wire = b"".join(note(value) if kind == "n" else reply(value) for kind, value in frames)
    bounds = sorted({0, len(wire), *(cut % (len(wire) + 1) for cut in cuts)})
    for start, end in itertools.pairwise(bounds):
        assert state.receive(wire[start:end]) is None
    expected: list[tuple[str, Any]] = []
    answered: set[int] = set()
    for kind, value in frames:
        if kind == "n":
            expected.append(("n", value))
        elif value not in answered:
            answered.add(value)
            expected.append(("reply", value))
    assert log.events == expected
    assert state.notifications == sum(kind == "n" for kind, _ in frames)

"""The streamed answer's writer (``Relay``): the chunks handed to it while its reader runs on go
out in one write, none waits for a later one, and a failed write stops it cleanly."""

from __future__ import annotations

import json

import h11
import httpx
import pytest
import trio
import trio.testing

from dsh_orchestra.gateway._http import Peer, Relay

from gateway_support import body, running_gateway
from test_gateway_faults import BLOCK, DELTA, START, serve_upstream

HEAD = [(b"content-type", b"text/event-stream")]


class Recorded(trio.abc.SendStream):
    """A send stream noting each ``send_all`` (and able to fail)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.broken = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        if self.broken:
            raise trio.BrokenResourceError("the runtime hung up")
        self.writes.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def recorded_peer() -> tuple[Peer, Recorded]:
    stream = Recorded()
    peer = Peer(stream)  # type: ignore[arg-type]
    peer.connection.receive_data(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
    assert isinstance(peer.connection.next_event(), h11.Request)
    assert isinstance(peer.connection.next_event(), h11.EndOfMessage)
    return peer, stream


def body_of(writes: list[bytes]) -> bytes:
    """The de-chunked body of a response written as ``writes``."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/", headers=[(b"host", b"x"), (b"content-length", b"0")]))
    client.send(h11.EndOfMessage())
    client.receive_data(b"".join(writes))
    data = b""
    while not isinstance(event := client.next_event(), h11.EndOfMessage):
        assert event is not h11.NEED_DATA, "the response did not end"
        if isinstance(event, h11.Data):
            data += event.data
    return data


async def test_what_is_handed_before_the_writer_runs_goes_out_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    ends: list[bytes] = []
    end = Peer.end

    async def noted(self: Peer) -> None:  # the end of an answer is written by Peer.end (a hook the cache tests use)
        await end(self)
        ends.append(stream.writes[-1])

    monkeypatch.setattr(Peer, "end", noted)
    peer, stream = recorded_peer()
    relay = Relay(peer)
    relay.start(200, HEAD)
    for chunk in (START, BLOCK, DELTA, DELTA):
        relay.send(chunk)
    relay.end()
    with trio.fail_after(5):
        await relay.run()
    assert len(stream.writes) == 1  # head, four frames and the end of the answer together
    assert stream.writes[0].startswith(b"HTTP/1.1 200 ")
    assert body_of(stream.writes) == START + BLOCK + DELTA + DELTA
    assert relay.error is None
    assert ends == stream.writes  # through Peer.end, the head and data queued before it


async def test_a_chunk_is_written_as_soon_as_the_reader_waits_not_held_for_the_next() -> None:
    peer, stream = recorded_peer()
    relay = Relay(peer)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.run)
            relay.start(200, HEAD)
            relay.send(START + BLOCK)
            await trio.testing.wait_all_tasks_blocked()  # the reader waits (for the network): the writer runs
            assert len(stream.writes) == 1 and START + BLOCK in stream.writes[0]
            relay.send(DELTA)
            relay.send(DELTA)
            await trio.testing.wait_all_tasks_blocked()
            assert stream.writes[1:] == [b"%x\r\n" % (2 * len(DELTA)) + DELTA + DELTA + b"\r\n"]  # one chunk of both
            relay.end()
    assert stream.writes[2:] == [b"0\r\n\r\n"]
    assert body_of(stream.writes) == START + BLOCK + DELTA + DELTA


async def test_a_failed_write_stops_the_writer_and_is_kept() -> None:
    peer, stream = recorded_peer()
    relay = Relay(peer)
    stream.broken = True
    relay.start(200, HEAD)
    relay.send(START)
    with trio.fail_after(5):
        await relay.run()  # returns at the failed write, without the end
    assert isinstance(relay.error, trio.BrokenResourceError)
    relay.send(DELTA)  # the reader may still hand chunks: they are dropped
    relay.end()
    assert stream.writes == []


async def test_frames_that_arrive_together_leave_together_through_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider writes a whole answer at once: the runtime gets it in a few writes, not one
    per frame (before the relay: 1 + ``frames`` + 1), byte for byte."""
    stop = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    frames = 40
    answer = START + BLOCK + DELTA * frames + stop
    writes: list[int] = []
    send_all = Peer._send

    async def counted(self: Peer, *events: object) -> None:
        if any(isinstance(e, (h11.Data, h11.EndOfMessage)) for e in events):  # the upstream here writes past _send
            writes.append(len(events))
        await send_all(self, *events)

    async def whole_answer(peer: Peer) -> None:
        start = peer.connection.send(h11.Response(status_code=200, headers=HEAD)) or b""
        chunks = b"".join(peer.connection.send(h11.Data(data=frame)) or b"" for frame in answer.split(b"\n\n")[:-1]
                          for frame in [frame + b"\n\n"])
        await peer.stream.send_all(start + chunks + (peer.connection.send(h11.EndOfMessage()) or b""))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            upstream = await serve_upstream(nursery, whole_answer)
            async with running_gateway(upstream) as gateway:
                monkeypatch.setattr(Peer, "_send", counted)  # the gateway's writes to the runtime from here
                async with httpx.AsyncClient(trust_env=False) as client:
                    async with client.stream("POST", gateway.base_url + "/v1/messages", content=json.dumps(body()),
                                             headers={"x-api-key": gateway.token}) as response:
                        received = b"".join([chunk async for chunk in response.aiter_raw()])
                monkeypatch.undo()
            nursery.cancel_scope.cancel()
    assert received == answer
    assert gateway.stats_of("").calls == 1 and gateway.totals.input_tokens == 7
    assert 1 <= len(writes) <= 4, writes  # the reads the gateway's socket happened to need, not one per frame


"""Fixtures for the connection tests: a Connection wired to a scripted peer over memory streams
(``Peer`` and ``Wired`` are in transport_support.py).

``wired`` gives a started ``Connection`` (``.connection``), the runtime's end of the stream
pair as a ``Peer`` that reads our frames and writes its own (``.peer``), and our end of the
pair (``.stream``). Tests that also request ``autojump_clock`` run on trio's MockClock, so
timeouts elapse at once and nothing sleeps for real.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dsh_orchestra.transport import Connection

from transport_support import Peer, Wired


@pytest.fixture
async def wired(nursery: trio.Nursery) -> Wired:
    """A started connection and the scripted peer at the other end of a memory stream pair."""
    ours, theirs = trio.testing.memory_stream_pair()
    connection = Connection(ours, name="peer")
    await nursery.start(connection.run)
    return Wired(connection, Peer(theirs), ours)

"""``session.events()`` against the REAL bundled runtime (scripted model on 127.0.0.1).

A consumer streaming the events while the turn runs reads the runtime's pipe itself
(``Connection.pump``); every notification carries its frame's bytes, and the runtime's
session.event lines slice (``protocol.event_json``) to exactly the compact JSON the turn
collector keeps.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
import trio

from dsh_orchestra.protocol import SESSION_EVENT, event_json
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.transport import Notification

pytestmark = pytest.mark.integration

START = 240.0  # generous for a loaded 2-core machine (a start alone took 37-60+ s under disk contention); the test takes a few seconds


async def test_streamed_events_carry_their_frames_and_slice_to_the_kept_json(
    dsh_spec: Callable[..., RuntimeSpec],
) -> None:
    with trio.fail_after(START):
        async with open_runtime(dsh_spec()) as runtime:
            session = runtime.session()
            streamed: list[Notification] = []
            with session.events() as events:
                async with trio.open_nursery() as nursery:

                    async def stream() -> None:
                        while True:
                            notification = await events.receive()
                            streamed.append(notification)
                            event = notification.params.get("event") or {}
                            if notification.method == SESSION_EVENT and event.get("type") == "turn/end":
                                return

                    nursery.start_soon(stream)
                    result = await session.run("Say hello")
            assert result.ok
            assert runtime.actor.connection is not None
            assert runtime.actor.connection.statistics().lent_reads > 0  # the consumer read the pipe
            root = [n for n in streamed if n.method == SESSION_EVENT]
            assert root and all(n.raw is not None for n in streamed)
            for notification in streamed:
                assert notification.raw is not None
                assert orjson.loads(notification.raw)["params"] == notification.params
            sliced = [event_json(n.raw, n.params) for n in root]
            assert sliced == [orjson.dumps(n.params["event"]) for n in root]
            kept = set(result.events.raw)
            assert kept and kept <= set(sliced)  # the turn's events, as the collector encoded them

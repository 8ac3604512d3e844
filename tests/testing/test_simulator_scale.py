"""One simulator holds 1,000 concurrent sessions, each taking one turn (in-process, real time)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio

from sim_support import sim_client

SESSIONS = 1000
EVENTS_PER_TURN = 17  # 3 initial, receipt, turn/start, claim, 10 of the step, turn/end
STATUSES_PER_TURN = 2


@pytest.mark.parametrize("persistent", [False, True], ids=["memory", "store"])
async def test_a_thousand_sessions_at_once(tmp_path: Path, persistent: bool) -> None:
    counts = {"session.event": 0, "session.status": 0}
    ends: dict[str, Any] = {}

    def count(notes: list[Any]) -> None:
        for note in notes:
            counts[note.method] = counts.get(note.method, 0) + 1
            if note.method == "session.event" and note.params["event"]["type"] == "turn/end":
                ends[note.params["sessionId"]] = note.params["event"]["data"]["reason"]["kind"]

    async with sim_client(store=tmp_path / "store" if persistent else None) as client:
        client.connection.remove_sink(client.log.extend)  # keep the client lean: count only
        client.connection.add_sink(count)

        async def one(index: int) -> None:
            await client.prompt(f"session-{index}", f"prompt {index}")
            assert await client.wait(f"session-{index}") == {}

        started = time.perf_counter()
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for index in range(SESSIONS):
                    nursery.start_soon(one, index)
        elapsed = time.perf_counter() - started
        outbox = client.runtime.outbox
        print(f"\n{SESSIONS} sessions ({'store' if persistent else 'memory'}): {elapsed:.2f} s, "
              f"{SESSIONS / elapsed:.0f} turns/s, {outbox.frames_written} frames in {outbox.writes} writes")
        assert counts["session.event"] == SESSIONS * EVENTS_PER_TURN
        assert counts["session.status"] == SESSIONS * STATUSES_PER_TURN
        assert len(ends) == SESSIONS and set(ends.values()) == {"completed"}
        assert outbox.writes < outbox.frames_written / 10  # frames are batched per write
        assert len(client.runtime.sessions) == SESSIONS
        await client.request("shutdown")
    if persistent:
        assert len(list((tmp_path / "store").glob("*.json"))) == SESSIONS
        assert not list((tmp_path / "store").glob("*.owner"))

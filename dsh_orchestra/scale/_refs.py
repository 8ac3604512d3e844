"""Awaiting a Ray ObjectRef from trio (any trio thread), without importing Ray."""

from __future__ import annotations

from typing import Any

import trio


async def wait_ref(ref: Any) -> Any:
    """The value of an ObjectRef, awaited from trio (raises what ``ray.get`` would raise)."""
    token = trio.lowlevel.current_trio_token()
    ready = trio.Event()

    def wake(_: object) -> None:
        try:
            token.run_sync_soon(ready.set)
        except trio.RunFinishedError:  # the driver already left trio: nobody waits any more
            pass

    future = ref.future()
    future.add_done_callback(wake)
    await ready.wait()
    return future.result()

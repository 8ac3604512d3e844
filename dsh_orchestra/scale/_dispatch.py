"""The driver's ledger: which items are waiting, handed out, or written; every id written once.

Owns: handing items out (items handed back by a lost actor first, then the dataset stream),
taking them back when their actor is lost, writing each finished item's line exactly once
(through the batch's ResultsWriter), the counters, and the bound on how often one item may
lose its actor. Pure trio bookkeeping: no Ray, no I/O beyond the results writer.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Iterator

import attrs
import trio

from ..batch import BatchItem, Counters, Progress, ResultsWriter, Tally, result_line

log = logging.getLogger("dsh_orchestra.scale")

ACTOR_LOST = "ActorLostError"
"""``error.type`` of an item whose actor was lost ``max_handouts`` times (no more hand-outs)."""


@attrs.define
class _Handout:
    count: int = 0
    first_start: float = 0.0
    last_reason: str = ""


class Ledger:
    """Hands items out and writes each finished item's result line exactly once.

    An item goes out again when its actor is lost (``take_back``): this costs it no
    ``--retries`` (the item did nothing wrong) but counts as an attempt in its line and as a
    retry in the summary. An item that lost its actor ``max_handouts`` times is not handed
    out again: its line says ``ActorLostError`` (an item that kills every actor it runs on
    must not take the whole cluster down with it).
    """

    def __init__(
        self,
        items: Iterator[BatchItem],
        writer: ResultsWriter,
        tally: Tally,
        counters: Counters,
        progress: Progress,
        *,
        todo: int,
        max_handouts: int = 3,
    ) -> None:
        self._items = items
        self._exhausted = False
        self._returned: collections.deque[BatchItem] = collections.deque()
        self._handouts: dict[str, _Handout] = {}
        self._written: set[str] = set()
        self._changed = trio.Event()
        self.writer = writer
        self.tally = tally
        self.counters = counters
        self.progress = progress
        self.todo = todo
        self.max_handouts = max_handouts
        self.out = 0  # handed out, neither finished nor taken back
        self.finished = trio.Event()
        self.duplicates = 0  # lines that arrived for an id already written (never written again)
        if todo == 0:
            self.finished.set()

    @property
    def written(self) -> int:
        """Items of this run written so far."""
        return len(self._written)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def next_item(self) -> BatchItem | None:
        """The next item to run, or None once every item is written (wait while items are
        out: one of them may come back).

        Raises:
            DatasetError: the dataset changed after it was checked.
        """
        while True:
            item = self._pop()
            if item is not None:
                return item
            if self.finished.is_set() or (self._exhausted and not self._returned and self.out == 0):
                return None
            await self._changed.wait()

    def _pop(self) -> BatchItem | None:
        while True:
            if self._returned:
                item = self._returned.popleft()
            elif not self._exhausted:
                following = next(self._items, None)
                if following is None:
                    self._exhausted = True
                    self._notify()
                    return None
                item = following
            else:
                return None
            record = self._handouts.setdefault(item.id, _Handout())
            if record.count >= self.max_handouts:
                self._give_up(item, record)
                continue
            if record.count == 0:
                record.first_start = trio.current_time()
            record.count += 1
            self.out += 1
            return item

    def finish(self, item: BatchItem, line: dict[str, Any]) -> None:
        """``item``'s actor returned its line: write it (once)."""
        self.out -= 1
        record = self._handouts.pop(item.id, None)
        if record is not None and record.count > 1:  # earlier hand-outs lost their actor
            line = {**line, "attempts": line["attempts"] + record.count - 1,
                    "duration_s": round(max(line["duration_s"], trio.current_time() - record.first_start), 6)}
        self._write(line)
        self.counters.retries += int(line["attempts"]) - 1 - (record.count - 1 if record is not None else 0)

    def take_back(self, item: BatchItem, reason: str) -> None:
        """``item``'s actor was lost before it returned the line: hand it out again later."""
        self.out -= 1
        record = self._handouts.setdefault(item.id, _Handout())
        record.last_reason = reason
        if item.id in self._written:
            return
        self.counters.retries += 1
        self._returned.append(item)
        log.info("item %r goes out again: %s", item.id, reason)
        self._notify()

    def _give_up(self, item: BatchItem, record: _Handout) -> None:
        self._handouts.pop(item.id, None)
        line = result_line(
            item.id, status="error", session_id=item.session_id, turn=None, attempts=record.count,
            duration_s=trio.current_time() - record.first_start,
            error={"type": ACTOR_LOST, "message": f"the actor running item {item.id!r} was lost {record.count} "
                   f"times (last: {record.last_reason}); not handed out again"},
            metadata=item.metadata,
        )
        self.counters.retries -= 1  # the last take-back was no retry after all
        self._write(line)

    def _write(self, line: dict[str, Any]) -> None:
        item_id = line["id"]
        if item_id in self._written:  # cannot happen: one hand-out at a time per item
            self.duplicates += 1
            log.error("a second result for item %r was dropped (every id is written once)", item_id)
            return
        self.writer.write(line)
        self._written.add(item_id)
        self.tally.add_line(line)
        self.counters.done += 1
        if line["status"] != "ok":
            self.counters.failed += 1
        self.progress.update()
        if len(self._written) >= self.todo:
            self.finished.set()
        self._notify()

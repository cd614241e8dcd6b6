"""Per partition, produce requests reach the log in the order they arrived, even when some
must await something first.

The produce path is synchronous from a request's arrival to its append in the common case,
which keeps each partition's batches in arrival order (what idempotent producers' sequence
numbers require). A batch that must await before its append — rebuilt in a worker thread
for `compression.type`, or waiting for its partition's transaction index — takes a turn
here instead, and so does every batch of that partition that arrives while any turn is
taken: each waits for the one before it to have been appended (its work, such as the
rebuild, may run meanwhile), and lets the next one go right before its own append.
Once no turn is taken, the partition is back on the synchronous path (a dict lookup).
"""

from __future__ import annotations

import asyncio


class Turn:
    """One batch's place in its partition's queue."""

    def __init__(self, order: ProduceOrder, name: str, ahead: asyncio.Future[None] | None,
                 mine: asyncio.Future[None]) -> None:
        self._order = order
        self._name = name
        self._ahead = ahead
        self._mine = mine

    async def wait(self) -> None:
        """Return once every batch that came before this one has been appended (or given
        up its turn)."""
        if self._ahead is not None and not self._ahead.done():
            await asyncio.shield(self._ahead)

    def release(self) -> None:
        """Let the next batch go: right before this one's append (which is then queued
        before the next one wakes), or when this one gives up. Idempotent. Given up before
        its own turn came, it passes the turn on only once the batches ahead have gone."""
        if self._mine.done():
            return
        ahead = self._ahead
        if ahead is not None and not ahead.done():
            ahead.add_done_callback(lambda _: self._pass_on())
        else:
            self._pass_on()

    def _pass_on(self) -> None:
        if not self._mine.done():
            self._mine.set_result(None)
        self._order._left(self._name, self._mine)


class ProduceOrder:
    """The turns taken, by partition (stream name)."""

    def __init__(self) -> None:
        self._last: dict[str, asyncio.Future[None]] = {}

    def busy(self, name: str) -> bool:
        """Whether a batch of this partition holds a turn: a new one must take one too."""
        return name in self._last

    def join(self, name: str) -> Turn:
        """Take the next turn of partition `name`."""
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        turn = Turn(self, name, self._last.get(name), mine)
        self._last[name] = mine
        return turn

    def _left(self, name: str, mine: asyncio.Future[None]) -> None:
        if self._last.get(name) is mine:
            del self._last[name]

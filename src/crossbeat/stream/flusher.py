"""Group commit: one task fsyncs every dirty segment once per round, for all streams.

Appends write their bytes (page cache) and `mark` the segment dirty. The flusher task wakes,
waits until the oldest waiting append is `flush_max_delay_ms` old (so that concurrent
appends can join the round), snapshots the dirty segments and their sizes, and fdatasyncs
each of them once in a worker thread (the event loop keeps serving meanwhile; appends made
during the fsync join the next round). Afterwards each affected stream advances its high
watermark and completes the appends whose bytes are now durable.

A failed fsync is fatal for the store (the kernel may have dropped the dirty pages): every
waiting append fails with `StoreFailed` and so does every later append until reopen.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Protocol

from crossbeat.stream.errors import StoreFailed

if TYPE_CHECKING:
    from crossbeat.stream.segment import Segment

log = logging.getLogger(__name__)


class SyncListener(Protocol):
    def on_synced(self) -> None: ...

    def on_sync_failed(self, error: StoreFailed) -> None: ...


class Flusher:
    """The store's single group-commit task."""

    def __init__(self, max_delay_ms: float) -> None:
        self.delay = max_delay_ms / 1000.0
        self.failed: StoreFailed | None = None
        self.fsyncs = 0  # fdatasync calls made (for tests and benchmarks)
        self.rounds = 0
        self._dirty: dict[Segment, None] = {}
        self._listeners: dict[SyncListener, None] = {}
        self._wakeup = asyncio.Event()
        self._first_arrival: float | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stream-flusher")

    def mark(self, segment: Segment, listener: SyncListener) -> None:
        """Record that `segment` has unsynced bytes that `listener` waits for."""
        self._dirty[segment] = None
        self._listeners[listener] = None
        if self._first_arrival is None:
            self._first_arrival = asyncio.get_running_loop().time()
        self._wakeup.set()

    async def stop(self) -> None:
        """Run a last round for whatever is dirty, then end the task."""
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            if not self._listeners and not self._dirty:
                self._wakeup.clear()
                if self._stopping:
                    return
                continue
            if not self._stopping and self._first_arrival is not None:
                # Always yield once so appends that are already runnable join this round.
                await asyncio.sleep(max(self.delay - (loop.time() - self._first_arrival), 0.0))
            self._wakeup.clear()
            dirty, self._dirty = self._dirty, {}
            listeners, self._listeners = self._listeners, {}
            self._first_arrival = None
            targets = [(seg, seg.size) for seg in dirty if not seg.closed and seg.synced < seg.size]
            try:
                if targets:
                    self.fsyncs += await asyncio.to_thread(_sync_all, targets)
            except OSError as exc:
                log.critical("stream store fsync failed, refusing further appends: %s", exc)
                self.failed = StoreFailed(f"fsync failed: {exc}; reopen the store to recover")
                for listener in (*listeners, *self._listeners):
                    listener.on_sync_failed(self.failed)
                self._listeners.clear()
                self._dirty.clear()
                return
            self.rounds += 1
            for seg, size in targets:
                if size > seg.synced:
                    seg.synced = size
            for listener in listeners:
                listener.on_synced()


def _sync_all(targets: list[tuple[Segment, int]]) -> int:
    count = 0
    for segment, _size in targets:
        try:
            os.fdatasync(segment.fd)
        except OSError:
            if segment.closed:  # deleted or closed meanwhile: nothing left to make durable
                continue
            raise
        count += 1
    return count

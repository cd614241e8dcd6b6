"""Group commit: one task fsyncs every dirty segment once per round, for all streams.

Appends write their bytes (page cache) and `mark` the segment dirty. The flusher task wakes,
waits for company (at most until the oldest waiting append is `flush_max_delay_ms` old,
and no longer once a quarter of that passes without a new append), snapshots the dirty segments and their sizes, and fdatasyncs
each of them once, in parallel worker threads (the event loop keeps serving meanwhile; appends made
during the fsync join the next round). Afterwards each affected stream advances its high
watermark and completes the appends whose bytes are now durable.

A failed fsync is fatal for the store (the kernel may have dropped the dirty pages): every
waiting append fails with `StoreFailed` and so does every later append until reopen.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from crossbeat.stream.errors import StoreFailed

if TYPE_CHECKING:
    from crossbeat.stream.segment import Segment

log = logging.getLogger(__name__)

FSYNC_THREADS = 8


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
        self._marks = 0
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=FSYNC_THREADS, thread_name_prefix="stream-fsync"
        )

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stream-flusher")

    def mark(self, segment: Segment, listener: SyncListener) -> None:
        """Record that `segment` has unsynced bytes that `listener` waits for."""
        self._dirty[segment] = None
        self._listeners[listener] = None
        self._marks += 1
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
        self._pool.shutdown(wait=False)

    async def _gather_company(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait (at most `delay` after the oldest waiting append) while company keeps coming.

        Always yields once, so appends that are already runnable join this round. Then
        waits in slices of a quarter of the delay and stops early after a slice in which
        no new append arrived: a burst that has fully arrived is not kept waiting.
        """
        await asyncio.sleep(0)
        if self._stopping or self.delay <= 0 or self._first_arrival is None:
            return
        slice_s = self.delay / 4
        while True:
            remaining = self.delay - (loop.time() - self._first_arrival)
            if remaining <= 0:
                return
            marks = self._marks
            await asyncio.sleep(min(slice_s, remaining))
            if self._marks == marks or self._stopping:
                return

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._listeners and not self._dirty:
                if self._stopping:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._gather_company(loop)
            self._wakeup.clear()
            dirty, self._dirty = self._dirty, {}
            listeners, self._listeners = self._listeners, {}
            self._first_arrival = None
            targets = [(seg, seg.size) for seg in dirty if not seg.closed and seg.synced < seg.size]
            # One fdatasync per dirty file, in parallel: the filesystem folds concurrent
            # flushes into one journal commit (measured ~4x faster than one after another).
            results = await asyncio.gather(
                *(loop.run_in_executor(self._pool, _sync_one, seg) for seg, _size in targets),
                return_exceptions=True,
            )
            self.fsyncs += sum(1 for r in results if r is True)
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                exc = errors[0]
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


def _sync_one(segment: Segment) -> bool:
    try:
        os.fdatasync(segment.fd)
    except OSError:
        if segment.closed:  # deleted or closed meanwhile: nothing left to make durable
            return False
        raise
    return True

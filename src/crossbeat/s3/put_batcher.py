"""Small PUTs committed in groups: one sync and one metadata transaction for many objects.

A small PUT's body is verified and its files are staged on the event loop
(`Repository.stage_bytes`); the request then waits here for its acknowledgement:

1. the sync thread takes every staged object queued so far and commits them: the first
   commit runs one shared syncfs (see `repositories.syncgroup`), which covers the rest;
2. the metadata thread builds each object's version from the bucket as it is now (read once
   per bucket and batch) and stores the batch with one `put_versions` call (one SQLite
   transaction, one fsync); it frees displaced data, and deletes the data of any object
   whose metadata was refused;
3. one loop callback per batch resolves the waiting requests.

The durability contract is the one-by-one path's: metadata is committed only once the data
it points at is durable, and a request is answered only once its metadata is durable. The
two threads form a pipeline, so a batch syncs while the previous one commits. Each request
still costs the event loop its own parsing and file writes; the threads' cost is per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crossbeat.metadata import Bucket
from crossbeat.metadata.errors import MetadataError
from crossbeat.metadata.errors import NoSuchBucket as MetadataNoSuchBucket
from crossbeat.repositories import ObjectWriter
from crossbeat.s3.body import Checksums
from crossbeat.s3.errors import S3Error

if TYPE_CHECKING:
    from crossbeat.s3.datapath import Written
    from crossbeat.s3.gateway import Gateway

log = logging.getLogger("crossbeat.gateway")
Meta = dict[str, Any]
# Builds the version to store for `written` from the bucket as it is at commit time (None
# if it is gone); raises S3Error to refuse (the object's data is then deleted).
BuildMeta = Callable[["Written", Bucket | None], Meta]


@dataclass(eq=False)
class _Put:
    staged: ObjectWriter
    checksums: Checksums
    bucket: str
    build: BuildMeta
    future: asyncio.Future[tuple[Written, Meta]]
    written: Written | None = None
    meta: Meta | None = None
    error: BaseException | None = None
    displaced: list[Meta] = field(default_factory=list)


class PutBatcher:
    """Per gateway process: the sync and metadata threads, started on first use."""

    def __init__(self, gw: Gateway) -> None:
        self._gw = gw
        self._sync_queue: queue.SimpleQueue[list[_Put] | None] = queue.SimpleQueue()
        self._meta_queue: queue.SimpleQueue[list[_Put] | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Puts staged during one loop iteration, handed to the sync thread together: one
        # wake-up of that thread per iteration rather than one per request.
        self._staged: list[_Put] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self.batches = 0  # metadata batches committed (tests and diagnostics)

    async def put(
        self, staged: ObjectWriter, checksums: Checksums, bucket: str, build: BuildMeta
    ) -> tuple[Written, Meta]:
        """Commit a staged object and its version; return them once both are durable.

        On any failure the object's data is deleted and the error raised here.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Written, Meta]] = loop.create_future()
        with self._lock:
            if self._closed:
                staged.abort()
                raise S3Error("ServiceUnavailable", "The gateway is shutting down.", status=503)
            if not self._threads:
                self._start(loop)
        if not self._staged:
            loop.call_soon(self._hand_over)
        self._staged.append(_Put(staged, checksums, bucket, build, future))
        return await future

    def _hand_over(self) -> None:
        staged, self._staged = self._staged, []
        self._sync_queue.put(staged)

    def close(self) -> None:
        """Finish what is queued, then stop the threads."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
        if threads:
            leftover, self._staged = self._staged, []  # the loop has stopped: no race
            if leftover:
                self._sync_queue.put(leftover)
            self._sync_queue.put(None)
            for thread in threads:
                thread.join()

    # -- threads ----------------------------------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._threads = [
            threading.Thread(target=self._sync_loop, name="s3-put-sync", daemon=True),
            threading.Thread(target=self._meta_loop, name="s3-put-meta", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _sync_loop(self) -> None:
        from crossbeat.s3.datapath import Written

        stopping = False
        while not stopping:
            batch = self._sync_queue.get()
            if batch is None:
                break
            while True:
                try:
                    more = self._sync_queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.extend(more)
            for put in batch:
                try:
                    # the first commit runs the sync round; the others' tickets it covers
                    put.written = Written(put.staged.commit(), put.checksums)
                except BaseException as exc:  # noqa: BLE001 - answered to its request
                    put.staged.abort()
                    put.error = exc
            self._meta_queue.put(batch)
        self._meta_queue.put(None)

    def _meta_loop(self) -> None:
        while True:
            batch = self._meta_queue.get()
            if batch is None:
                return
            stopping = False
            while True:  # take what else is ready: one transaction for all of it
                try:
                    more = self._meta_queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.extend(more)
            try:
                self._commit(batch)
            except BaseException as exc:  # noqa: BLE001 - every request of the batch gets it
                for put in batch:
                    if put.error is None:
                        put.error = exc
                        self._free(put)
            self.batches += 1
            assert self._loop is not None
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                self._loop.call_soon_threadsafe(_resolve, batch)
            if stopping:
                return

    def _commit(self, batch: list[_Put]) -> None:
        store = self._gw.store
        buckets: dict[str, Bucket | None] = {}
        todo: list[_Put] = []
        for put in batch:
            if put.error is not None:
                continue
            assert put.written is not None
            try:
                if put.bucket not in buckets:
                    buckets[put.bucket] = store.get_bucket(put.bucket)
                put.meta = put.build(put.written, buckets[put.bucket])
            except BaseException as exc:  # noqa: BLE001 - answered to its request
                put.error = exc
                self._free(put)
                continue
            todo.append(put)
        if not todo:
            return
        outcomes = store.put_versions([put.meta for put in todo if put.meta is not None])
        for put, outcome in zip(todo, outcomes, strict=True):
            if isinstance(outcome, MetadataError):
                put.error = (
                    S3Error("NoSuchBucket", resource=f"/{put.bucket}", extra={"BucketName": put.bucket})
                    if isinstance(outcome, MetadataNoSuchBucket)
                    else outcome
                )
                self._free(put)
            else:
                self._gw.free_now(outcome)

    def _free(self, put: _Put) -> None:
        if put.written is not None:
            self._gw.free_now([{"location": [put.written.location.to_json()]}])


def _resolve(batch: list[_Put]) -> None:
    for put in batch:
        if put.future.done():  # the request was cancelled; its object stands regardless
            continue
        if put.error is not None:
            put.future.set_exception(put.error)
        else:
            assert put.written is not None and put.meta is not None
            put.future.set_result((put.written, put.meta))

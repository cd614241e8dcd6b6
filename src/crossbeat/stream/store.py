"""The stream store: every stream under one directory, on this node.

Layout of `data_dir`::

    placement.json                      the placement driver's state (streams → ranges)
    ranges/<stream id>/<range index>/   one range replica: <base offset>.log/.index/.timeindex

What an acknowledgement means: `Stream.append(..., durable=True)` returns only after the
batch's bytes, and every earlier batch of the same stream, have been written to the segment
file and fdatasync'ed, and the segment file's directory entry (created at roll) was fsynced
before the first byte went into it. So a batch whose append returned survives a process
crash or power loss (given a disk that honours flushes), and recovery keeps it exactly once
at its offset. The high watermark (`Stream.end_offset`) only moves over fsynced batches, so
readers never see a batch that a crash could remove. `durable=False` returns after the write
(page cache); the batch is fsynced in the next group-commit round (within about
`flush_max_delay_ms` plus one fsync), and a crash before then may lose it.

Group commit: one flusher task serves all streams; each dirty segment is fsynced once per
round however many appends it holds (see `crossbeat.stream.flusher`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from crossbeat.stream.errors import (
    InvalidStreamName,
    StoreClosed,
    StreamError,
    StreamNotFound,
)
from crossbeat.stream.flusher import Flusher
from crossbeat.stream.placement import PlacementDriver, StreamMeta
from crossbeat.stream.range_server import RangeReplica, RangeServer
from crossbeat.stream.reserve import SpaceReserve
from crossbeat.stream.settings import StreamSettings
from crossbeat.stream.stream import Stream

log = logging.getLogger(__name__)

RECOVERY_THREADS = 8  # streams recovered in parallel (fsyncs and scans overlap)
# The broker names a partition's stream `<topic>-<partition>`: a 249-character Kafka topic
# name plus '-' and up to 5 digits must fit. Names never reach the filesystem anyway.
MAX_NAME_LENGTH = 255


def validate_name(name: object) -> str:
    """Return `name` if it can name a stream; raise InvalidStreamName otherwise."""
    if not isinstance(name, str) or not name:
        raise InvalidStreamName("stream name must be a non-empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidStreamName(f"stream name is longer than {MAX_NAME_LENGTH} characters")
    if any(ord(c) < 0x20 or c == "\x7f" for c in name):
        raise InvalidStreamName("stream name may not contain control characters")
    return name


class StreamStore:
    """All streams under one directory; the single-node placement driver + range server."""

    def __init__(
        self, data_dir: Path, settings: StreamSettings, placement: PlacementDriver
    ) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self._placement = placement
        self._range_server = RangeServer(data_dir / "ranges", settings)
        self._flusher = Flusher(settings.flush_max_delay_ms)
        self._streams: dict[str, Stream] = {}
        self._closed = False
        self.reserve = SpaceReserve(data_dir / "space.reserve")

    @classmethod
    async def open(cls, data_dir: Path, settings: StreamSettings | None = None) -> StreamStore:
        """Open (or create) the store and recover every stream.

        Recovery CRC-checks the tail segment of each open range, truncates a torn or
        corrupt tail, rebuilds missing or stale indexes, deletes segments retention had
        already released and directories of streams that no longer exist. Must be called
        from a running event loop (the group-commit task starts here).
        """
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        settings = settings or StreamSettings()
        store = cls(data_dir, settings, PlacementDriver(data_dir / "placement.json"))
        await asyncio.to_thread(store._recover)
        await asyncio.to_thread(store.reserve.make)
        store._flusher.start()
        return store

    def _recover(self) -> None:
        """Open every stream's replicas, several streams at a time (blocking)."""
        rs = self._range_server
        metas = list(self._placement.streams.values())
        if not self._placement.path.exists() and rs.stream_ids_on_disk():
            raise StreamError(
                f"{self._placement.path} is missing but {rs.root} holds stream data; refusing "
                "to open (restore the placement file, or remove the data deliberately)"
            )

        def open_stream(meta: StreamMeta) -> list[RangeReplica]:
            replicas = [rs.open_replica(meta.id, info, meta.start_offset) for info in meta.ranges]
            rs.remove_orphan_ranges(meta.id, {info.index for info in meta.ranges})
            return replicas

        with ThreadPoolExecutor(max_workers=RECOVERY_THREADS) as pool:
            opened = list(pool.map(open_stream, metas))
        for meta, replicas in zip(metas, opened, strict=True):
            self._streams[meta.name] = Stream(self, meta, replicas)
        rs.remove_orphans({m.id for m in metas}, self._placement.next_id)

    @property
    def fsync_count(self) -> int:
        """Segment fdatasyncs made by group commit so far (benchmarks and tests)."""
        return self._flusher.fsyncs

    @property
    def flush_rounds(self) -> int:
        return self._flusher.rounds

    def _check_appendable(self) -> None:
        if self._closed:
            raise StoreClosed("the stream store is closed")
        if self._flusher.failed is not None:
            raise self._flusher.failed

    async def close(self) -> None:
        """Flush and fsync everything written, complete waiting appends, close the files."""
        if self._closed:
            return
        self._closed = True
        await self._flusher.stop()
        for stream in self._streams.values():
            stream._close_files()

    # ---- streams -----------------------------------------------------------------------
    def create_stream(self, name: str, config: dict[str, str] | None = None) -> Stream:
        """Create an empty stream (blocking: persists the placement file). StreamExists if present."""
        [stream] = self.create_streams([(name, config or {})])
        return stream

    def create_streams(self, specs: list[tuple[str, dict[str, str]]]) -> list[Stream]:
        """Create empty streams `specs` ((name, config) pairs), all or none (blocking).

        StreamExists if a name is present or given twice. The replica directories are made
        first and one placement write then records every stream, so a failure (OSError:
        the disk is full or out of inodes) leaves no stream behind, in memory or on disk,
        and a crash before that write leaves only empty directories the placement does not
        name. Raises the failure after removing the directories this call made.
        """
        for name, config in specs:
            validate_name(name)
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
                raise InvalidStreamName("stream config keys and values must be strings")
        if self._closed:
            raise StoreClosed("the stream store is closed")
        metas = self._placement.plan_streams(specs)
        rs = self._range_server
        made: list[int] = []  # ids whose directory this call created
        replicas: list[RangeReplica] = []
        try:
            for meta in metas:
                if not rs.replica_dir(meta.id, 0).parent.exists():
                    made.append(meta.id)
                replicas.append(rs.create_replica(meta.id, meta.ranges[0]))
            self._placement.add_streams(metas)
        except BaseException:
            for replica in replicas:
                for segment in replica.segments:
                    segment.close()  # not replica.close(): that writes indexes
            # a directory that was there before is not ours to remove: see remove_orphans
            for stream_id in made:
                rs.drop_stream(stream_id)
            raise
        streams = [Stream(self, meta, [replica]) for meta, replica in zip(metas, replicas, strict=True)]
        for stream in streams:
            self._streams[stream.name] = stream
        return streams

    def get_stream(self, name: str) -> Stream | None:
        return self._streams.get(name)

    def delete_stream(self, name: str) -> None:
        """Remove the stream and its data; waiting appends fail with StreamNotFound."""
        self.delete_streams([name])

    def delete_streams(self, names: list[str]) -> None:
        """Remove streams `names` and their data, all or none: one placement write forgets
        them all, and only then are they dropped from memory and their files deleted (so
        an OSError from that write changes nothing). StreamNotFound if one does not exist;
        waiting appends fail with StreamNotFound."""
        names = list(dict.fromkeys(names))
        for name in names:
            if name not in self._streams:
                raise StreamNotFound(f"stream {name!r} does not exist")
        # deleting a topic is how an operator frees a full disk: the placement write that
        # must come first may spend the reserve (see `reserve`)
        metas = self.reserve.spend_on(lambda: self._placement.delete_streams(names))
        for meta in metas:
            stream = self._streams.pop(meta.name)
            stream._mark_gone(StreamNotFound(f"stream {meta.name!r} was deleted"))
            stream._delete_files()
            self._range_server.drop_stream(meta.id)
        self.reserve.make()  # again, now that there may be room

    def streams(self) -> list[str]:
        return sorted(self._streams)

    async def enforce_retention(self, now_ms: int | None = None) -> None:
        """Apply retention_ms / retention_bytes to every stream (whole segments only)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for stream in list(self._streams.values()):
            try:
                await stream.enforce_retention(now)
            except (OSError, StreamError) as exc:
                # one stream's failure (a full disk, say) must not keep the others from
                # freeing space; this one is tried again at the next pass
                log.warning("retention of stream %r failed: %s", stream.name, exc)
        await asyncio.to_thread(self.reserve.make)  # again, if a pass needed it

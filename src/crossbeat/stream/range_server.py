"""The range server of this node: it owns range replicas and knows nothing of streams.

Seed 004 separates the placement driver (streams → ranges) from range servers (ranges →
records on disk). Here one in-process `RangeServer` holds every replica under
`<data_dir>/ranges/<stream id>/<range index>/`. Replication across range servers slots in
at this seam: a replicated range would be a replica here plus peers elsewhere, and
`RangeReplica.seal` is the local half of seed 004's seal.

A `RangeReplica` is a list of contiguous segments; only the last one of an unsealed replica
takes appends.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import shutil
from pathlib import Path

from crossbeat.stream.batch import BatchHeader
from crossbeat.stream.placement import RangeInfo
from crossbeat.stream.segment import Segment, fsync_dir
from crossbeat.stream.settings import StreamSettings

log = logging.getLogger(__name__)


class RangeReplica:
    """This node's copy of one range: segments holding offsets [first_offset, next_offset)."""

    def __init__(
        self, directory: Path, index: int, start_offset: int, settings: StreamSettings, sealed: bool
    ) -> None:
        self.directory = directory
        self.index = index
        self.start_offset = start_offset
        self.settings = settings
        self.sealed = sealed
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._rolling: asyncio.Future[None] | None = None

    # ---- lifecycle ---------------------------------------------------------------------
    @classmethod
    def create(cls, directory: Path, info: RangeInfo, settings: StreamSettings) -> RangeReplica:
        """Create the directory and the first (empty) segment, durably (blocking)."""
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(directory.parent)
        fsync_dir(directory.parent.parent)
        replica = cls(directory, info.index, info.start_offset, settings, info.sealed)
        replica._add(Segment.create(directory, info.start_offset, settings.index_interval_bytes))
        return replica

    @classmethod
    def open(
        cls, directory: Path, info: RangeInfo, settings: StreamSettings, log_start: int
    ) -> RangeReplica:
        """Recover the replica from disk (blocking).

        Segments wholly below `log_start` (retention had already moved past them) are
        deleted. The last segment of an open range is CRC-verified and its torn tail
        truncated; other segments are verified only when their indexes are stale. A gap in
        offsets or a corrupt segment in the middle ends the replica there: later segments
        cannot be served contiguously and are removed (as Kafka's recovery does).
        """
        if not directory.exists():
            if info.sealed:
                log.warning("stream range directory %s is missing; range is empty", directory)
            return cls.create(directory, info, settings)
        for tmp in directory.glob("*.tmp"):
            tmp.unlink()
        bases = sorted(
            int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit() and len(p.stem) == 20
        )
        replica = cls(directory, info.index, info.start_offset, settings, info.sealed)
        interval = settings.index_interval_bytes
        for i, base in enumerate(bases):
            last = i == len(bases) - 1
            if not last and bases[i + 1] <= log_start:
                _remove_segment_files(directory, base)
                continue
            expected = replica.segments[-1].next_offset if replica.segments else None
            if expected is not None and base != expected:
                log.warning(
                    "stream range %s: segment %d does not continue offset %d; dropping it and later ones",
                    directory,
                    base,
                    expected,
                )
                for later in bases[i:]:
                    _remove_segment_files(directory, later)
                break
            segment = Segment.open(directory, base, interval, verify=last and not info.sealed)
            replica._add(segment)
            if segment.truncated and not last:
                log.warning(
                    "stream range %s: corrupt segment %d; dropping later segments", directory, base
                )
                for later in bases[i + 1 :]:
                    _remove_segment_files(directory, later)
                break
        for segment in replica.segments[:-1]:
            segment.full = True
        if not replica.segments:
            base = max(info.start_offset, log_start)
            replica._add(Segment.create(directory, base, interval))
        if info.sealed:
            replica.active.full = True
        return replica

    def _add(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    def close(self) -> None:
        """Save the active segment's indexes and close every file (blocking). An index that
        cannot be saved (a full disk) is left to be rebuilt at the next open."""
        for segment in self.segments:
            if not segment.closed:
                try:
                    _save_indexes(segment)
                finally:
                    segment.close()

    def delete(self) -> None:
        for segment in self.segments:
            segment.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # ---- state -------------------------------------------------------------------------
    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def first_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def next_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_index_for(self, offset: int) -> int:
        """Index in `segments` of the segment holding `offset` (clamped to the first)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # ---- appending ---------------------------------------------------------------------
    def needs_roll(
        self, header: BatchHeader, now_ms: int, segment_bytes: int, segment_ms: int
    ) -> bool:
        active = self.active
        if active.size and now_ms - active.created_ms >= segment_ms:
            return True
        return not active.fits(header.size, header.last_offset_delta, segment_bytes)

    def append(
        self, buf: bytes | bytearray, base_offset: int, header: BatchHeader
    ) -> tuple[Segment, int]:
        """Write one batch into the active segment; returns (segment, end position)."""
        segment = self.active
        return segment, segment.append(buf, base_offset, header)

    async def roll(self) -> None:
        """Close the active segment and start a new one at its next offset.

        The old segment is fsynced and the new file's directory entry made durable (in a
        worker thread) before any byte goes to the new segment: so after a crash only the
        last segment of a range can have a torn tail. If the replica is sealed while this
        waits, the new empty segment is removed again. A caller cancelled while waiting
        does not cancel the roll itself (it completes; the next caller joins it).
        """
        if self._rolling is None:
            self._rolling = asyncio.ensure_future(self._roll())
        await asyncio.shield(self._rolling)

    async def _roll(self) -> None:
        try:
            await self._roll_once()
        finally:
            self._rolling = None

    async def _roll_once(self) -> None:
        old = self.active
        if old.full or self.sealed:
            return
        old.full = True
        size = old.size
        interval = self.settings.index_interval_bytes

        def io() -> Segment:
            old.fsync()
            return Segment.create(self.directory, old.next_offset, interval)

        try:
            fresh = await asyncio.to_thread(io)
        except BaseException:
            if not self.sealed:
                old.full = False
            raise
        old.synced = max(old.synced, size)
        try:
            old.write_indexes()
        except BaseException:
            # a full disk, say: appends go on into the old segment (its indexes are written
            # at the next roll or close); left full, every append would roll again at once
            # and find it already rolled, for ever
            fresh.delete()
            if not self.sealed:
                old.full = False
            raise
        if self.sealed or old is not self.active:
            fresh.delete()
            return
        self._add(fresh)

    def seal(self) -> int:
        """Stop accepting appends: fsync the active segment, save its indexes (blocking).

        Returns the replica's end offset (everything below it is durable).
        """
        active = self.active
        active.full = True
        self.sealed = True
        if not active.closed:
            size = active.size
            active.fsync()
            active.synced = max(active.synced, size)
            _save_indexes(active)
        return self.next_offset

    def unseal(self) -> None:
        """Undo `seal` when the placement driver could not record it."""
        self.sealed = False
        self.active.full = False

    # ---- retention ---------------------------------------------------------------------
    def drop_first_segments(self, count: int) -> None:
        """Delete the first `count` segments (never the last)."""
        count = min(count, len(self.segments) - 1)
        for segment in self.segments[:count]:
            segment.delete()
        del self.segments[:count]
        del self._bases[:count]
        if count:
            fsync_dir(self.directory)


def _remove_segment_files(directory: Path, base: int) -> None:
    name = f"{base:020d}"
    for suffix in (".log", ".index", ".timeindex"):
        (directory / f"{name}{suffix}").unlink(missing_ok=True)


class RangeServer:
    """Owns every range replica stored on this node, under `root`."""

    def __init__(self, root: Path, settings: StreamSettings) -> None:
        self.root = root
        self.settings = settings
        root.mkdir(parents=True, exist_ok=True)

    def replica_dir(self, stream_id: int, range_index: int) -> Path:
        return self.root / str(stream_id) / str(range_index)

    def create_replica(self, stream_id: int, info: RangeInfo) -> RangeReplica:
        return RangeReplica.create(self.replica_dir(stream_id, info.index), info, self.settings)

    def open_replica(self, stream_id: int, info: RangeInfo, log_start: int) -> RangeReplica:
        return RangeReplica.open(
            self.replica_dir(stream_id, info.index), info, self.settings, log_start
        )

    def drop_stream(self, stream_id: int) -> None:
        shutil.rmtree(self.root / str(stream_id), ignore_errors=True)

    def stream_ids_on_disk(self) -> set[int]:
        return {int(c.name) for c in self.root.iterdir() if c.is_dir() and c.name.isdigit()}

    def remove_orphans(self, known_ids: set[int], next_id: int) -> None:
        """Delete directories of streams the placement driver deleted (a crash mid-delete).

        Only ids the driver has handed out (below `next_id`) are removed: a directory with
        a higher id was never recorded as deleted, so it is left alone (and logged).
        """
        for stream_id in self.stream_ids_on_disk() - known_ids:
            child = self.root / str(stream_id)
            if stream_id < next_id:
                log.info("removing directory of deleted stream %s", child)
                shutil.rmtree(child, ignore_errors=True)
            else:
                log.warning("leaving unknown stream directory %s alone", child)

    def remove_orphan_ranges(self, stream_id: int, known: set[int]) -> None:
        base = self.root / str(stream_id)
        if not base.exists():
            return
        for child in base.iterdir():
            if child.is_dir() and not (child.name.isdigit() and int(child.name) in known):
                shutil.rmtree(child, ignore_errors=True)


def _save_indexes(segment: Segment) -> None:
    """Write `segment`'s indexes if the disk lets us: they are derived data, checked when
    loaded and rebuilt from the segment when missing or stale, so a full disk must not
    stop a close or a seal."""
    try:
        segment.write_indexes()
    except OSError as exc:
        log.warning("indexes of %s not saved (rebuilt when next opened): %s", segment.log_path, exc)

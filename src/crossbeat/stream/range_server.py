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
import re
import shutil
from pathlib import Path

from crossbeat.stream.batch import BatchHeader
from crossbeat.stream.file_replace import fsync_dir, replace_file
from crossbeat.stream.index import OffsetIndex, TimeIndex, read_file
from crossbeat.stream.placement import RangeInfo
from crossbeat.stream.segment import Segment
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
    def create(
        cls, directory: Path, info: RangeInfo, settings: StreamSettings, base: int | None = None
    ) -> RangeReplica:
        """Create the directory and the first (empty) segment, durably (blocking).

        The segment starts at `base` (default: the range's start offset)."""
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(directory.parent)
        fsync_dir(directory.parent.parent)
        replica = cls(directory, info.index, info.start_offset, settings, info.sealed)
        first = info.start_offset if base is None else base
        replica._add(Segment.create(directory, first, settings.index_interval_bytes))
        return replica

    @classmethod
    def open(
        cls, directory: Path, info: RangeInfo, settings: StreamSettings, log_start: int
    ) -> RangeReplica:
        """Recover the replica from disk (blocking).

        Segments wholly below `log_start` (retention had already moved past them) are
        deleted. The last segment of an open range is CRC-verified and its torn tail
        truncated (crash recovery of unflushed data); other segments are verified only when
        their indexes are stale, and one found damaged is cut at its first bad batch. Lost
        offsets stay a gap: later segments are kept (readers skip to the next batch after a
        gap, as Kafka consumers do) and every gap is logged as an error. Offsets known to
        have been handed out are not handed out again: an open range ends no lower than
        `log_start`, its own start, what the indexes of a deleted segment say was reached,
        and, when its newest segment file is gone, the offset recorded at the last roll or
        close (an empty segment is added there when the data ends lower). A segment
        overlapping the one before it cannot be served in order; its files are set aside
        (renamed `*.overlap`), logged.
        """
        open_range = not info.sealed
        floor = max(info.start_offset, log_start)  # the open range must end at or above it
        if not directory.exists():
            if info.sealed:
                log.warning("stream range directory %s is missing; range is empty", directory)
            else:
                log.error(
                    "stream range directory %s (the stream's open range) is missing: recreating "
                    "it empty at offset %d; every record it held is lost",
                    directory,
                    floor,
                )
            return cls.create(directory, info, settings, None if info.sealed else floor)
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
            if expected is not None and base < expected:
                log.error(
                    "stream range %s: segment %d overlaps the one before it (which ends at "
                    "offset %d); setting its files aside as *.overlap",
                    directory,
                    base,
                    expected,
                )
                _set_aside(directory, base)
                continue
            replica._add(Segment.open(directory, base, interval, verify=last and open_range))
        if open_range and not bases:
            log.error("stream range %s (the open range) holds no segment file", directory)
        hint = _read_hint(directory) if open_range else None
        if hint is not None:
            newest, reached = hint
            if not bases or newest > bases[-1]:
                # (a last segment merely cut short is left to crash recovery: its torn tail
                # was never acknowledged, and the hint may predate the crash)
                log.error(
                    "stream range %s: its newest segment %d is missing: the records it held "
                    "(up to offset %d at least) are lost",
                    directory,
                    newest,
                    reached - 1,
                )
                floor = max(floor, reached)
        for base, reached in _orphan_indexes(directory, set(bases)):
            _remove_segment_files(directory, base)
            if reached <= log_start:
                continue  # retention was deleting that segment when the process stopped
            if open_range and reached > floor:
                floor = reached
            log.error(
                "stream range %s: segment %d is missing but its index files remain (offsets up "
                "to %d were written); removing them",
                directory,
                base,
                reached - 1,
            )
        for segment in replica.segments:
            segment.full = True
        if not replica.segments:
            replica._add(Segment.create(directory, floor, interval))
        elif open_range and replica.next_offset < floor:
            log.error(
                "stream range %s: its data ends at offset %d, below offset %d already "
                "reached (its last segment is lost?): new records start at %d",
                directory,
                replica.next_offset,
                floor,
                floor,
            )
            replica._add(Segment.create(directory, floor, interval))
        replica._log_gaps(max(info.start_offset, log_start), info.end_offset)
        replica.active.full = info.sealed
        return replica

    def _log_gaps(self, start: int, end: int | None) -> None:
        """Log every offset range this replica should hold but does not, as an error."""
        segments = self.segments
        if segments[0].base_offset > start:
            log.error(
                "stream range %s: offsets %d to %d are missing (before segment %d)",
                self.directory,
                start,
                segments[0].base_offset - 1,
                segments[0].base_offset,
            )
        for prev, seg in zip(segments, segments[1:], strict=False):
            if seg.base_offset > prev.next_offset:
                log.error(
                    "stream range %s: offsets %d to %d are missing (after segment %s%s); "
                    "reads skip to offset %d",
                    self.directory,
                    prev.next_offset,
                    seg.base_offset - 1,
                    prev.log_path.name,
                    f", damaged {prev.damage}" if prev.damage else "",
                    seg.base_offset,
                )
        if end is not None and self.next_offset < end:
            log.error(
                "stream range %s: offsets %d to %d of this sealed range are missing%s",
                self.directory,
                self.next_offset,
                end - 1,
                f" (segment {self.active.log_path.name} damaged {self.active.damage})"
                if self.active.damage
                else "",
            )

    def _add(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    def close(self) -> None:
        """Save the active segment's indexes and close every file (blocking). An index that
        cannot be saved (a full disk) is left to be rebuilt at the next open. Call it once
        everything written is durable: an open range records the offset it reached."""
        if not self.sealed and not self.active.closed:
            _save_hint(self.directory, self.active.base_offset, self.next_offset)
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
        _save_hint(self.directory, fresh.base_offset, fresh.base_offset)

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


# "<newest segment base> <offset reached>" of an open range: written when a roll creates a
# segment and when the replica is closed (everything below its end is durable by then), so
# that recovery can tell its last segment file was lost and not hand its offsets out again.
# Written like the indexes (no fsync): a stale or lost hint only knows less.
_HINT = "reached"


def _save_hint(directory: Path, newest: int, reached: int) -> None:
    try:
        replace_file(directory / _HINT, f"{newest} {reached}\n".encode(), durable=False)
    except OSError as exc:
        log.warning("cannot save %s in %s: %s", _HINT, directory, exc)


def _read_hint(directory: Path) -> tuple[int, int] | None:
    data = read_file(directory / _HINT)
    try:
        newest, reached = map(int, (data or b"").split())
    except ValueError:
        return None
    return newest, max(newest, reached)


def _set_aside(directory: Path, base: int) -> None:
    """Rename a segment's files out of recovery's sight, for an operator to look at."""
    name = f"{base:020d}"
    for suffix in (".log", ".index", ".timeindex"):
        path = directory / f"{name}{suffix}"
        if path.exists():
            path.rename(path.with_name(path.name + ".overlap"))
    fsync_dir(directory)


def _orphan_indexes(directory: Path, bases: set[int]) -> list[tuple[int, int]]:
    """(base, offset reached) of each segment whose index files remain but whose .log is
    gone: the segment held offsets up to at least its last indexed batch base."""
    found: dict[int, int] = {}
    for path in [*directory.glob("*.index"), *directory.glob("*.timeindex")]:
        stem = path.stem
        if not (stem.isdigit() and len(stem) == 20) or int(stem) in bases:
            continue
        base = int(stem)
        reached = base
        data = read_file(path)
        if data is not None:
            decoded = (
                OffsetIndex.decode(base, data, 2**63)
                if path.suffix == ".index"
                else TimeIndex.decode(base, data, 2**63)
            )
            if decoded is not None and decoded.offsets:
                reached = decoded.offsets[-1] + 1
        found[base] = max(found.get(base, base), reached)
    return sorted(found.items())


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
        """Delete the directories of ranges the placement driver dropped; leave the rest.

        The driver drops ranges only from the front of a stream (retention, DeleteRecords)
        and records the stream's ranges in `known`, so a range directory numbered below the
        first of them is one whose deletion a crash interrupted. Any other directory the
        placement does not list (a range above them, left by a restored older placement
        file, or an operator's own directory) is left in place, with a warning.
        """
        base = self.root / str(stream_id)
        if not base.exists() or not known:
            return
        first = min(known)
        for child in sorted(base.iterdir()):
            name = child.name
            is_range = name.isdigit() and name == str(int(name))
            if not child.is_dir() or (is_range and int(name) in known):
                continue
            if is_range and int(name) < first:
                log.info("removing directory of dropped range %s", child)
                shutil.rmtree(child, ignore_errors=True)
            elif is_range and not _holds_records(child):
                # a seal that a crash interrupted made it before the placement named it:
                # nothing was ever written there
                log.info("removing directory of a range never recorded, empty: %s", child)
                shutil.rmtree(child, ignore_errors=True)
            else:
                log.warning(
                    "leaving directory %s alone: the placement lists no such range (it has "
                    "ranges %s)",
                    child,
                    ", ".join(map(str, sorted(known))),
                )


_SEGMENT_FILE = re.compile(r"\d{20}\.(log|index|timeindex)")


def _holds_records(directory: Path) -> bool:
    """Whether `directory` holds anything but empty segments (a record, or a file that is
    no segment's, such as an operator's)."""
    for entry in directory.iterdir():
        if not (entry.is_file() and _SEGMENT_FILE.fullmatch(entry.name)):
            return True
        if entry.suffix == ".log" and entry.stat().st_size > 0:
            return True
    return False


def _save_indexes(segment: Segment) -> None:
    """Write `segment`'s indexes if the disk lets us: they are derived data, checked when
    loaded and rebuilt from the segment when missing or stale, so a full disk must not
    stop a close or a seal."""
    try:
        segment.write_indexes()
    except OSError as exc:
        log.warning("indexes of %s not saved (rebuilt when next opened): %s", segment.log_path, exc)

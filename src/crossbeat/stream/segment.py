"""One segment file of a range replica: batches stored verbatim, plus its sparse indexes.

Files in the replica directory, named by the segment's base offset (20 digits):
`<base>.log` (the batches, back to back), `<base>.index` and `<base>.timeindex` (see
`crossbeat.stream.index`). Reads use `os.pread` on a file descriptor kept open: only the
bytes returned are copied, never the whole segment.

Durability bookkeeping: `size` is what has been written, `synced` what is known fsynced. A
segment that is `full` takes no more appends (rolled or sealed); it was fsynced before the
next segment was created, so only the last segment of a range can have a torn tail.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path

from crossbeat.stream.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    WALK,
    WALK_SIZE,
    BatchHeader,
    Scanner,
    iter_batch_positions,
    parse_header,
)
from crossbeat.stream.errors import StreamError
from crossbeat.stream.file_replace import fsync_dir, replace_file
from crossbeat.stream.index import OffsetIndex, TimeIndex, read_file

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**32 - 1
_MIN_READ = 16 * 1024  # smallest pread when walking or reading a segment
_MAX_READ = 8 * 1024 * 1024  # largest single pread; a bigger first batch is read whole


def walk_headers(
    fd: int, size: int, start: int = 0, limit_offset: int | None = None, attributes: int = 0
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch of the segment file open at `fd` in [start, size)
    whose base offset is below `limit_offset` (with `attributes`, of each that has one of
    those attribute bits)."""

    def read(n: int, pos: int) -> bytes:
        return os.pread(fd, n, pos)

    for pos, base, _size, _nxt in iter_batch_positions(read, start, size, attributes=attributes):
        if limit_offset is not None and base >= limit_offset:
            return
        yield pos, parse_header(os.pread(fd, HEADER_SIZE, pos))


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    """An append-only file of RecordBatches starting at `base_offset`."""

    def __init__(self, directory: Path, base_offset: int, fd: int, interval: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.fd = fd
        self.interval = interval
        self.size = 0
        self.synced = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.last_batch_pos = -1
        self.last_batch_offset = -1
        self.offset_index = OffsetIndex(base_offset)
        self.time_index = TimeIndex(base_offset)
        self.created_ms = int(time.time() * 1000)
        self.full = False
        self.closed = False
        self.truncated = 0  # bytes cut off by recovery
        self.damage: str | None = None  # why recovery cut the segment short, if it did
        self._damage_reported = False  # read-time damage is logged once, not per fetch
        self._bytes_since_index = 0
        self._indexes_written = False

    # ---- paths -------------------------------------------------------------------------
    @property
    def log_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.log"

    @property
    def index_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.index"

    @property
    def time_index_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.timeindex"

    def __repr__(self) -> str:
        return f"Segment({self.log_path}, size={self.size}, next={self.next_offset})"

    # ---- creation and recovery ---------------------------------------------------------
    @classmethod
    def create(cls, directory: Path, base_offset: int, interval: int) -> Segment:
        """Create an empty segment file and make its directory entry durable (blocking)."""
        path = directory / f"{segment_name(base_offset)}.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(fd).st_size:
            os.close(fd)
            raise FileExistsError(f"segment {path} already holds data")
        fsync_dir(directory)
        segment = cls(directory, base_offset, fd, interval)
        for stale in (segment.index_path, segment.time_index_path):
            stale.unlink(missing_ok=True)
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, interval: int, *, verify: bool) -> Segment:
        """Open an existing segment (blocking).

        With `verify` (the last segment of the open range) every batch is CRC-checked, a
        torn or corrupt tail is truncated and fsynced, and the indexes are rebuilt. Without
        it the saved indexes are used when they match the file, and the segment is fully
        verified and re-indexed when they do not (missing, malformed or stale); a bad batch
        found then is damage, not a torn write (the segment was fsynced before the next one
        existed): the segment is cut there all the same, and the cut is logged as an error.
        Afterwards `truncated` says how many bytes recovery cut off and `damage` why.
        """
        path = directory / f"{segment_name(base_offset)}.log"
        fd = os.open(path, os.O_RDWR)
        segment = cls(directory, base_offset, fd, interval)
        segment.size = segment.synced = os.fstat(fd).st_size
        if verify or not segment._load_indexes():
            segment._recover(torn_tail_expected=verify)
        # segment.ms counts from the first batch's timestamp, as Kafka's rolling-based
        # timestamp does, not from this open: a broker restarted more often than segment.ms
        # would otherwise never roll by time
        first = next(iter(segment.headers(0)), None)
        if first is not None and first[1].max_timestamp >= 0:
            segment.created_ms = min(segment.created_ms, first[1].max_timestamp)
        return segment

    def _load_indexes(self) -> bool:
        """Adopt the saved indexes if they describe this file exactly; False otherwise."""
        data = read_file(self.index_path)
        tdata = read_file(self.time_index_path)
        if data is None or tdata is None:
            return False
        offset_index = OffsetIndex.decode(self.base_offset, data, max(self.size, 1))
        time_index = TimeIndex.decode(self.base_offset, tdata, max(self.size, 1))
        if offset_index is None or time_index is None:
            return False
        if self.size == 0:
            ok = not offset_index and not time_index
            if ok:
                self._indexes_written = True
            return ok
        # Walk from the last indexed batch to the end: the walk must land exactly on EOF.
        if offset_index:
            start, expected = offset_index.positions[-1], offset_index.offsets[-1]
        else:
            start, expected = 0, self.base_offset
        last_pos = last_base = -1
        end = start
        next_offset = expected
        for pos, base, size, nxt in iter_batch_positions(self._pread, start, self.size):
            if base != next_offset:
                return False
            last_pos, last_base, end, next_offset = pos, base, pos + size, nxt
        if end != self.size or last_pos < 0:
            return False
        # A complete time index ends with the final entry for the last batch.
        if not time_index or time_index.positions[-1] != last_pos:
            return False
        self.offset_index, self.time_index = offset_index, time_index
        self.next_offset = next_offset
        self.last_batch_pos, self.last_batch_offset = last_pos, last_base
        self.max_timestamp = time_index.timestamps[-1]
        self._bytes_since_index = self.size - (offset_index.positions[-1] if offset_index else 0)
        self._indexes_written = True
        return True

    def _recover(self, *, torn_tail_expected: bool) -> None:
        """CRC-verify every batch, truncate a bad tail, rebuild the indexes, fsync.

        `torn_tail_expected`: this segment took the last appends before a crash, so a bad
        tail is unflushed data (a warning); anywhere else it is damage (an error).
        """
        self.offset_index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.last_batch_pos = self.last_batch_offset = -1
        self._bytes_since_index = 0
        valid = 0
        error: str | None = None
        if self.size:
            with (
                mmap.mmap(self.fd, self.size, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as view,
            ):
                scanner = Scanner(view, self.base_offset)
                for pos, header in scanner:
                    self._index_batch(pos, header.base_offset, header.max_timestamp, header.size)
                    self.next_offset = header.next_offset
                valid, error = scanner.valid_bytes, scanner.error
        if valid < self.size:
            if torn_tail_expected:
                log.warning(
                    "stream segment %s: truncating %d bytes of torn or corrupt tail (%s)",
                    self.log_path,
                    self.size - valid,
                    error,
                )
            else:
                log.error(
                    "stream segment %s is damaged (%s): cut at byte %d, losing %d bytes "
                    "(its offsets from %d on)",
                    self.log_path,
                    error,
                    valid,
                    self.size - valid,
                    self.next_offset,
                )
            self.damage = error or f"at byte {valid}"
            os.ftruncate(self.fd, valid)
            self.truncated = self.size - valid
            self.size = valid
        os.fsync(self.fd)
        self.synced = self.size
        self._indexes_written = False
        for stale in (self.index_path, self.time_index_path):
            stale.unlink(missing_ok=True)

    # ---- appending ---------------------------------------------------------------------
    def fits(self, nbytes: int, last_offset_delta: int, limit_bytes: int) -> bool:
        """Whether a batch of `nbytes` ending `last_offset_delta` after next_offset fits."""
        if self.full:
            return False
        if self.size == 0:
            return True
        return (
            self.size + nbytes <= limit_bytes
            and self.next_offset + last_offset_delta - self.base_offset <= _MAX_RELATIVE_OFFSET
        )

    def append(self, buf: bytes | bytearray, base_offset: int, header: BatchHeader) -> int:
        """Write one batch at the end (no fsync) and return the new size.

        On a write error the file is cut back to its previous size and the error re-raised,
        so a failed append leaves nothing behind.
        """
        pos = self.size
        view = memoryview(buf)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self.fd, view[written:], pos + written)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, pos)
            raise
        finally:
            view.release()
        self._index_batch(pos, base_offset, header.max_timestamp, header.size)
        self.next_offset = base_offset + header.last_offset_delta + 1
        self.size = pos + header.size
        self._indexes_written = False
        return self.size

    def _index_batch(self, pos: int, base_offset: int, max_timestamp: int, size: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if self._bytes_since_index >= self.interval:
            self.offset_index.add(base_offset, pos)
            if not self.time_index or self.max_timestamp > self.time_index.timestamps[-1]:
                self.time_index.add(self.max_timestamp, base_offset, pos)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.last_batch_pos = pos
        self.last_batch_offset = base_offset

    def write_indexes(self) -> None:
        """Save both indexes, ending the time index with the final entry (blocking)."""
        if self._indexes_written or self.closed:
            return
        if self.last_batch_pos >= 0 and (
            not self.time_index or self.time_index.positions[-1] != self.last_batch_pos
        ):
            self.time_index.add(self.max_timestamp, self.last_batch_offset, self.last_batch_pos)
        replace_file(self.index_path, self.offset_index.encode(), durable=False)
        replace_file(self.time_index_path, self.time_index.encode(), durable=False)
        self._indexes_written = True

    def fsync(self) -> None:
        os.fdatasync(self.fd)

    # ---- reading -----------------------------------------------------------------------
    def _pread(self, n: int, pos: int) -> bytes:
        return os.pread(self.fd, n, pos)

    def read(
        self,
        offset: int,
        max_bytes: int,
        limit_offset: int,
        out: list[memoryview | bytes],
        used: int,
    ) -> tuple[int, bool]:
        """Append to `out` the batches from the one containing `offset` (KIP-74 rules).

        Stops before a batch at or past `limit_offset` (the high watermark) or one that
        would take `used` past `max_bytes` unless `out` is still empty. Returns the new
        `used` and whether the read is finished (False: continue in the next segment).

        Damage on disk that recovery did not see (inside batches the saved index already
        covered: a bad header, or a batch not continuing the one before) ends the read
        before the damaged batch, so the whole batches before it are served; a read that
        would start with it raises StreamError. The damage is logged once per segment.

        One pread normally covers both the walk from the sparse index entry and the data
        returned; the batches handed out are memoryview slices of that buffer.
        """
        pos = self.offset_index.lookup(offset)
        end_file = self.size
        buf = b""
        view = memoryview(buf)
        buf_pos = pos
        expect = -1  # base offset the next batch must have (-1: not known yet)
        while pos + WALK_SIZE <= end_file:
            rel = pos - buf_pos
            if rel + WALK_SIZE > len(buf):
                want = max(max_bytes - used, 0) + self.interval + WALK_SIZE
                buf = os.pread(self.fd, min(end_file - pos, max(want, _MIN_READ), _MAX_READ), pos)
                view = memoryview(buf)
                buf_pos, rel = pos, 0
                if len(buf) < WALK_SIZE:
                    break
            base, length, magic, _attributes, last_delta = WALK.unpack_from(buf, rel)
            size = length + LOG_OVERHEAD
            if (
                magic != MAGIC
                or length < HEADER_SIZE - LOG_OVERHEAD
                or pos + size > end_file
                or (base != expect and expect >= 0)
            ):
                # Only damage on disk (recovery verified what it kept) gets here.
                self._report_damage(pos, base, expect)
                if out:
                    return used, True
                raise StreamError(f"segment {self.log_path} is damaged at byte {pos}")
            expect = base + last_delta + 1
            if base + last_delta < offset:
                pos += size
                continue
            if base >= limit_offset:
                return used, True
            if out and used + size > max_bytes:
                return used, True
            if rel + size > len(buf):
                # The batch runs past the buffer: read it (and what may follow) afresh.
                want = max(size, min(max_bytes - used, _MAX_READ))
                buf = os.pread(self.fd, min(end_file - pos, want), pos)
                view = memoryview(buf)
                buf_pos, rel = pos, 0
                if len(buf) < size:
                    raise StreamError(f"segment {self.log_path} is shorter than expected")
            out.append(view[rel : rel + size])
            used += size
            pos += size
        return used, False

    def _report_damage(self, pos: int, base: int, expected: int) -> None:
        """Log read-time damage once for this segment (every fetch meets it again)."""
        if self._damage_reported:
            return
        self._damage_reported = True
        found = (
            f"base offset {base}, expected {expected}"
            if 0 <= expected != base
            else "bad batch header"
        )
        log.error(
            "stream segment %s is damaged at byte %d (%s, inside batches its index covers): "
            "reads stop before it, a read from there fails; removing %s and restarting cuts "
            "the segment at the damage",
            self.log_path,
            pos,
            found,
            self.index_path,
        )

    def headers(
        self, start: int = 0, limit_offset: int | None = None, attributes: int = 0
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of each batch from position `start` on (with
        `attributes`, of each that has one of those attribute bits: the others cost no
        header read)."""
        return walk_headers(self.fd, self.size, start, limit_offset, attributes)

    def headers_tail(self, n: int, limit_offset: int) -> list[BatchHeader]:
        """The last `n` batch headers below `limit_offset`, oldest first."""
        if n <= 0 or self.size == 0:
            return []
        k = len(self.offset_index) - 1
        step = 1
        while True:
            start = self.offset_index.entry_at_or_before(k) if k >= 0 else 0
            found = [h for _pos, h in self.headers(start, limit_offset)]
            if len(found) >= n or start == 0:
                return found[-n:]
            k -= step
            step *= 2

    def find_timestamp(
        self, timestamp: int, limit_offset: int, from_offset: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose max timestamp >= `timestamp` among
        those holding an offset >= `from_offset` (the log start: batches wholly before it
        are gone for readers, and the answer is then in a later batch, as Kafka searches
        from the log start)."""
        if self.max_timestamp < timestamp:
            return None
        start = max(self.time_index.scan_start(timestamp), self.offset_index.lookup(from_offset))
        for pos, header in self.headers(start, limit_offset):
            if header.max_timestamp >= timestamp and header.next_offset > from_offset:
                return pos, header
        return None

    def read_batch(self, pos: int, size: int) -> bytes:
        return os.pread(self.fd, size, pos)

    def age_timestamp_ms(self) -> int:
        """Newest batch timestamp, or the file's mtime when batches carry none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.fstat(self.fd).st_mtime * 1000)
        except OSError:
            return 0

    # ---- teardown ----------------------------------------------------------------------
    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)

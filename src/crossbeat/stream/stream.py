"""One stream: an ordered list of ranges (placement driver) backed by local range replicas.

Offsets are dense and assigned by the store. `end_offset` is the high watermark: every
batch below it is fsynced, and readers never see a batch at or above it, so a consumer can
never read a batch that a crash could take back. `log_end_offset` (next offset to assign) can
be ahead of it by the appends waiting for the next group-commit round.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crossbeat.stream.batch import BatchHeader, assign, validate_batch
from crossbeat.stream.errors import OffsetOutOfRange, StoreFailed, StreamError
from crossbeat.stream.header_walk import HeaderWalk
from crossbeat.stream.placement import RangeInfo, StreamMeta
from crossbeat.stream.range_server import RangeReplica
from crossbeat.stream.settings import StreamSettings

if TYPE_CHECKING:
    from crossbeat.stream.segment import Segment
    from crossbeat.stream.store import StreamStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """The segment and retention limits that apply to one stream.

    Retention (time and size, the stream's own or the store's) applies only when the
    stream's `cleanup.policy` names `delete`, as in Kafka: the default, `delete`, and
    `compact,delete`. A `compact` topic, or one with an empty policy, has no retention
    limits and keeps every record: no log cleaner runs here, and Kafka's compaction
    promises only that at least each key's latest record is kept. (DeleteRecords still
    moves its start here, where Kafka refuses it on such a topic: POLICY_VIOLATION.)"""

    segment_bytes: int
    segment_ms: int
    retention_ms: int | None
    retention_bytes: int | None

    @classmethod
    def resolve(cls, config: dict[str, str], settings: StreamSettings) -> StreamLimits:
        def number(key: str) -> int | None:
            raw = config.get(key)
            if raw is None:
                return None
            try:
                return int(raw)
            except ValueError:
                log.warning("ignoring unparsable stream config %s=%r", key, raw)
                return None

        seg_bytes = number("segment.bytes")
        seg_ms = number("segment.ms")
        ret_ms = number("retention.ms")
        ret_bytes = number("retention.bytes")
        # Kafka's LogConfig.delete: "delete" among the policy's comma-separated items
        policy = config.get("cleanup.policy", "delete")
        if "delete" not in (item.strip().lower() for item in policy.split(",")):
            ret_ms = ret_bytes = -1  # no retention, whatever the topic or store says
        return cls(
            segment_bytes=settings.segment_bytes
            if seg_bytes is None
            else min(max(seg_bytes, 1024), 2**31 - 1),
            segment_ms=settings.segment_ms if seg_ms is None or seg_ms <= 0 else seg_ms,
            retention_ms=settings.retention_ms
            if ret_ms is None
            else (None if ret_ms < 0 else ret_ms),
            retention_bytes=settings.retention_bytes
            if ret_bytes is None
            else (None if ret_bytes < 0 else ret_bytes),
        )


def _first_stored(replicas: list[RangeReplica]) -> int:
    """Base offset of the first non-empty segment; the end offset when all are empty."""
    for replica in replicas:
        for segment in replica.segments:
            if segment.size:
                return segment.base_offset
    return replicas[-1].next_offset


@dataclass(slots=True)
class _Pending:
    segment: Segment
    end: int  # segment size once this batch is written
    next_offset: int
    future: asyncio.Future[None] | None


class Stream:
    """An append-only log of Kafka RecordBatches with store-assigned offsets."""

    def __init__(self, store: StreamStore, meta: StreamMeta, replicas: list[RangeReplica]) -> None:
        self._store = store
        self._meta = meta
        self._replicas = replicas
        self._next_offset = replicas[-1].next_offset
        self._hw = self._next_offset  # recovery fsynced everything it kept
        # Offsets below the first stored batch are gone (damage or lost files, not
        # retention): the log start reported is never below it.
        self._first_stored = _first_stored(replicas)
        self._pending: deque[_Pending] = deque()
        self._lock = asyncio.Lock()
        self._hw_changed = asyncio.Event()
        self._gone: StreamError | None = None
        self._limits: StreamLimits | None = None

    # ---- metadata ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._meta.name

    @property
    def config(self) -> dict[str, str]:
        """Per-stream configuration (a copy), persisted with the placement metadata.

        Change it with `update_config`.
        """
        return dict(self._meta.config)

    @property
    def limits(self) -> StreamLimits:
        """Effective segment and retention limits: Kafka topic configs in `config`
        (`segment.bytes`, `segment.ms`, `retention.ms`, `retention.bytes`; -1 = unlimited
        for retention) override the store's settings; unparsable values are ignored. A
        `cleanup.policy` without `delete` turns retention off (see `StreamLimits`)."""
        if self._limits is None:
            self._limits = StreamLimits.resolve(self._meta.config, self._store.settings)
        return self._limits

    def update_config(self, config: dict[str, str]) -> None:
        """Replace the stream's config (persisted before returning; blocking)."""
        self._check_readable()
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
            raise StreamError("stream config keys and values must be strings")
        self._store._placement.update_config(self.name, config)
        self._limits = None

    @property
    def ranges(self) -> list[RangeInfo]:
        """Ordered ranges; only the last is open (its end_offset is None)."""
        return list(self._meta.ranges)

    @property
    def start_offset(self) -> int:
        """The log start offset: the first offset still stored (retention and
        DeleteRecords move it; it is also never below the first batch found on disk when
        the stream was opened, should earlier files have been lost)."""
        start = self._meta.start_offset
        return start if start >= self._first_stored else self._first_stored

    @property
    def end_offset(self) -> int:
        """High watermark: the next offset after the last durable (fsynced) batch."""
        return self._hw

    @property
    def log_end_offset(self) -> int:
        """The next offset the store will assign (>= end_offset)."""
        return self._next_offset

    @property
    def size_bytes(self) -> int:
        return sum(r.size_bytes for r in self._replicas)

    def __repr__(self) -> str:
        return f"Stream({self.name!r}, start={self.start_offset}, end={self.end_offset})"

    # ---- appending ---------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._gone is not None:
            raise self._gone
        self._store._check_appendable()

    async def append(self, batch: bytes | bytearray, *, durable: bool = True) -> int:
        """Append one RecordBatch v2 and return the base offset the store assigned.

        The batch is validated first (length, magic, CRC-32C, record count vs offset delta):
        on failure CorruptBatch is raised and nothing is written. The store writes
        baseOffset and partitionLeaderEpoch (= the open range's index) in place when given
        a bytearray (a bytes object is copied), then appends the bytes verbatim.
        With `durable` the call returns once the batch and everything before it in the
        stream is fsynced; otherwise right after the write (it becomes durable, and visible
        to readers, in the next group-commit round, within about flush_max_delay_ms).
        Appends to one stream are written in call order.
        """
        self._check_usable()
        header = validate_batch(batch)
        buf = batch if isinstance(batch, bytearray) else bytearray(batch)
        future: asyncio.Future[None] | None = None
        async with self._lock:
            self._check_usable()
            try:
                while True:
                    replica = self._replicas[-1]
                    if replica.sealed:  # only if sealing failed half-way (placement not written)
                        raise StreamError(f"the open range of stream {self.name!r} is sealed")
                    limits = self.limits
                    now_ms = int(time.time() * 1000)
                    if not replica.needs_roll(header, now_ms, limits.segment_bytes, limits.segment_ms):
                        break
                    await replica.roll()
                    self._check_usable()
                base = self._next_offset
                assign(buf, base, replica.index)
                segment, end = replica.append(buf, base, header)
            except OSError as exc:
                # a full disk, say: the roll and the append each undo what they began, so
                # the stream is as it was and a later append may succeed
                raise StreamError(f"cannot write to stream {self.name!r}: {exc}") from exc
            self._next_offset = base + header.last_offset_delta + 1
            if durable:
                future = asyncio.get_running_loop().create_future()
            self._pending.append(_Pending(segment, end, self._next_offset, future))
            self._store._flusher.mark(segment, self)
        if future is not None:
            await future
        return base

    def on_synced(self) -> None:
        """Flusher callback: complete appends whose bytes are now durable."""
        advanced = False
        pending = self._pending
        while pending and pending[0].segment.synced >= pending[0].end:
            entry = pending.popleft()
            self._hw = entry.next_offset
            advanced = True
            if entry.future is not None and not entry.future.done():
                entry.future.set_result(None)
        if advanced:
            self._notify()

    def on_sync_failed(self, error: StoreFailed) -> None:
        self._fail_pending(error)

    def _fail_pending(self, error: StreamError) -> None:
        while self._pending:
            entry = self._pending.popleft()
            if entry.future is not None and not entry.future.done():
                entry.future.set_exception(error)
        self._notify()

    def _notify(self) -> None:
        self._hw_changed.set()
        self._hw_changed = asyncio.Event()

    # ---- reading -----------------------------------------------------------------------
    def _check_readable(self) -> None:
        if self._gone is not None:
            raise self._gone

    def read(self, offset: int, max_bytes: int) -> list[memoryview | bytes]:
        """Stored batches from the one containing `offset` (or the first after it, when
        `offset` falls in a gap that damage left), up to `max_bytes` in total.

        The first batch is returned whole even when larger than `max_bytes` (KIP-74);
        batches are never split. Only durable batches (below end_offset) are returned.
        Raises OffsetOutOfRange unless start_offset <= offset <= end_offset;
        offset == end_offset returns [].
        """
        self._check_readable()
        start, end = self.start_offset, self._hw
        if offset < start or offset > end:
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{start}, {end}] of stream {self.name!r}",
                start_offset=start,
                end_offset=end,
            )
        out: list[memoryview | bytes] = []
        if offset == end:
            return out
        used = 0
        ri = self._replica_index_for(offset)
        for replica in self._replicas[ri:]:
            for segment in replica.segments[replica.segment_index_for(offset) :]:
                used, done = segment.read(offset, max_bytes, end, out, used)
                if done:
                    return out
                offset = max(offset, segment.next_offset)
        return out

    def _replica_index_for(self, offset: int) -> int:
        starts = [r.first_offset for r in self._replicas]
        return max(bisect.bisect_right(starts, offset) - 1, 0)

    async def wait_for(self, offset: int, timeout: float) -> bool:
        """Long-poll: True as soon as end_offset > `offset`, False after `timeout` seconds."""
        if self._hw > offset:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._hw <= offset and self._gone is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._hw_changed.wait(), remaining)
            except TimeoutError:
                break
        return self._hw > offset

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first batch whose maxTimestamp >= `ts_ms`, or None.

        Batch granularity, as in the contract: the batch's base offset and its
        maxTimestamp. (Kafka refines to the first record inside the batch; clients that
        seek there simply see a few earlier records of the same batch.)
        """
        self._check_readable()
        end, start = self._hw, self.start_offset
        for replica in self._replicas:
            for segment in replica.segments:
                if segment.max_timestamp < ts_ms:
                    continue
                found = segment.find_timestamp(ts_ms, end, from_offset=start)
                if found is not None:
                    _pos, header = found
                    return max(header.base_offset, start), header.max_timestamp
        return None

    def batch_headers_tail(self, n: int) -> list[BatchHeader]:
        """The last `n` durable batch headers (oldest first), e.g. to rebuild producer state.

        The headers carry the offsets the store assigned.
        """
        self._check_readable()
        result: list[BatchHeader] = []
        end = self._hw
        for replica in reversed(self._replicas):
            for segment in reversed(replica.segments):
                if len(result) >= n:
                    return result[-n:] if n > 0 else []
                result = segment.headers_tail(n - len(result), end) + result
        return result[-n:] if n > 0 else []

    def header_walk(self, attributes: int = 0, start_offset: int | None = None) -> HeaderWalk:
        """A snapshot walk of the durable batches from `start_offset` (default: the log
        start) to the high watermark, oldest first, that may be consumed on another thread
        while this stream goes on (see `header_walk`); with `attributes`, only the batches
        that have one of those attribute bits, and the walk reads only the first 27 bytes of
        the others, 8 KiB at a time. O(batches). Close it after use.
        """
        self._check_readable()
        start = self.start_offset if start_offset is None else max(start_offset, self.start_offset)
        end = self._hw
        segments: list[tuple[int, int]] = []
        try:
            for replica in self._replicas:
                for segment in replica.segments:
                    if segment.next_offset > start and segment.base_offset < end:
                        segments.append((os.dup(segment.fd), segment.size))
        except BaseException:
            for fd, _size in segments:
                os.close(fd)
            raise
        return HeaderWalk(start, end, segments, attributes)

    # ---- ranges ------------------------------------------------------------------------
    def seal(self) -> RangeInfo:
        """Seal the open range at the log end and open a new range there; returns the sealed one.

        Blocking (fsyncs the open range's active segment and the placement file). Appends
        already written to the sealed range are durable afterwards; later appends go to the
        new range (its index becomes the batches' partitionLeaderEpoch).
        """
        self._check_usable()
        replica = self._replicas[-1]
        end = replica.seal()
        try:
            sealed, fresh = self._store._placement.seal_range(self.name, end)
        except BaseException:
            replica.unseal()  # the placement driver still has it open: keep appending there
            raise
        self._replicas.append(self._store._range_server.create_replica(self._meta.id, fresh))
        self.on_synced()
        return sealed

    # ---- retention ---------------------------------------------------------------------
    async def enforce_retention(self, now_ms: int) -> None:
        """Delete whole old segments (time and size limits), advancing start_offset."""
        settings = self.limits
        if settings.retention_ms is None and settings.retention_bytes is None:
            return
        async with self._lock:
            if self._gone is not None:
                return
            cutoff = None if settings.retention_ms is None else now_ms - settings.retention_ms
            last = self._replicas[-1]
            active = last.active
            if cutoff is not None and active.size and active.age_timestamp_ms() < cutoff:
                # The whole open segment has expired: roll it so it can go too (as Kafka does).
                try:
                    await last.roll()
                except OSError as exc:
                    # a full disk: the older segments can still go, and free space; the roll
                    # undid itself and is tried again at the next pass
                    log.warning("stream %r: cannot roll its expired segment: %s", self.name, exc)
                else:
                    self.on_synced()
            total = self.size_bytes
            doomed: list[tuple[RangeReplica, Segment]] = []
            for replica in self._replicas:
                segments = replica.segments if replica is not last else replica.segments[:-1]
                stop = False
                for segment in segments:
                    expired = cutoff is not None and segment.age_timestamp_ms() < cutoff
                    too_big = (
                        settings.retention_bytes is not None
                        and total - segment.size >= settings.retention_bytes
                    )
                    if not (expired or too_big or segment.size == 0):
                        stop = True
                        break
                    doomed.append((replica, segment))
                    total -= segment.size
                if stop:
                    break
            if not doomed:
                return
            new_start = max(doomed[-1][1].next_offset, self.start_offset)
            dropped = self._advance_start(new_start)
            dropped_indexes = {r.index for r in dropped}
            for replica in list(self._replicas):
                if replica.index in dropped_indexes:
                    replica.delete()
                    self._replicas.remove(replica)
                else:
                    count = sum(1 for r, _ in doomed if r is replica)
                    replica.drop_first_segments(count)

    def _advance_start(self, offset: int) -> list[RangeInfo]:
        """Persist `offset` as the stream's start; on a full disk, with the store's reserve
        released (see `reserve`), so that the segments below it can go and free space."""
        return self._store.reserve.spend_on(lambda: self._store._placement.advance_start(self.name, offset))

    async def delete_before(self, offset: int) -> int:
        """Advance the log start offset to `offset` (Kafka's DeleteRecords) and return the
        start offset after the call.

        An `offset` at or below the current start changes nothing; one above end_offset
        (the high watermark) raises OffsetOutOfRange. The new start is persisted before
        returning, so it survives a crash; it may fall inside a batch (a read from it
        returns that whole batch, as Kafka does). Storage is reclaimed as retention
        reclaims it: sealed ranges and segments wholly below the new start are deleted
        now, never the open range's active segment.
        """
        async with self._lock:
            self._check_readable()
            start, end = self.start_offset, self._hw
            if offset > end:
                raise OffsetOutOfRange(
                    f"cannot move the start of stream {self.name!r} to {offset}, past its "
                    f"high watermark {end}",
                    start_offset=start,
                    end_offset=end,
                )
            if offset <= start:
                return start
            dropped = {r.index for r in self._advance_start(offset)}
            for replica in list(self._replicas):
                if replica.index in dropped:
                    replica.delete()
                    self._replicas.remove(replica)
                else:
                    below = sum(1 for seg in replica.segments if seg.next_offset <= offset)
                    replica.drop_first_segments(below)
            return self.start_offset

    # ---- teardown ----------------------------------------------------------------------
    def _mark_gone(self, error: StreamError) -> None:
        self._gone = error
        self._fail_pending(error)

    def _close_files(self) -> None:
        for replica in self._replicas:
            replica.close()

    def _delete_files(self) -> None:
        for replica in self._replicas:
            replica.delete()

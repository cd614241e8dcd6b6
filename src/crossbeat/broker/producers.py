"""Idempotent producers: producer ids, and sequence checks per (producer id, partition).

Kafka's rules (KIP-98), which clients rely on:

- A producer id comes from InitProducerId; ids are never handed out twice, even across
  restarts (`ProducerIdAllocator` reserves blocks in an fsynced file).
- Per partition the broker remembers, for each producer id, its epoch and the sequence
  ranges and base offsets of its last 5 batches (clients keep at most 5 in flight).
- A batch repeating one of those 5 is a retry of something already written: it is not
  written again and is answered with the ORIGINAL base offset and no error — exactly what
  Kafka answers. A repeat older than the remembered window gets DUPLICATE_SEQUENCE_NUMBER.
- Otherwise the batch must continue the sequence (last + 1, wrapping at 2^31) or be
  OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH; a newer epoch must
  start at sequence 0. A producer id the partition has no state for (expired, its batches
  deleted, its topic re-created) is taken up at whatever sequence it sends, as Kafka does
  since KIP-360 (it never answers UNKNOWN_PRODUCER_ID to a produce any more).

What a partition remembers outlives a restart, as Kafka's producer state snapshots make it:
it is saved to a snapshot file (`producer_snapshots`) at a clean shutdown and while the
broker runs — once `SNAPSHOT_EVERY_BATCHES` batches were appended since the last one (a
restart replays the headers of those, so this bounds that work, as Kafka's snapshot at
each segment roll does), or once the state changed and `SNAPSHOT_INTERVAL_S` passed (so a
crash costs a replay of seconds of traffic, not of the partition's life), or once the log
start passed it (DeleteRecords: a restart would not trust it). After a restart a
partition's state is loaded lazily, the first time a produce request, a marker or
DescribeProducers needs it: the snapshot, then the batch headers from its offset to the
log end replayed over it. Without a usable snapshot (none yet; or one damaged, beyond the
log end, below the log start, or not matching the log, which is logged) it is rebuilt from
every batch header from the log start, on the event loop (once per partition, logged with
its duration). That walk is not cut short by timestamps: they are the clients' (a
producer's clock years behind, or a mirror keeping original timestamps, would have its
state thrown away, and its retried batches stored twice). A partition that receives only
plain batches is loaded in a worker thread once it has gathered as many as would make a
snapshot due, and snapshotted, so that its first idempotent producer after a later restart
does not walk its whole log.

A producer's state on a partition expires once it has written nothing there for
`producer_id_expiration_ms` (Kafka's producer.id.expiration.ms, a day), unless it has a
transaction open there or a batch being appended (`expire`): without it, every short-lived
idempotent producer would stay in memory for good. Its next batch there is then that of an
unknown producer, as in Kafka. The time counts across restarts: from the snapshot's record
of its last write; for a batch replayed after the snapshot, from the batch's max timestamp
held between the snapshot's time and now (it was written in between); for state rebuilt
without a snapshot, from the rebuild.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.line_log import replace_atomically
from crossbeat.broker.producer_snapshots import (
    ProducerDoc,
    Snapshot,
    SnapshotError,
    SnapshotFiles,
)
from crossbeat.broker.txn_log import FILE_NAME as TXN_LOG_FILE
from crossbeat.stream import BatchHeader, Stream, StreamError, parse_header

log = logging.getLogger(__name__)

IN_FLIGHT = 5
_SEQ_MOD = 2**31
ID_BLOCK = 1000
# A partition's snapshot is rewritten once this many batches were appended after it: a
# restart reads back the headers of those (a few microseconds each), so this bounds it to
# tens of milliseconds, at the cost of one small fsynced file per 10,000 batches.
SNAPSHOT_EVERY_BATCHES = 10_000
# ... or once its producers changed and this many seconds passed since the last one: what a
# crash makes the restart replay stays small for a slow partition too, and a new partition
# soon has a snapshot at all. At most one fsynced file per active partition per interval.
SNAPSHOT_INTERVAL_S = 30.0


@dataclass
class _Batch:
    first_seq: int
    last_seq: int
    offset: int | asyncio.Future[int]
    # its offset is at least this (the log end when it was accepted): a snapshot taken
    # while it is being appended stops below it, so that a restart replays it
    lower_bound: int


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _ProducerEntry:
    epoch: int
    batches: deque[_Batch] = field(default_factory=lambda: deque(maxlen=IN_FLIGHT))
    last_ms: int = field(default_factory=_now_ms)  # its last batch or marker here (expiry)
    # the max timestamp of its last batch here, or its marker's time (what Kafka reports)
    last_timestamp: int = -1


@dataclass(frozen=True)
class Verdict:
    """What to do with one batch: append it, answer from a previous append, or refuse."""

    error: ErrorCode = ErrorCode.NONE
    duplicate_of: int | asyncio.Future[int] | None = None
    pending: _Batch | None = None  # set when the batch is to be appended


ACCEPT_PLAIN = Verdict()


@dataclass(frozen=True)
class ActiveProducer:
    """What a partition remembers of one producer (DescribeProducers, KIP-664)."""

    producer_id: int
    epoch: int
    last_sequence: int  # that of its newest batch here, -1 if none (e.g. after an epoch bump)
    last_timestamp: int  # its last batch's max timestamp (or marker's time); -1 unknown


def _last_seq(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % _SEQ_MOD


def _replay(producers: dict[int, _ProducerEntry], headers: Iterable[BatchHeader],
            floor_ms: int, now_ms: int) -> int:
    """Apply stored batch headers, oldest first, to `producers` as the produce path and
    `ProducerStates.marked` applied them; returns how many headers were read. A batch
    counts as written at its max timestamp held within [floor_ms, now_ms]. Runs on any
    thread (it touches only `producers`)."""
    count = 0
    for header in headers:
        count += 1
        pid, epoch = header.producer_id, header.producer_epoch
        if pid < 0 or (header.base_sequence < 0 and not header.is_control):
            continue
        entry = producers.get(pid)
        if entry is not None and epoch < entry.epoch:
            continue
        written_ms = min(max(header.max_timestamp, floor_ms), now_ms)
        if entry is None or epoch > entry.epoch:
            # a marker of a newer epoch (a bump that fenced the producer) replaces the
            # entry, as `marked` does; so does a newer epoch's first batch, as `check` does
            entry = producers[pid] = _ProducerEntry(epoch, last_ms=written_ms)
        if not header.is_control:
            newest = entry.batches[-1].offset if entry.batches else -1
            if isinstance(newest, int) and newest >= header.base_offset:
                continue  # the snapshot holds it already
            entry.batches.append(_Batch(header.base_sequence, _last_seq(header),
                                        header.base_offset, header.base_offset))
        entry.last_ms = max(entry.last_ms, written_ms)
        entry.last_timestamp = header.max_timestamp
    return count


def _headers_from(stream: Stream, offset: int) -> list[BatchHeader]:
    """The durable batch headers of `stream` from `offset` (a batch boundary) on, read
    back from the log end through the segments' offset indexes: the work grows with the
    batches after `offset`, not with the size of the segment holding it."""
    n = 64
    while True:
        headers = stream.batch_headers_tail(n)
        if len(headers) < n or headers[0].base_offset <= offset:
            return [h for h in headers if h.base_offset >= offset]
        n *= 4


def _crc_before(stream: Stream, offset: int) -> int | None:
    """The CRC of the stored batch that ends right before `offset`; None if there is no
    such batch (`offset` is not a batch boundary, or the log cannot be read there)."""
    try:
        batches = stream.read(offset - 1, 1)
    except StreamError:
        return None
    if not batches:
        return None
    header = parse_header(batches[0])
    return header.crc if header.next_offset == offset else None


def _entry(doc: ProducerDoc) -> _ProducerEntry:
    entry = _ProducerEntry(doc.epoch, last_ms=doc.last_ms, last_timestamp=doc.last_timestamp)
    entry.batches.extend(_Batch(first, last, offset, offset) for first, last, offset in doc.batches)
    return entry


class _Partition:
    """One partition's producers, and how far its snapshot lags behind them."""

    def __init__(self, stream: Stream, producers: dict[int, _ProducerEntry], unsaved: int,
                 saved_offset: int | None) -> None:
        saved = saved_offset is not None
        self.stream = stream
        self.producers = producers
        self.version = 0  # bumped by every change to `producers`
        # the offset of the snapshot on disk (-1: none usable)
        self.saved_offset = saved_offset if saved_offset is not None else -1
        # the version the snapshot on disk holds (-1: it holds less than the state)
        self.saved_version = 0 if saved and not unsaved else -1
        # when the snapshot was written or loaded (monotonic); -inf: none, write one soon
        self.saved_at = time.monotonic() if saved else -math.inf
        self.unsaved_batches = unsaved  # batches in the log after the snapshot's offset
        self.retry_at = 0.0  # a failed write is not tried again before this


@dataclass
class _Unloaded:
    """A partition whose state is not loaded but which receives plain batches."""

    stream: Stream
    since: float  # monotonic time of the first of them
    batches: int = 0


@dataclass
class _Start:
    """Where a partition's state is loaded from: a snapshot's producers and offset, or
    nothing and the log start."""

    producers: dict[int, _ProducerEntry]
    offset: int  # replay from here
    floor_ms: int  # replayed batches were written no earlier than this
    snapshot_offset: int | None  # that of the snapshot loaded, if one was


class ProducerStates:
    """Sequence bookkeeping of every idempotent producer on every partition.

    With `snapshot_dir`, each partition's state is saved there (`save_due`) and loaded from
    there after a restart; without, it is rebuilt from the whole log."""

    def __init__(self, snapshot_dir: Path | None = None) -> None:
        self._files = SnapshotFiles(snapshot_dir) if snapshot_dir is not None else None
        self._partitions: dict[str, _Partition] = {}
        self._unloaded: dict[str, _Unloaded] = {}
        self._closing = False  # read by worker threads: a walk under way gives up

    # -- loading -----------------------------------------------------------------------------
    def _state(self, stream: Stream) -> _Partition:
        part = self._partitions.get(stream.name)
        if part is None or part.stream is not stream:
            part = self._load(stream)
        return part

    def _partition(self, stream: Stream) -> dict[int, _ProducerEntry]:
        return self._state(stream).producers

    def _snapshot(self, stream: Stream) -> Snapshot | None:
        """`stream`'s snapshot if it still describes the log; None (logged) if not."""
        if self._files is None:
            return None
        try:
            snapshot = self._files.read(stream.name)
        except SnapshotError as exc:
            problem = str(exc)
        else:
            if snapshot is None:
                return None
            offset, start, end = snapshot.offset, stream.start_offset, stream.end_offset
            if offset > end:
                problem = f"its offset {offset} is beyond the log end {end}"
            elif offset < start:
                problem = f"its offset {offset} is below the log start {start}"
            elif offset > start and _crc_before(stream, offset) != snapshot.crc:
                problem = f"the log's batch before its offset {offset} is not the one it follows"
            else:
                return snapshot
        log.warning("%s: the producer state snapshot is not used (%s): rebuilding the "
                    "producers' state from the whole log", stream.name, problem)
        return None

    def _start(self, stream: Stream) -> _Start:
        snapshot = self._snapshot(stream)
        if snapshot is None:
            # counted from the rebuild: the log records no append times to trust
            return _Start({}, stream.start_offset, _now_ms(), None)
        producers = {doc.producer_id: _entry(doc) for doc in snapshot.producers}
        return _Start(producers, snapshot.offset, snapshot.taken_ms, snapshot.offset)

    def _install(self, stream: Stream, start: _Start, replayed: int, began: float) -> _Partition:
        part = _Partition(stream, start.producers, replayed, start.snapshot_offset)
        self._partitions[stream.name] = part
        self._unloaded.pop(stream.name, None)
        if start.snapshot_offset is None and replayed:
            log.info("%s: producer state rebuilt from %d batch headers in %.0f ms",
                     stream.name, replayed, (time.monotonic() - began) * 1000)
        return part

    def _load(self, stream: Stream) -> _Partition:
        """Load the partition's state here and now (raises StreamError if the log cannot
        be read)."""
        began = time.monotonic()
        start = self._start(stream)
        if start.snapshot_offset is not None:
            headers: Iterable[BatchHeader] = _headers_from(stream, start.offset)
            replayed = _replay(start.producers, headers, start.floor_ms, _now_ms())
        else:
            with stream.header_walk(start_offset=start.offset) as walk:
                replayed = _replay(start.producers, (b.header for b in walk),
                                   start.floor_ms, _now_ms())
        return self._install(stream, start, replayed, began)

    async def _load_off_loop(self, unloaded: _Unloaded) -> None:
        """Load the partition's state with the long part (a walk of the whole log) in a
        worker thread; kept only if nothing loaded or forgot the partition meanwhile."""
        stream = unloaded.stream
        began = time.monotonic()
        start = self._start(stream)
        replayed = 0
        if start.snapshot_offset is None:
            walk = stream.header_walk(start_offset=start.offset)

            def headers() -> Iterator[BatchHeader]:
                for batch in walk:
                    if self._closing:
                        return  # a shutdown does not wait for a long log's walk
                    yield batch.header

            try:
                replayed = await asyncio.to_thread(
                    _replay, start.producers, headers(), start.floor_ms, _now_ms())
            finally:
                walk.close()
            if self._closing or self._unloaded.get(stream.name) is not unloaded:
                return  # loaded on first use meanwhile, its topic deleted, or closing
            start.offset = walk.end_offset
        replayed += _replay(start.producers, _headers_from(stream, start.offset),
                            start.floor_ms, _now_ms())
        self._install(stream, start, replayed, began)

    # -- snapshots ---------------------------------------------------------------------------
    def _capture(self, part: _Partition) -> Snapshot | None:
        """The partition's state as of an offset of its log, to write as its snapshot; None
        if there is no offset to take it at now (the log cannot be read there)."""
        stream = part.stream
        # below the high watermark every batch is durable; one being appended is not
        # durable and its offset is at least its lower bound: stop below both, so that
        # what the snapshot leaves out the replay after it finds in the log
        offset = stream.end_offset
        for entry in part.producers.values():
            for batch in entry.batches:
                if not isinstance(batch.offset, int):
                    offset = min(offset, batch.lower_bound)
        crc = -1
        if offset > stream.start_offset:
            found = _crc_before(stream, offset)
            if found is None:
                return None
            crc = found
        docs = []
        for pid, entry in part.producers.items():
            batches = tuple((b.first_seq, b.last_seq, b.offset) for b in entry.batches
                            if isinstance(b.offset, int) and b.offset < offset)
            if entry.batches and not batches:
                continue  # all it wrote is at or past the offset: the replay brings it back
            docs.append(ProducerDoc(pid, entry.epoch, entry.last_ms, entry.last_timestamp,
                                    batches))
        return Snapshot(stream.name, offset, crc, _now_ms(), tuple(docs))

    async def _save(self, part: _Partition) -> None:
        assert self._files is not None
        now = time.monotonic()
        try:
            snapshot = self._capture(part)
        except StreamError as exc:  # its stream is gone: its topic was deleted
            log.debug("%s: no producer state snapshot: %s", part.stream.name, exc)
            snapshot = None
        if snapshot is None:
            part.retry_at = now + SNAPSHOT_INTERVAL_S
            return
        version, unsaved = part.version, part.unsaved_batches
        generation = self._files.generation(snapshot.stream)
        try:
            await asyncio.to_thread(self._files.write, snapshot, generation)
        except OSError as exc:
            part.retry_at = now + SNAPSHOT_INTERVAL_S
            log.warning("%s: cannot write the producer state snapshot (tried again in %.0f "
                        "s): %s", snapshot.stream, SNAPSHOT_INTERVAL_S, exc)
            return
        part.saved_version = version
        part.saved_offset = snapshot.offset
        part.saved_at = now
        part.unsaved_batches = max(part.unsaved_batches - unsaved, 0)

    async def save_due(self, *, everything: bool = False) -> int:
        """Write the snapshots that are due (see the module docstring), or with
        `everything` (a clean shutdown) that of every loaded partition whose snapshot lags
        behind its state; returns how many partitions were looked at for writing."""
        if self._files is None:
            return 0
        now = time.monotonic()
        saved = 0
        if not everything:
            for name, unloaded in list(self._unloaded.items()):
                if self._closing:
                    return saved
                if (unloaded.batches >= SNAPSHOT_EVERY_BATCHES
                        or now - unloaded.since >= SNAPSHOT_INTERVAL_S):
                    try:
                        await self._load_off_loop(unloaded)
                    except (OSError, StreamError) as exc:
                        log.warning("%s: cannot load the producer state: %s", name, exc)
                        if self._unloaded.get(name) is unloaded:
                            del self._unloaded[name]  # loaded on first use, or tried again
        for name, part in list(self._partitions.items()):
            if self._partitions.get(name) is not part:
                continue
            changed = part.version != part.saved_version
            if everything:
                due = changed or part.unsaved_batches > 0
            else:
                # also once the log start passed the snapshot (DeleteRecords): a restart
                # would not trust it any more
                due = now >= part.retry_at and (
                    part.unsaved_batches >= SNAPSHOT_EVERY_BATCHES
                    or (changed and now - part.saved_at >= SNAPSHOT_INTERVAL_S)
                    or part.saved_offset < part.stream.start_offset)
            if due:
                await self._save(part)
                saved += 1
        return saved

    def closing(self) -> None:
        """The broker is closing: a `save_due` under way stops loading partitions (the
        snapshots of those loaded are still written by `save_due(everything=True)`)."""
        self._closing = True

    def prune(self, streams: set[str]) -> None:
        """Delete the snapshots of partitions not in `streams` (blocking; at start)."""
        if self._files is not None:
            removed = self._files.prune(streams)
            if removed:
                log.info("removed %d producer state snapshots of deleted partitions", removed)

    # -- the produce path --------------------------------------------------------------------
    def active(self, stream: Stream) -> list[ActiveProducer]:
        """The producers the partition remembers, by producer id; the partition's state is
        loaded first if it was not yet (raises StreamError if the log cannot be read)."""
        return [
            ActiveProducer(pid, entry.epoch,
                           entry.batches[-1].last_seq if entry.batches else -1,
                           entry.last_timestamp)
            for pid, entry in sorted(self._partition(stream).items())
        ]

    def forget(self, stream_name: str) -> None:
        """Drop a partition's state and snapshot (its topic was deleted)."""
        self._partitions.pop(stream_name, None)
        self._unloaded.pop(stream_name, None)
        if self._files is not None:
            self._files.remove(stream_name)

    def _plain(self, stream: Stream) -> None:
        """Count a plain batch: it lengthens the replay after the partition's snapshot."""
        part = self._partitions.get(stream.name)
        if part is not None and part.stream is stream:
            part.unsaved_batches += 1
            return
        if self._files is None:
            return
        unloaded = self._unloaded.get(stream.name)
        if unloaded is None or unloaded.stream is not stream:
            unloaded = self._unloaded[stream.name] = _Unloaded(stream, time.monotonic())
        unloaded.batches += 1

    def check(self, stream: Stream, header: BatchHeader) -> Verdict:
        """Decide about a validated batch. On acceptance the batch is recorded as pending:
        the caller must call `appended` or `failed` with the verdict once the append ends."""
        if header.producer_id < 0:
            self._plain(stream)
            return ACCEPT_PLAIN
        part = self._state(stream)
        state = part.producers
        pid, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
        last = _last_seq(header)
        entry = state.get(pid)
        if entry is not None and epoch < entry.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH)
        if entry is None or epoch > entry.epoch or not entry.batches:
            # A producer this partition has no state for (its state expired, its topic was
            # re-created, DeleteRecords or retention took its batches) may go on at any
            # sequence, as Kafka's ProducerAppendInfo.checkSequence accepts it since KIP-360;
            # UNKNOWN_PRODUCER_ID made librdkafka fail fatally with requests in flight
            if first != 0 and entry is not None:
                return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
            entry = state[pid] = _ProducerEntry(epoch)
        else:
            for batch in entry.batches:
                if batch.first_seq == first and batch.last_seq == last:
                    return Verdict(duplicate_of=batch.offset)
            expected = (entry.batches[-1].last_seq + 1) % _SEQ_MOD
            if first != expected:
                oldest = entry.batches[0].first_seq
                behind = (oldest - first) % _SEQ_MOD
                if 0 < behind < _SEQ_MOD // 2:
                    return Verdict(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
                return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        pending = _Batch(first, last, asyncio.get_running_loop().create_future(),
                         stream.log_end_offset)
        entry.batches.append(pending)
        entry.last_ms = _now_ms()
        entry.last_timestamp = header.max_timestamp
        part.version += 1
        part.unsaved_batches += 1
        return Verdict(pending=pending)

    def marked(self, stream: Stream, producer_id: int, epoch: int) -> None:
        """A transaction marker of (producer_id, epoch) was written: a newer epoch (a bump
        that fenced the producer) replaces the producer's entry, so older epochs are refused
        and the next batch must start at sequence 0."""
        part = self._state(stream)
        state = part.producers
        entry = state.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = state[producer_id] = _ProducerEntry(epoch)
        entry.last_ms = _now_ms()
        entry.last_timestamp = entry.last_ms
        part.version += 1
        part.unsaved_batches += 1

    def expire(
        self, expiration_ms: int, in_transaction: Callable[[str, int], bool],
        now_ms: int | None = None,
    ) -> int:
        """Forget every producer that has written nothing to a partition for
        `expiration_ms`, unless `in_transaction(partition, producer id)` or a batch of it is
        being appended there; returns how many were forgotten."""
        now = _now_ms() if now_ms is None else now_ms
        removed = 0
        for name, part in self._partitions.items():
            state = part.producers
            for pid in [pid for pid, entry in state.items() if now - entry.last_ms > expiration_ms]:
                entry = state[pid]
                if any(isinstance(b.offset, asyncio.Future) for b in entry.batches):
                    continue
                if in_transaction(name, pid):
                    continue
                del state[pid]
                part.version += 1
                removed += 1
        return removed

    @staticmethod
    def appended(verdict: Verdict, base_offset: int) -> None:
        batch = verdict.pending
        if batch is not None:
            fut = batch.offset
            batch.offset = base_offset
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_result(base_offset)

    def failed(self, stream: Stream, header: BatchHeader, verdict: Verdict, exc: BaseException) -> None:
        """The append failed: forget the pending batch so the client's retry is accepted."""
        batch = verdict.pending
        if batch is None:
            return
        part = self._partitions.get(stream.name)
        entry = part.producers.get(header.producer_id) if part is not None else None
        if part is not None and entry is not None:
            with contextlib.suppress(ValueError):
                entry.batches.remove(batch)
            part.version += 1
        fut = batch.offset
        if isinstance(fut, asyncio.Future) and not fut.done():
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: nobody may be waiting on it


class ProducerIdAllocator:
    """Hands out producer ids that are unique forever: blocks of `ID_BLOCK` are reserved
    by fsyncing the next free id to `producer_ids` before any id of the block is used.

    The file exists from the broker's first start on (`prepare`, before anything else is
    written to the data dir), so that its absence later means it was lost, not that no id
    was ever handed out."""

    FILE_NAME = "producer_ids"

    def __init__(self, directory: Path) -> None:
        self._path = directory / self.FILE_NAME
        self._next = 0
        self._limit = 0
        self._lock = asyncio.Lock()

    @classmethod
    def prepare(cls, directory: Path) -> None:
        """Create the file if it is missing (blocking; at start, before the stream store
        and the transaction log are opened): with 0 in a data dir that holds nothing else
        yet, its first start; otherwise with ids from the clock (`_clock_start`), since a
        data dir of a version that made the file only at the first InitProducerId, where
        ids may or may not have been handed out, cannot be told from one whose file was
        lost."""
        path = directory / cls.FILE_NAME
        if path.exists():
            return  # a damaged one is for `_reserve` to find
        fresh = not _holds_data(directory)
        start = 0 if fresh else _clock_start()
        try:
            replace_atomically(path, b"%d\n" % start)
        except OSError as exc:  # a full disk: `_reserve` decides as before, and says so
            log.error("cannot create %s: %s", path, exc)
            return
        if not fresh:
            log.warning("%s was missing in a data dir that holds data (written by an older "
                        "version, or lost): producer ids resume at %d, above any handed out "
                        "before", path, start)

    def _reserve(self) -> tuple[int, int]:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        try:
            text = self._path.read_text().strip()
            start = int(text) if text else None
        except FileNotFoundError:
            start = None
        except (OSError, ValueError) as exc:
            log.error("%s is unreadable (%s)", self._path, exc)
            start = None
        if start is None or start < 0:
            start = self._fresh_start()
        limit = start + ID_BLOCK
        replace_atomically(self._path, b"%d\n" % limit)
        return start, limit

    def _fresh_start(self) -> int:
        """0 for a broker that never had data; otherwise (the file lost, emptied or damaged
        while streams exist) a start above every id handed out before, which ids from the
        clock give: an id used again would make a new producer's first batches look like
        duplicates of an old one's, acknowledged and never stored."""
        if not _holds_data(self._path.parent):
            return 0
        start = _clock_start()
        log.error("%s is missing or damaged while the broker holds data: producer ids resume "
                  "at %d, above any handed out before", self._path, start)
        return start

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._limit:
                self._next, self._limit = await asyncio.to_thread(self._reserve)
            pid = self._next
            self._next += 1
            return pid


def _holds_data(directory: Path) -> bool:
    """Whether anything in the data dir could hold a producer id: a partition's batches
    (the store's placement file exists once a topic was made) or a transactional id."""
    return ((directory / "streams" / "placement.json").exists()
            or (directory / TXN_LOG_FILE).exists())


def _clock_start() -> int:
    """A first producer id above any a counter started at 0 has reached, from the clock."""
    return int(time.time() * 1000) * ID_BLOCK

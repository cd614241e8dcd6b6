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
  start at sequence 0; an unknown producer id starting past 0 is UNKNOWN_PRODUCER_ID.

State is rebuilt lazily after a restart, per partition, from the stored batch headers
(`Stream.batch_headers_tail`), the first time that partition sees a produce request.

A producer's state on a partition expires once it has written nothing there for
`producer_id_expiration_ms` (Kafka's producer.id.expiration.ms, a day), unless it has a
transaction open there or a batch being appended (`expire`): without it, every short-lived
idempotent producer would stay in memory for good. Its next batch there is then that of an
unknown producer, as in Kafka. State rebuilt after a restart counts from the rebuild.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.line_log import replace_atomically
from crossbeat.stream import BatchHeader, Stream

log = logging.getLogger(__name__)

IN_FLIGHT = 5
REBUILD_BATCHES = 256  # headers read back per partition after a restart
_SEQ_MOD = 2**31
ID_BLOCK = 1000


@dataclass
class _Batch:
    first_seq: int
    last_seq: int
    offset: int | asyncio.Future[int]


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


class ProducerStates:
    """Sequence bookkeeping of every idempotent producer on every partition."""

    def __init__(self) -> None:
        self._partitions: dict[str, dict[int, _ProducerEntry]] = {}

    def _partition(self, stream: Stream) -> dict[int, _ProducerEntry]:
        state = self._partitions.get(stream.name)
        if state is None:
            state = {}
            for header in stream.batch_headers_tail(REBUILD_BATCHES):
                if header.producer_id < 0 or header.base_sequence < 0:
                    continue
                entry = state.get(header.producer_id)
                if entry is None or header.producer_epoch > entry.epoch:
                    entry = state[header.producer_id] = _ProducerEntry(header.producer_epoch)
                elif header.producer_epoch < entry.epoch:
                    continue
                entry.batches.append(
                    _Batch(header.base_sequence, _last_seq(header), header.base_offset)
                )
                entry.last_timestamp = header.max_timestamp
            self._partitions[stream.name] = state
        return state

    def active(self, stream: Stream) -> list[ActiveProducer]:
        """The producers the partition remembers, by producer id; the partition's state is
        rebuilt from its log tail first if it has none yet (raises StreamError if the log
        cannot be read)."""
        return [
            ActiveProducer(pid, entry.epoch,
                           entry.batches[-1].last_seq if entry.batches else -1,
                           entry.last_timestamp)
            for pid, entry in sorted(self._partition(stream).items())
        ]

    def forget(self, stream_name: str) -> None:
        """Drop a partition's state (its topic was deleted)."""
        self._partitions.pop(stream_name, None)

    def check(self, stream: Stream, header: BatchHeader) -> Verdict:
        """Decide about a validated batch. On acceptance the batch is recorded as pending:
        the caller must call `appended` or `failed` with the verdict once the append ends."""
        if header.producer_id < 0:
            return ACCEPT_PLAIN
        state = self._partition(stream)
        pid, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
        last = _last_seq(header)
        entry = state.get(pid)
        if entry is not None and epoch < entry.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH)
        if entry is None or epoch > entry.epoch or not entry.batches:
            if first != 0:
                code = (ErrorCode.UNKNOWN_PRODUCER_ID if entry is None
                        else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
                return Verdict(code)
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
        pending = _Batch(first, last, asyncio.get_running_loop().create_future())
        entry.batches.append(pending)
        entry.last_ms = _now_ms()
        entry.last_timestamp = header.max_timestamp
        return Verdict(pending=pending)

    def marked(self, stream: Stream, producer_id: int, epoch: int) -> None:
        """A transaction marker of (producer_id, epoch) was written: a newer epoch (a bump
        that fenced the producer) replaces the producer's entry, so older epochs are refused
        and the next batch must start at sequence 0."""
        state = self._partition(stream)
        entry = state.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = state[producer_id] = _ProducerEntry(epoch)
        entry.last_ms = _now_ms()
        entry.last_timestamp = entry.last_ms

    def expire(
        self, expiration_ms: int, in_transaction: Callable[[str, int], bool],
        now_ms: int | None = None,
    ) -> int:
        """Forget every producer that has written nothing to a partition for
        `expiration_ms`, unless `in_transaction(partition, producer id)` or a batch of it is
        being appended there; returns how many were forgotten."""
        now = _now_ms() if now_ms is None else now_ms
        removed = 0
        for name, state in self._partitions.items():
            for pid in [pid for pid, entry in state.items() if now - entry.last_ms > expiration_ms]:
                entry = state[pid]
                if any(isinstance(b.offset, asyncio.Future) for b in entry.batches):
                    continue
                if in_transaction(name, pid):
                    continue
                del state[pid]
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
        entry = self._partitions.get(stream.name, {}).get(header.producer_id)
        if entry is not None:
            with contextlib.suppress(ValueError):
                entry.batches.remove(batch)
        fut = batch.offset
        if isinstance(fut, asyncio.Future) and not fut.done():
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: nobody may be waiting on it


class ProducerIdAllocator:
    """Hands out producer ids that are unique forever: blocks of `ID_BLOCK` are reserved
    by fsyncing the next free id to `producer_ids` before any id of the block is used."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / "producer_ids"
        self._next = 0
        self._limit = 0
        self._lock = asyncio.Lock()

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
        if not (self._path.parent / "streams" / "placement.json").exists():
            return 0
        start = int(time.time() * 1000) * ID_BLOCK
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

"""Per-partition transaction state: the open transactions, the last stable offset (LSO)
and the aborted-transaction index that read_committed fetches need (KIP-98).

A partition's state is built once per process from its stored batch headers (a forward
walk of the log that reads only the transactional batches' headers and the control
batches' records), the first time anything needs it, in a worker thread (`ensure`), then
kept up to date by the produce path and the transaction coordinator:

- `begin` when a transactional batch of a producer with no open transaction here is about
  to be appended, with the log end offset as a lower bound of its first offset (so the
  LSO holds before the batch can become visible), `started` with the real base offset
  after the append;
- `end` when a COMMIT/ABORT marker of the producer was appended (and is durable): an
  aborted transaction is remembered as (producer id, first offset, marker offset).

LSO = the first offset of the earliest open transaction, else the high watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from crossbeat.broker.control_batch import ABORT, COMMIT, control_type
from crossbeat.stream import Stream
from crossbeat.stream.batch import TRANSACTIONAL
from crossbeat.stream.errors import StreamError
from crossbeat.stream.header_walk import HeaderWalk

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction of one partition: its producer, first and last offset (that of
    its ABORT marker)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass
class TxnIndex:
    """Open and aborted transactions of one partition."""

    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    aborted: list[AbortedTxn] = field(default_factory=list)  # by marker offset

    def begin(self, producer_id: int, lower_bound: int) -> bool:
        """Note that `producer_id` is writing a transactional batch whose offset will be at
        least `lower_bound`; True when this opened its transaction here."""
        if producer_id in self.open:
            return False
        self.open[producer_id] = lower_bound
        return True

    def started(self, producer_id: int, lower_bound: int, base_offset: int) -> None:
        """The batch `begin` opened the transaction for was written at `base_offset`.
        Ignored when a marker already ended it (it then keeps the lower bound, which still
        covers the batch)."""
        if self.open.get(producer_id) == lower_bound:
            self.open[producer_id] = base_offset

    def end(self, producer_id: int, marker_offset: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of `producer_id` was written at `marker_offset`. A marker
        without an open transaction here (nothing was written, or a repeated marker) changes
        nothing, as in Kafka."""
        first = self.open.pop(producer_id, None)
        if first is not None and not commit:
            self.aborted.append(AbortedTxn(producer_id, first, marker_offset))

    def last_stable_offset(self, high_watermark: int) -> int:
        return min(min(self.open.values(), default=high_watermark), high_watermark)

    def aborted_overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with an offset in [start, end): those a fetch of that range
        must name so that the client drops their records."""
        return [a for a in self.aborted if a.first_offset < end and a.last_offset >= start]

    def truncate_before(self, log_start: int) -> None:
        """Forget aborted transactions wholly below the log start (deleted by retention)."""
        if self.aborted and self.aborted[0].last_offset < log_start:
            self.aborted = [a for a in self.aborted if a.last_offset >= log_start]


def add_walk(index: TxnIndex, walk: HeaderWalk, name: str) -> None:
    """Apply the transactional batches and markers `walk` meets to `index`, in log order
    (runs on any thread: it reads only through the walk)."""
    for batch in walk:
        header = batch.header
        if header.producer_id < 0:
            continue
        if not header.is_control:
            index.open.setdefault(header.producer_id, header.base_offset)
            continue
        try:
            kind: int | None = control_type(batch.read())
        except (OSError, ValueError):
            kind = None
        if kind in (ABORT, COMMIT):
            index.end(header.producer_id, header.base_offset, kind == COMMIT)
        else:
            log.warning("%s: unreadable control batch at %d", name, header.base_offset)


def rebuild(stream: Stream) -> TxnIndex:
    """The index of `stream` from its stored (durable) batches, built here and now."""
    index = TxnIndex()
    with stream.header_walk(TRANSACTIONAL) as walk:
        add_walk(index, walk, stream.name)
    return index


class PartitionTxns:
    """The `TxnIndex` of every partition that needed one, by stream name.

    An index is built from the partition's log the first time it is needed: by `ensure`,
    which the broker's handlers await, in a worker thread, so that walking a long log after
    a restart holds up neither the event loop nor other partitions; or by `get` on the spot
    (what `ensure` leaves to it: a build that failed is tried again there, and fails there).
    The produce path keeps a partition's batches in arrival order across that wait
    (`produce_order`).
    """

    def __init__(self) -> None:
        self._indexes: dict[str, TxnIndex] = {}
        self._building: dict[str, asyncio.Task[None]] = {}

    async def ensure(self, stream: Stream) -> None:
        """Return once the partition's index exists, or its build failed (concurrent
        callers share one build). Does not suspend once the index is built."""
        name = stream.name
        if name in self._indexes:
            return
        building = self._building.get(name)
        if building is None:
            building = asyncio.ensure_future(self._build(stream))
            self._building[name] = building
            building.add_done_callback(lambda done: self._built(name, done))
        with contextlib.suppress(StreamError):  # left to `get`, which tries again and raises
            await asyncio.shield(building)

    def _built(self, name: str, done: asyncio.Task[None]) -> None:
        if self._building.get(name) is done:
            del self._building[name]
        if not done.cancelled() and done.exception() is not None:
            log.warning("%s: transaction index not built: %s", name, done.exception())

    async def _build(self, stream: Stream) -> None:
        index = TxnIndex()
        walk = stream.header_walk(TRANSACTIONAL)
        try:
            await asyncio.to_thread(add_walk, index, walk, stream.name)
        finally:
            walk.close()
        if self._building.get(stream.name) is not asyncio.current_task():
            return  # forgotten meanwhile (its topic was deleted)
        if stream.name in self._indexes:
            return  # `get` built it meanwhile
        # What became durable during the walk, walked here on the loop: normally nothing
        # transactional, since transactional appends and markers wait for this build.
        with stream.header_walk(TRANSACTIONAL, start_offset=walk.end_offset) as rest:
            add_walk(index, rest, stream.name)
        self._indexes[stream.name] = index

    def get(self, stream: Stream) -> TxnIndex:
        """The partition's index, built from its log on the spot if `ensure` has not built
        it (raises StreamError if the log cannot be read)."""
        index = self._indexes.get(stream.name)
        if index is None:
            index = self._indexes[stream.name] = rebuild(stream)
        index.truncate_before(stream.start_offset)
        return index

    def peek(self, stream_name: str) -> TxnIndex | None:
        """The partition's index if it was built already (no log walk)."""
        return self._indexes.get(stream_name)

    def last_stable_offset(self, stream: Stream) -> int:
        try:
            return self.get(stream).last_stable_offset(stream.end_offset)
        except StreamError:
            return stream.end_offset

    def forget(self, stream_name: str) -> None:
        """Drop a partition's index (its topic was deleted); a build under way is not kept
        (its waiters go on, and find none)."""
        self._indexes.pop(stream_name, None)
        self._building.pop(stream_name, None)

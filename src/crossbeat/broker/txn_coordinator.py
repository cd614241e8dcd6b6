"""The transaction coordinator (KIP-98) of this single-node broker.

Every transactional id has a producer id and epoch, a timeout and a state::

    Empty / CompleteCommit / CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn--> PrepareCommit | PrepareAbort --markers written--> Complete*

Each change is written to the transaction log (`txn_log.py`, fsynced) before it is acted
on or answered, and takes effect in memory only once written, as in Kafka: a change the log
refuses (a full disk) leaves the id's state as it was, and the request gets the retriable
COORDINATOR_NOT_AVAILABLE. Ending a transaction: the Prepare state is made durable (the
decision), then a COMMIT/ABORT control batch is appended durably to every partition of the
transaction, then (commit only) the offsets staged by TxnOffsetCommit are committed to
their groups, then the Complete state is written; EndTxn is answered after all of it.
Markers and offset commits that succeeded are remembered (in memory) until the Complete
state is written, so a retry after a partial failure does only the rest: one marker per
partition per Prepare state, as Kafka's marker channel retries only the partitions that
failed. A crash in between is finished at the next open (`recover`): a PrepareCommit is
committed again, a PrepareAbort aborted again (markers and offsets repeated once are
harmless).

Fencing: InitProducerId for a known id bumps its epoch (aborting its open transaction with
the new epoch first), so requests with the older epoch get PRODUCER_FENCED (the handlers
answer INVALID_PRODUCER_EPOCH to request versions that predate it). A transaction open
longer than its timeout is aborted by `expire` with a bumped epoch, as Kafka does, which
fences the producer that let it time out. InitProducerId v3+ naming the current or the
previous (id, epoch) is a running producer recovering (KIP-360): bumped, not fenced.
Operations on one id are serialised by a lock.

A transaction still Ongoing when the broker stops is kept when it restarts, as Kafka keeps
it: its producer reconnects and may go on and commit it, and if it does not, `expire` aborts
it (fencing the producer) once its timeout has passed since it began, counted across the
restart. The partitions can take it up again: each rebuilds its open transactions and last
stable offset from its log (`partition_txns`), and its producers' epochs and sequences from
its producer state snapshot and log (`producers`); `recover` builds the transaction indexes
of the kept transactions' partitions at once, so that what reads them without building them
(DescribeProducers, producer expiry) sees those transactions open.

A transactional id whose state has not changed for `transactional_id_expiration_ms`
(Kafka's transactional.id.expiration.ms, 7 days) and that has no transaction under way is
removed (`remove_expired`), as in Kafka: its next InitProducerId starts it afresh, with a
new producer id. Ids loaded from a log written before this field existed count from the
load.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crossbeat.broker.control_batch import control_batch
from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.offsets import Entry
from crossbeat.stream.errors import StreamError

if TYPE_CHECKING:
    from crossbeat.broker.broker import Broker

log = logging.getLogger(__name__)

EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"
_IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
STUCK_LOG_INTERVAL_S = 60.0  # how often a transaction that cannot be finished is logged
MAX_EPOCH = 32766  # Kafka bumps to a new producer id rather than reach Short.MAX_VALUE

Partition = tuple[str, int]


async def write_marker(
    broker: Broker, topic: str, index: int, pid: int, epoch: int, commit: bool
) -> int | None:
    """Append the marker ending producer `pid`'s transaction on a partition (commit or
    abort) and apply it to the partition's transaction index and producer state; returns
    its offset, or None if the partition does not exist (deleted: nothing to end). Raises
    what the append raises (OSError, StreamError)."""
    stream = broker.topics.partition(topic, index)
    if stream is None:
        return None
    await broker.partition_txns.ensure(stream)  # built off the loop the first time
    if broker.topics.partition(topic, index) is not stream:  # deleted meanwhile
        return None
    txns = broker.partition_txns.get(stream)  # before the append: a rebuild must not see it
    offset = await stream.append(control_batch(pid, epoch, commit, _now_ms()))
    txns.end(pid, offset, commit)
    broker.producers.marked(stream, pid, epoch)
    return offset


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Txn:
    """One transactional id's state (what the transaction log holds)."""

    tid: str
    pid: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: set[Partition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    offsets: dict[str, dict[Partition, tuple[int | None, int, str | None]]] = field(default_factory=dict)
    started_ms: int = 0
    # the (producer id, epoch) before the last bump: KIP-360's InitProducerId from the
    # producer that held it gets the current epoch (its response was lost, or the bump was
    # this coordinator's timeout abort) rather than PRODUCER_FENCED
    previous: tuple[int, int] = (-1, -1)
    updated_ms: int = field(default_factory=lambda: _now_ms())  # its last durable change
    # progress of ending the transaction in a Prepare state, not in the log: the partitions
    # whose marker and the groups whose staged offsets are durable, which a retry skips
    marked: set[Partition] = field(default_factory=set)
    offsets_committed: set[str] = field(default_factory=set)

    @property
    def start_ms(self) -> int:
        """When the current or last transaction began, as DescribeTransactions and
        ListTransactions report it: -1 once InitProducerId reset the id to Empty, as in
        Kafka."""
        return -1 if self.state == EMPTY else self.started_ms

    def doc(self) -> dict[str, Any]:
        return {
            "tid": self.tid, "pid": self.pid, "epoch": self.epoch, "timeout": self.timeout_ms,
            "state": self.state, "parts": sorted([t, p] for t, p in self.partitions),
            "groups": sorted(self.groups), "start": self.started_ms,
            "prev": list(self.previous), "updated": self.updated_ms,
            "offsets": {g: [[t, p, *v] for (t, p), v in o.items()]
                        for g, o in self.offsets.items()},
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Txn:
        return cls(
            tid=doc["tid"], pid=int(doc["pid"]), epoch=int(doc["epoch"]),
            timeout_ms=int(doc["timeout"]), state=doc["state"],
            partitions={(t, int(p)) for t, p in doc["parts"]}, groups=set(doc["groups"]),
            offsets={g: {(t, int(p)): (int(o), int(e), m) for t, p, o, e, m in entries}
                     for g, entries in doc["offsets"].items()},
            started_ms=int(doc["start"]),
            previous=(int(doc.get("prev", (-1, -1))[0]), int(doc.get("prev", (-1, -1))[1])),
            updated_ms=int(doc.get("updated", _now_ms())),
        )


class TxnCoordinator:
    """Transactional ids, their transactions, and the markers that end them."""

    def __init__(self, broker: Broker, docs: dict[str, dict[str, Any]],
                 max_timeout_ms: int) -> None:
        self._broker = broker
        self._max_timeout_ms = max_timeout_ms
        self._txns: dict[str, Txn] = {}
        for tid, doc in docs.items():
            try:
                self._txns[tid] = Txn.from_doc(doc)
            except (KeyError, TypeError, ValueError) as exc:  # a line damaged yet decodable
                log.error("transaction log: the state of %r is damaged (%r): forgotten", tid, exc)
        # one lock per id while anyone holds or awaits it (weak: an idle id's goes away)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._stuck_logged: dict[str, float] = {}  # tid -> when we last said it is stuck

    def _lock(self, tid: str) -> asyncio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = asyncio.Lock()
        return lock

    def _stuck(self, tid: str, exc: BaseException) -> None:
        """Log that `tid`'s transaction cannot be finished: at once, then at most once a
        minute while it stays so (the sweep retries every 100 ms, and a full disk would
        otherwise fill the log as well)."""
        now = time.monotonic()
        last = self._stuck_logged.get(tid)
        if last is None or now - last >= STUCK_LOG_INTERVAL_S:
            self._stuck_logged[tid] = now
            log.error("cannot finish the transaction of %r (retried until it can): %s", tid, exc)

    @staticmethod
    def _draft(txn: Txn) -> Txn:
        """A copy of `txn` to change and hand to `_save`."""
        return copy.deepcopy(txn)

    async def _save(self, txn: Txn, new: Txn) -> None:
        """Make `new` (a changed `_draft` of `txn`) durable, then `txn`'s state. Raises
        OSError if the transaction log refuses it, leaving `txn` as it was."""
        new.updated_ms = _now_ms()
        await self._broker.txn_log.write(new.doc())
        txn.__dict__.update(new.__dict__)

    async def remove_expired(self, expiration_ms: int, now_ms: int | None = None) -> int:
        """Remove the transactional ids idle (Empty or Complete*) and unchanged for longer
        than `expiration_ms`; returns how many. Each removal is durable before the id is
        forgotten; one the log refuses (logged) stays for the next pass."""
        now = _now_ms() if now_ms is None else now_ms
        removed = 0
        for tid, txn in list(self._txns.items()):
            if txn.state not in _IDLE or now - txn.updated_ms <= expiration_ms:
                continue
            async with self._lock(tid):
                if self._txns.get(tid) is not txn or txn.state not in _IDLE:
                    continue  # changed while this pass waited for the lock
                if now - txn.updated_ms <= expiration_ms:
                    continue
                try:
                    await self._broker.txn_log.remove(tid)
                except OSError as exc:
                    log.error("cannot remove expired transactional id %r: %s", tid, exc)
                    continue
                del self._txns[tid]
                removed += 1
        if removed:
            log.info("removed %d expired transactional ids", removed)
        return removed

    # -- recovery and timeouts -------------------------------------------------------------
    async def recover(self) -> None:
        """Finish what the last run left: a Prepare state is completed as decided (markers,
        offsets, Complete state), with the epoch it was decided under: its producer, which
        may be retrying EndTxn, is not fenced. One that cannot be finished now (a storage
        error, logged) stays in its Prepare state for `expire` to retry. An Ongoing
        transaction is kept (see the module docstring); its partitions' transaction
        indexes are built now."""
        for txn in list(self._txns.values()):
            async with self._lock(txn.tid):
                try:
                    if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
                        await self._complete(txn)
                    elif txn.state == ONGOING:
                        left_ms = txn.started_ms + txn.timeout_ms - _now_ms()
                        log.info("transaction of %r left open by the previous run is kept "
                                 "(it times out in %d ms)", txn.tid, max(left_ms, 0))
                        await self._take_up(txn)
                except (OSError, StreamError) as exc:
                    self._stuck(txn.tid, exc)
                else:
                    self._stuck_logged.pop(txn.tid, None)

    async def _take_up(self, txn: Txn) -> None:
        """Build the transaction index of each partition of `txn` (from its log, off the
        event loop): one an open transaction holds must not be read as having none."""
        for topic, index in sorted(txn.partitions):
            stream = self._broker.topics.partition(topic, index)
            if stream is not None:
                await self._broker.partition_txns.ensure(stream)

    async def expire(self, now_ms: int | None = None) -> None:
        """Abort (with a bumped epoch) every transaction open longer than its timeout, and
        retry finishing those a storage error left in a Prepare state."""
        now = _now_ms() if now_ms is None else now_ms
        for txn in list(self._txns.values()):
            timed_out = txn.state == ONGOING and now - txn.started_ms > txn.timeout_ms
            if not timed_out and txn.state not in (PREPARE_COMMIT, PREPARE_ABORT):
                continue
            async with self._lock(txn.tid):
                try:
                    if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
                        await self._complete(txn)
                    elif txn.state == ONGOING and now - txn.started_ms > txn.timeout_ms:
                        log.info("transaction of %r timed out after %d ms: aborting",
                                 txn.tid, txn.timeout_ms)
                        await self._abort_fencing(txn)
                except (OSError, StreamError) as exc:
                    self._stuck(txn.tid, exc)
                else:
                    self._stuck_logged.pop(txn.tid, None)

    async def _abort_fencing(self, txn: Txn) -> None:
        new = self._draft(txn)
        await self._bump(new)
        self._prepare(new, commit=False)
        await self._save(txn, new)
        await self._complete(txn)

    @staticmethod
    def _prepare(txn: Txn, commit: bool) -> None:
        # a new decision: its markers (with this epoch) are still all to write
        txn.state = PREPARE_COMMIT if commit else PREPARE_ABORT
        txn.marked, txn.offsets_committed = set(), set()

    async def _bump(self, txn: Txn) -> None:
        txn.previous = (txn.pid, txn.epoch)
        if txn.epoch >= MAX_EPOCH:
            txn.pid, txn.epoch = await self._broker.producer_ids.allocate(), 0
        else:
            txn.epoch += 1

    async def _complete(self, txn: Txn) -> None:
        """Write the markers of a durable Prepare state, apply or drop staged offsets, and
        make the Complete state durable. Raises StreamError or OSError (the state stays
        Prepare*); the markers and offset commits that succeeded are not repeated by the
        next call."""
        commit = txn.state == PREPARE_COMMIT
        # every marker append finishes (or fails) before this returns: one still running
        # when a retry starts would be written twice
        results = await asyncio.gather(*(self._mark(txn, topic, index, commit)
                                         for topic, index in sorted(txn.partitions - txn.marked)),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if commit:
            for group, offsets in txn.offsets.items():
                if group in txn.offsets_committed:
                    continue
                entries: list[Entry] = [(t, p, o, e, m) for (t, p), (o, e, m) in offsets.items()]
                await self._broker.offsets.commit(group, entries)
                txn.offsets_committed.add(group)
        new = self._draft(txn)
        new.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        new.partitions, new.groups, new.offsets = set(), set(), {}
        new.marked, new.offsets_committed = set(), set()
        await self._save(txn, new)

    async def _mark(self, txn: Txn, topic: str, index: int, commit: bool) -> None:
        await write_marker(self._broker, topic, index, txn.pid, txn.epoch, commit)
        txn.marked.add((topic, index))

    # -- requests --------------------------------------------------------------------------
    def _check(self, tid: str, pid: int, epoch: int) -> tuple[Txn | None, ErrorCode]:
        txn = self._txns.get(tid)
        if txn is None or txn.pid != pid:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != txn.epoch:
            return None, ErrorCode.PRODUCER_FENCED
        return txn, ErrorCode.NONE

    async def init_producer_id(self, tid: str, timeout_ms: int,
                               expected: tuple[int, int] = (-1, -1)) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer starting up: a new id,
        or the id's producer with its epoch bumped (fencing the previous one, whose open
        transaction is aborted first).

        `expected` (v3+, KIP-360: a running producer recovering from an abortable error)
        is the caller's (producer id, epoch): the current one gets its open transaction
        aborted and a bumped epoch; the one before the last bump gets the current epoch (a
        retry whose answer was lost, or a producer whose transaction timed out) after its
        open transaction, if any, is aborted; any other is PRODUCER_FENCED."""
        if not 0 < timeout_ms <= self._max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        async with self._lock(tid):
            txn = self._txns.get(tid)
            try:
                if txn is None:
                    pid = await self._broker.producer_ids.allocate()
                    txn = Txn(tid, pid, 0, timeout_ms)
                    bump = False
                elif expected[0] >= 0:
                    if expected not in ((txn.pid, txn.epoch), txn.previous):
                        return ErrorCode.PRODUCER_FENCED, -1, -1
                    bump = expected == (txn.pid, txn.epoch)
                    if txn.state == PREPARE_COMMIT:
                        await self._complete(txn)
                    elif txn.state in (ONGOING, PREPARE_ABORT):
                        await self._abort_fencing(txn)  # its bump fences `expected`
                        bump = False
                else:
                    if txn.state == PREPARE_COMMIT:
                        await self._complete(txn)
                    elif txn.state in (ONGOING, PREPARE_ABORT):
                        await self._abort_fencing(txn)
                    bump = True
                new = self._draft(txn)
                if bump:
                    await self._bump(new)
                new.timeout_ms = timeout_ms
                new.state = EMPTY
                await self._save(txn, new)
            except (OSError, StreamError) as exc:
                log.error("InitProducerId for %r failed: %s", tid, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            self._txns[tid] = txn
            return ErrorCode.NONE, txn.pid, txn.epoch

    def _begin(self, txn: Txn) -> ErrorCode:
        if txn.state in _IDLE:
            txn.state, txn.started_ms = ONGOING, _now_ms()
        elif txn.state != ONGOING:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE

    async def add_partitions(self, tid: str, pid: int, epoch: int,
                             partitions: list[Partition]) -> dict[Partition, ErrorCode]:
        """Add partitions to the id's transaction (starting one): an error per partition
        (an unknown one fails the request: the others get OPERATION_NOT_ATTEMPTED)."""
        async with self._lock(tid):
            txn, code = self._check(tid, pid, epoch)
            if txn is not None:
                unknown = [p for p in partitions if self._broker.topics.partition(*p) is None]
                if unknown:
                    return {p: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if p in unknown
                                else ErrorCode.OPERATION_NOT_ATTEMPTED) for p in partitions}
                code = await self._change(txn, lambda new: new.partitions.update(partitions))
            return dict.fromkeys(partitions, code)

    async def _change(self, txn: Txn, apply: Callable[[Txn], None]) -> ErrorCode:
        # on a draft: until durable, a produce must not be let into a partition just added
        new = self._draft(txn)
        code = self._begin(new)
        if code:
            return code
        apply(new)
        if new.doc() != txn.doc():
            try:
                await self._save(txn, new)
            except OSError as exc:
                log.error("transaction log write for %r failed: %s", txn.tid, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    async def add_offsets(self, tid: str, pid: int, epoch: int, group: str) -> ErrorCode:
        """Add a consumer group to the id's transaction (its offsets commit with it)."""
        async with self._lock(tid):
            txn, code = self._check(tid, pid, epoch)
            if txn is None:
                return code
            return await self._change(txn, lambda new: new.groups.add(group))

    async def stage_offsets(self, tid: str, pid: int, epoch: int, group: str,
                            entries: list[Entry]) -> ErrorCode:
        """TxnOffsetCommit: stage (durably) offsets that the group gets if the transaction
        commits."""
        async with self._lock(tid):
            txn, code = self._check(tid, pid, epoch)
            if txn is None:
                return code
            if txn.state != ONGOING or group not in txn.groups:
                return ErrorCode.INVALID_TXN_STATE

            def apply(new: Txn) -> None:
                staged = new.offsets.setdefault(group, {})
                for t, p, o, e, m in entries:
                    staged[(t, p)] = (o, e, m)
            return await self._change(txn, apply)

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        """Commit or abort the id's transaction; answered once it is complete."""
        async with self._lock(tid):
            txn, code = self._check(tid, pid, epoch)
            if txn is None:
                return code
            done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            if txn.state == done:
                return ErrorCode.NONE  # a retry of the EndTxn that completed it
            if txn.state != ONGOING and txn.state != (PREPARE_COMMIT if commit else PREPARE_ABORT):
                return ErrorCode.INVALID_TXN_STATE
            try:
                if txn.state == ONGOING:
                    new = self._draft(txn)
                    self._prepare(new, commit)
                    await self._save(txn, new)
                await self._complete(txn)
            except (OSError, StreamError) as exc:
                log.error("ending the transaction of %r failed: %s", tid, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            return ErrorCode.NONE

    def get(self, tid: str) -> Txn | None:
        """The id's state, to read only (DescribeTransactions)."""
        return self._txns.get(tid)

    def all(self) -> list[Txn]:
        """Every transactional id's state, to read only (ListTransactions)."""
        return list(self._txns.values())

    def pending_offsets(self, group: str) -> set[Partition]:
        """The partitions of `group` whose offsets a transaction has staged and not yet
        committed or dropped (it is Ongoing or Prepare*): OffsetFetch with require_stable
        answers UNSTABLE_OFFSET_COMMIT for them."""
        pending: set[Partition] = set()
        for txn in self._txns.values():
            if txn.state not in _IDLE:
                pending.update(txn.offsets.get(group, ()))
        return pending

    def verify_produce(self, tid: str | None, pid: int, epoch: int,
                       partition: Partition) -> ErrorCode:
        """May a transactional batch of (pid, epoch) go to `partition`? Only while the
        producer's transaction is open and holds that partition."""
        txn = self._txns.get(tid) if tid is not None else None
        if txn is None or txn.pid != pid:
            return ErrorCode.INVALID_TXN_STATE if txn is None else ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < txn.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if epoch > txn.epoch or txn.state != ONGOING or partition not in txn.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

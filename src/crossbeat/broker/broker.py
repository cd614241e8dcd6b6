"""`Broker`: the state one Kafka-protocol broker serves from — stream store, topic table,
consumer groups, committed offsets, producer ids and sequences — opened and closed together.

Directory layout under `settings.data_dir`::

    streams/          the stream store (one stream per topic partition)
    offsets.log       committed offsets, groups' Empty times (see offsets.py)
    producer_ids      next free producer id block (see producers.py)
    producer_snapshots/  each partition's idempotent producers (see producer_snapshots.py)
    transactions.log  transactional ids and their transactions (see txn_log.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from crossbeat.broker.groups import SWEEP_INTERVAL, GroupCoordinator
from crossbeat.broker.offset_expiry import expire_offsets
from crossbeat.broker.offsets import OffsetStore
from crossbeat.broker.partition_txns import PartitionTxns
from crossbeat.broker.produce_order import ProduceOrder
from crossbeat.broker.producers import ProducerIdAllocator, ProducerStates
from crossbeat.broker.settings import BrokerSettings
from crossbeat.broker.topics import Topics
from crossbeat.broker.txn_coordinator import TxnCoordinator
from crossbeat.broker.txn_log import TxnLog
from crossbeat.stream import StreamStore

log = logging.getLogger(__name__)

SNAPSHOT_CHECK_INTERVAL = 1.0  # seconds between looks for producer state snapshots due
MAX_TXN_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default


class Broker:
    """Everything request handlers need, plus the advertised address (set once bound)."""

    def __init__(self, settings: BrokerSettings, store: StreamStore, offsets: OffsetStore) -> None:
        self.settings = settings
        self.store = store
        self.offsets = offsets
        self.topics = Topics(store)
        self.groups = GroupCoordinator(
            min_session_ms=settings.group_min_session_timeout_ms,
            max_session_ms=settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
            consumer_heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
            consumer_session_timeout_ms=settings.group_consumer_session_timeout_ms,
            on_members_change=offsets.note_members,
            on_stable=offsets.note_stable,
        )
        for group_id in self.groups.restore(offsets.stable_groups()):
            offsets.note_members(group_id, False)  # not restored: Empty from now on
        self.producers = ProducerStates(settings.data_dir / "producer_snapshots")
        self.producer_ids = ProducerIdAllocator(settings.data_dir)
        self.partition_txns = PartitionTxns()
        self.produce_order = ProduceOrder()
        self.txn_log = TxnLog(settings.data_dir)
        self.txns = TxnCoordinator(self, {}, MAX_TXN_TIMEOUT_MS)
        self.node_id = settings.node_id
        self.host = "127.0.0.1"
        self.port = 9092
        self._sweeper: asyncio.Task[None] | None = None
        self._snapshots: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, settings: BrokerSettings) -> Broker:
        """Open (recovering) the store and offsets under `settings.data_dir`."""
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # before anything else is written there: see ProducerIdAllocator.prepare
        await asyncio.to_thread(ProducerIdAllocator.prepare, settings.data_dir)
        store = await StreamStore.open(settings.data_dir / "streams", settings.stream)
        try:
            offsets = await OffsetStore.open(settings.data_dir, settings.offsets_compact_after)
        except BaseException:
            await store.close()
            raise
        broker = cls(settings, store, offsets)
        try:
            partitions = {s.name for topic in broker.topics.all() for s in topic.partitions}
            await asyncio.to_thread(broker.producers.prune, partitions)
            docs = await asyncio.to_thread(broker.txn_log.load)
            broker.txns = TxnCoordinator(broker, docs, MAX_TXN_TIMEOUT_MS)
            await broker.txns.recover()
        except BaseException:
            broker.txn_log.close()
            await offsets.close()
            await store.close()
            raise
        broker._sweeper = asyncio.create_task(broker._sweep_loop(), name="group-sweeper")
        return broker

    async def _sweep_loop(self) -> None:
        loop = asyncio.get_running_loop()
        retention_interval = self.settings.retention_check_interval_ms / 1000
        next_retention = loop.time() + retention_interval
        expiry_interval = self.settings.offsets_retention_check_interval_ms / 1000
        next_expiry = loop.time() + expiry_interval
        producer_interval = self.settings.producer_id_expiration_check_interval_ms / 1000
        next_producers = loop.time() + producer_interval
        tid_interval = self.settings.transactional_id_cleanup_interval_ms / 1000
        next_tids = loop.time() + tid_interval
        next_snapshots = loop.time() + SNAPSHOT_CHECK_INTERVAL
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            try:
                self.groups.sweep()
            except Exception:  # the sweeper must survive a bug in one group
                log.exception("group sweep failed")
            try:
                await self.txns.expire()
            except Exception:
                log.exception("transaction timeout sweep failed")
            if loop.time() >= next_retention:
                next_retention = loop.time() + retention_interval
                try:
                    await self.store.enforce_retention()
                except Exception:
                    log.exception("retention enforcement failed")
            if loop.time() >= next_expiry:
                next_expiry = loop.time() + expiry_interval
                try:
                    await expire_offsets(self.groups, self.offsets,
                                         self.settings.offsets_retention_ms)
                except Exception:
                    log.exception("offset expiry failed")
            if loop.time() >= next_producers:
                next_producers = loop.time() + producer_interval
                try:
                    dropped = self.producers.expire(self.settings.producer_id_expiration_ms,
                                                    self._in_transaction)
                    if dropped:
                        log.info("dropped the state of %d idle producers", dropped)
                except Exception:
                    log.exception("producer state expiry failed")
            if loop.time() >= next_tids:
                next_tids = loop.time() + tid_interval
                try:
                    await self.txns.remove_expired(self.settings.transactional_id_expiration_ms)
                except Exception:
                    log.exception("transactional id expiry failed")
            if loop.time() >= next_snapshots:
                next_snapshots = loop.time() + SNAPSHOT_CHECK_INTERVAL
                # a task of its own: its fsyncs must not hold up the group sweep
                if self._snapshots is None or self._snapshots.done():
                    self._snapshots = asyncio.create_task(self._save_producer_states(),
                                                          name="producer-snapshots")

    async def _save_producer_states(self, everything: bool = False) -> None:
        try:
            await self.producers.save_due(everything=everything)
        except Exception:
            log.exception("producer state snapshots failed")

    def _in_transaction(self, stream_name: str, producer_id: int) -> bool:
        """Whether `producer_id` has a transaction open on the partition `stream_name`."""
        index = self.partition_txns.peek(stream_name)
        return index is not None and producer_id in index.open

    async def close(self) -> None:
        """Answer waiting group requests, then flush and close offsets and streams."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self.producers.closing()
        if self._snapshots is not None:
            await self._snapshots  # in a worker thread: cannot be cancelled
            self._snapshots = None
        # after the server stopped taking requests, before the store closes
        await self._save_producer_states(everything=True)
        self.groups.close()
        self.txn_log.close()
        await self.offsets.close()
        await self.store.close()

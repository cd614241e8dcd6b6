"""Idempotent-producer sequence checks against a real stream store, including the state
rebuilt from batch headers after a reopen."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.producers import ProducerIdAllocator, ProducerStates
from crossbeat.stream import StreamSettings, StreamStore, parse_header


def batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000, key=None, value=b"v%d" % (seq + i), headers=[])
    return b.build()


async def produce(states: ProducerStates, stream, buf: bytearray):  # type: ignore[no-untyped-def]
    header = parse_header(buf)
    verdict = states.check(stream, header)
    if verdict.error:
        return verdict.error, None
    if verdict.duplicate_of is not None:
        return "dup", await asyncio.ensure_future(verdict.duplicate_of) if not isinstance(
            verdict.duplicate_of, int) else verdict.duplicate_of
    base = await stream.append(buf)
    states.appended(verdict, base)
    return ErrorCode.NONE, base


def test_sequences_duplicates_and_rebuild(tmp_path: Path) -> None:
    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", StreamSettings(flush_max_delay_ms=0))
        stream = store.create_stream("t-0")
        states = ProducerStates()
        assert await produce(states, stream, batch(7, 0, 0)) == (ErrorCode.NONE, 0)
        assert await produce(states, stream, batch(7, 0, 2)) == (ErrorCode.NONE, 2)
        # a retry of the first batch: answered with its original offset, not written again
        assert await produce(states, stream, batch(7, 0, 0)) == ("dup", 0)
        assert stream.end_offset == 4
        assert (await produce(states, stream, batch(7, 0, 9)))[0] is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # a producer the partition knows nothing of goes on at any sequence, as in Kafka
        assert (await produce(states, stream, batch(8, 0, 5)))[0] is ErrorCode.NONE
        assert (await produce(states, stream, batch(8, 0, 9)))[0] is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # a new epoch restarts at 0; the old epoch is fenced
        assert await produce(states, stream, batch(7, 1, 0)) == (ErrorCode.NONE, 6)
        assert (await produce(states, stream, batch(7, 0, 4)))[0] is ErrorCode.INVALID_PRODUCER_EPOCH
        for seq in range(2, 14, 2):
            assert (await produce(states, stream, batch(7, 1, seq)))[0] is ErrorCode.NONE
        # older than the 5 remembered batches
        assert (await produce(states, stream, batch(7, 1, 0)))[0] is ErrorCode.DUPLICATE_SEQUENCE_NUMBER
        end = stream.end_offset
        await store.close()

        store = await StreamStore.open(tmp_path / "s", StreamSettings(flush_max_delay_ms=0))
        stream = store.get_stream("t-0")
        assert stream is not None
        fresh = ProducerStates()  # rebuilt from the stored headers
        assert await produce(fresh, stream, batch(7, 1, 12)) == ("dup", end - 2)
        assert await produce(fresh, stream, batch(7, 1, 14)) == (ErrorCode.NONE, end)
        await store.close()

    asyncio.run(run())


def test_producer_ids_are_never_reused(tmp_path: Path) -> None:
    async def run() -> list[int]:
        return [await ProducerIdAllocator(tmp_path).allocate() for _ in range(3)]

    first = asyncio.run(run())
    second = asyncio.run(run())
    assert len(set(first + second)) == 6


def test_idle_producers_expire_unless_in_a_transaction_or_appending(tmp_path: Path) -> None:
    """producer.id.expiration.ms: an idle producer's state is dropped, so its next batch
    past sequence 0 is that of an unknown producer; one with a transaction open on the
    partition, or a batch being appended, is kept."""

    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", StreamSettings(flush_max_delay_ms=0))
        stream = store.create_stream("t-0")
        states = ProducerStates()
        for pid in (7, 8):
            assert (await produce(states, stream, batch(pid, 0, 0)))[0] is ErrorCode.NONE
        appending = states.check(stream, parse_header(batch(9, 0, 0)))  # not appended yet
        assert appending.pending is not None
        later = int(time.time() * 1000) + 10_000
        # not idle long enough: nothing goes
        assert states.expire(60_000, lambda name, pid: False, now_ms=later) == 0
        in_txn = {("t-0", 8)}
        assert states.expire(5_000, lambda name, pid: (name, pid) in in_txn, now_ms=later) == 1
        # the expired producer is taken up where it goes on, as Kafka does
        assert (await produce(states, stream, batch(7, 0, 2)))[0] is ErrorCode.NONE
        assert (await produce(states, stream, batch(8, 0, 2)))[0] is ErrorCode.NONE
        base = await stream.append(batch(9, 0, 0))
        states.appended(appending, base)
        assert (await produce(states, stream, batch(9, 0, 2)))[0] is ErrorCode.NONE
        # once taken up, its sequence is checked again: a repeat of what it sent before
        # expiring is older than anything remembered
        assert (await produce(states, stream, batch(7, 0, 0)))[0] is ErrorCode.DUPLICATE_SEQUENCE_NUMBER
        await store.close()

    asyncio.run(run())


def test_active_lists_each_producer_and_rebuilds_from_the_log(tmp_path: Path) -> None:
    """`active` (DescribeProducers): per producer its epoch and the last sequence of its
    newest batch, -1 once a bump replaced its entry; a partition nothing touched yet is
    rebuilt from its log tail first."""

    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", StreamSettings(flush_max_delay_ms=0))
        stream = store.create_stream("t-0")
        states = ProducerStates()
        assert states.active(stream) == []
        before = int(time.time() * 1000)
        for seq in (0, 2, 4):
            assert (await produce(states, stream, batch(7, 0, seq)))[0] is ErrorCode.NONE
        assert (await produce(states, stream, batch(3, 2, 0, n=1)))[0] is ErrorCode.NONE
        await stream.append(batch(-1, -1, -1))  # no producer id: not listed
        listed = states.active(stream)
        assert [(p.producer_id, p.epoch, p.last_sequence) for p in listed] == [
            (3, 2, 0), (7, 0, 5)]
        # Kafka's lastTimestamp: the max timestamp of the producer's last batch
        assert [p.last_timestamp for p in listed] == [1_700_000_000_000] * 2
        states.marked(stream, 3, 3)  # a marker of a bumped epoch: the marker's time
        after_marker = states.active(stream)
        assert [(p.producer_id, p.epoch, p.last_sequence) for p in after_marker] == [
            (3, 3, -1), (7, 0, 5)]
        assert before <= after_marker[0].last_timestamp <= int(time.time() * 1000)
        await store.close()

        store = await StreamStore.open(tmp_path / "s", StreamSettings(flush_max_delay_ms=0))
        stream = store.get_stream("t-0")
        assert stream is not None
        fresh = ProducerStates()
        assert [(p.producer_id, p.epoch, p.last_sequence, p.last_timestamp)
                for p in fresh.active(stream)] == [
            (3, 2, 0, 1_700_000_000_000), (7, 0, 5, 1_700_000_000_000)]
        await store.close()

    asyncio.run(run())

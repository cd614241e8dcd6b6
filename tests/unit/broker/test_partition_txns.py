"""The per-partition transaction index: last stable offset, aborted transactions, and the
index rebuilt from a real stream's stored batches (control records included)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from crossbeat.broker.control_batch import ABORT, COMMIT, control_batch, control_type
from crossbeat.broker.partition_txns import AbortedTxn, PartitionTxns, TxnIndex
from crossbeat.stream import StreamSettings, StreamStore, validate_batch


def data(pid: int, seq: int, *, transactional: bool = True) -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                  producer_id=pid, producer_epoch=0, base_sequence=seq,
                                  batch_size=1 << 20)
    b.append(0, timestamp=1_700_000_000_000, key=None, value=b"v", headers=[])
    return b.build()


def test_control_batch_is_a_valid_marker_kafka_python_reads() -> None:
    buf = control_batch(7, 3, commit=True, timestamp_ms=1_700_000_000_000)
    header = validate_batch(buf)
    assert (header.is_control, header.is_transactional) == (True, True)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert control_type(buf) == COMMIT
    assert control_type(control_batch(7, 3, commit=False, timestamp_ms=0)) == ABORT
    batch = DefaultRecordBatch(bytes(buf))
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.key == b"\x00\x00\x00\x01"


def test_last_stable_offset_and_aborted_overlap() -> None:
    index = TxnIndex()
    assert index.last_stable_offset(10) == 10
    assert index.begin(1, 10)
    assert not index.begin(1, 12)  # already open: keeps its first offset
    assert index.last_stable_offset(12) == 10  # the lower bound holds it before the append
    index.started(1, 10, 11)
    assert index.begin(2, 13)
    index.started(2, 13, 13)
    assert index.last_stable_offset(20) == 11
    index.end(1, 15, commit=False)
    assert index.last_stable_offset(20) == 13
    index.end(2, 16, commit=True)
    assert index.last_stable_offset(20) == 20
    assert index.aborted == [AbortedTxn(1, 11, 15)]
    assert index.aborted_overlapping(0, 11) == []
    assert index.aborted_overlapping(15, 20) == [AbortedTxn(1, 11, 15)]
    assert index.aborted_overlapping(16, 20) == []
    index.end(3, 17, commit=False)  # a marker with nothing open here: no entry
    assert len(index.aborted) == 1
    index.truncate_before(16)
    assert index.aborted == []


def test_started_after_a_marker_keeps_the_lower_bound() -> None:
    """A marker that lands while the batch that opened the transaction is being appended
    ends it; the late `started` must not reopen it."""
    index = TxnIndex()
    index.begin(1, 5)
    index.end(1, 9, commit=False)
    index.started(1, 5, 7)
    assert index.open == {}
    assert index.aborted == [AbortedTxn(1, 5, 9)]


def test_rebuilt_from_the_log(tmp_path: Path) -> None:
    async def run() -> None:
        settings = StreamSettings(flush_max_delay_ms=0)
        store = await StreamStore.open(tmp_path / "s", settings)
        stream = store.create_stream("t-0")
        await stream.append(data(-1, -1, transactional=False))             # 0
        await stream.append(data(1, 0))                                     # 1: pid 1 opens
        await stream.append(data(2, 0))                                     # 2: pid 2 opens
        await stream.append(control_batch(1, 0, commit=False, timestamp_ms=0))  # 3: abort 1
        await stream.append(data(3, 0))                                     # 4: pid 3 opens
        await stream.append(control_batch(3, 0, commit=True, timestamp_ms=0))   # 5: commit 3
        await store.close()

        store = await StreamStore.open(tmp_path / "s", settings)
        stream = store.get_stream("t-0")
        assert stream is not None
        index = PartitionTxns().get(stream)
        assert index.open == {2: 2}
        assert index.aborted == [AbortedTxn(1, 1, 3)]
        assert index.last_stable_offset(stream.end_offset) == 2
        await store.close()

    asyncio.run(run())


async def _txn_log(root: Path) -> StreamStore:
    """A store whose stream t-0 holds: 0 plain, 1 pid 1, 2 pid 2, 3 ABORT pid 1 (reopened)."""
    settings = StreamSettings(flush_max_delay_ms=0)
    store = await StreamStore.open(root, settings)
    stream = store.create_stream("t-0")
    await stream.append(data(-1, -1, transactional=False))
    await stream.append(data(1, 0))
    await stream.append(data(2, 0))
    await stream.append(control_batch(1, 0, commit=False, timestamp_ms=0))
    await store.close()
    return await StreamStore.open(root, settings)


def test_ensure_builds_the_index_off_the_event_loop(tmp_path: Path) -> None:
    """The loop runs other work while the log is walked (a walk on the loop would not let
    the ticker run at all before `ensure` returns)."""

    async def run() -> None:
        store = await _txn_log(tmp_path / "s")
        stream = store.get_stream("t-0")
        assert stream is not None
        txns = PartitionTxns()
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        await txns.ensure(stream)
        done = True
        await task
        assert ticks > before
        index = txns.peek("t-0")
        assert index is not None
        assert index.open == {2: 2}
        assert index.aborted == [AbortedTxn(1, 1, 3)]
        await txns.ensure(stream)  # built: returns at once, the same index
        assert txns.get(stream) is index
        await store.close()

    asyncio.run(run())


def test_concurrent_callers_share_one_build(tmp_path: Path) -> None:
    async def run() -> None:
        store = await _txn_log(tmp_path / "s")
        stream = store.get_stream("t-0")
        assert stream is not None
        txns = PartitionTxns()
        first = asyncio.ensure_future(txns.ensure(stream))
        await asyncio.sleep(0)
        building = txns._building["t-0"]
        await asyncio.gather(first, txns.ensure(stream), txns.ensure(stream))
        assert building.done() and txns._building == {}
        index = txns.peek("t-0")
        assert index is not None and index.aborted == [AbortedTxn(1, 1, 3)]
        await store.close()

    asyncio.run(run())


def test_a_build_for_a_forgotten_partition_is_not_kept(tmp_path: Path) -> None:
    async def run() -> None:
        store = await _txn_log(tmp_path / "s")
        stream = store.get_stream("t-0")
        assert stream is not None
        txns = PartitionTxns()
        waiter = asyncio.ensure_future(txns.ensure(stream))
        await asyncio.sleep(0)
        txns.forget("t-0")  # the topic was deleted while its log was walked
        await waiter
        assert txns.peek("t-0") is None
        await store.close()

    asyncio.run(run())

"""`Stream.header_walk`: a snapshot of the durable batches, filtered by attribute bits,
that a worker thread can walk while the stream goes on appending and deleting segments."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from crossbeat.stream import StreamSettings, StreamStore
from crossbeat.stream.batch import TRANSACTIONAL
from tests.unit.stream.conftest import make_batch


def transactional(pid: int, value: bytes) -> bytearray:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                        producer_id=pid, producer_epoch=0, base_sequence=0,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return builder.build()


def test_a_walk_reads_its_snapshot_whatever_happens_to_the_stream(tmp_path: Path) -> None:
    cfg = StreamSettings(segment_bytes=2048, index_interval_bytes=200, flush_max_delay_ms=0.0,
                         retention_ms=None)

    async def main() -> None:
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        txn_offsets = []
        for i in range(60):  # about 20 segments
            if i % 7 == 3:
                txn_offsets.append(await stream.append(transactional(9, b"t" * 100)))
            else:
                await stream.append(make_batch([b"p" * 100]))
        end = stream.end_offset
        everything = stream.header_walk()
        txns_only = stream.header_walk(TRANSACTIONAL)
        from_30 = stream.header_walk(start_offset=30)
        assert (everything.start_offset, everything.end_offset) == (0, end)
        # the stream goes on: segments below 50 deleted, new batches appended
        assert await stream.delete_before(50) == 50
        for _ in range(10):
            await stream.append(make_batch([b"q" * 100]))
        # walked on another thread, through the walk's own file descriptors
        headers = await asyncio.to_thread(lambda: [b.header for b in everything])
        assert [h.base_offset for h in headers] == list(range(end))
        txn_batches = await asyncio.to_thread(list, txns_only)
        assert [b.header.base_offset for b in txn_batches] == txn_offsets
        assert all(b.header.is_transactional and b.header.producer_id == 9 for b in txn_batches)
        assert all(len(b.read()) == b.header.size and b"t" * 100 in b.read() for b in txn_batches)
        assert [b.header.base_offset for b in from_30] == list(range(30, end))
        for walk in (everything, txns_only, from_30):
            walk.close()
        with stream.header_walk() as after:
            assert [b.header.base_offset for b in after] == list(range(50, end + 10))
        await store.close()

    asyncio.run(main())

"""Append/read round trips, KIP-74, offset errors, timestamps and stream management."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from crossbeat.stream import (
    CorruptBatch,
    InvalidStreamName,
    OffsetOutOfRange,
    StreamExists,
    StreamNotFound,
    StreamSettings,
    StreamStore,
)
from tests.unit.stream.conftest import all_values, batch_values, make_batch

SMALL = StreamSettings(segment_bytes=2048, index_interval_bytes=200, flush_max_delay_ms=0.0)
ONE_SEGMENT = StreamSettings(segment_bytes=1 << 20, index_interval_bytes=200, flush_max_delay_ms=0.0)


def test_round_trip_across_segment_rolls(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("t-0")
        expected: list[tuple[int, bytes]] = []
        for i in range(60):
            values = [f"m{i}-{j}".encode() * 3 for j in range(i % 4 + 1)]
            base = await stream.append(make_batch(values))
            expected.extend((base + j, v) for j, v in enumerate(values))
        assert [o for o, _ in expected] == list(range(len(expected)))
        assert stream.end_offset == len(expected)
        assert len(stream._replicas[0].segments) > 3  # it rolled
        assert all_values(stream.read(0, 10**9)) == expected
        # Every starting offset returns the batch containing it, then what follows.
        for offset in range(0, len(expected), 7):
            got = all_values(stream.read(offset, 10**9))
            assert got[0][0] <= offset < got[0][0] + 4
            assert got[-1] == expected[-1]
            assert got == expected[got[0][0] :]
        await store.close()
        # And again after a clean reopen (indexes loaded from their files).
        store = await StreamStore.open(tmp_path, SMALL)
        reopened = store.get_stream("t-0")
        assert reopened is not None
        assert all_values(reopened.read(0, 10**9)) == expected
        assert reopened.end_offset == len(expected)
        base = await reopened.append(make_batch([b"after"]))
        assert base == len(expected)
        await store.close()

    asyncio.run(main())


def test_read_from_the_middle_of_a_batch_returns_the_containing_batch(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("s")
        await stream.append(make_batch([b"a", b"b", b"c"]))
        await stream.append(make_batch([b"d", b"e"]))
        chunks = stream.read(1, 10**6)
        assert [o for o, _ in batch_values(chunks[0])] == [0, 1, 2]
        chunks = stream.read(4, 10**6)
        assert batch_values(chunks[0]) == [(3, b"d"), (4, b"e")]
        await store.close()

    asyncio.run(main())


def test_kip74_first_batch_whole_and_max_bytes(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("s")
        big = make_batch([b"x" * 500])
        small = make_batch([b"y"])
        await stream.append(big)
        await stream.append(small)
        await stream.append(small)
        chunks = stream.read(0, 10)  # smaller than the first batch: still returned whole
        assert len(chunks) == 1 and len(chunks[0]) == len(big)
        chunks = stream.read(0, len(big) + len(small))
        assert [len(c) for c in chunks] == [len(big), len(small)]
        chunks = stream.read(0, len(big) + len(small) - 1)
        assert [len(c) for c in chunks] == [len(big)]
        assert b"".join(stream.read(0, 10**6)) == bytes(b"".join(stream.read(0, 10**6)))
        await store.close()

    asyncio.run(main())


def test_offset_out_of_range(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("s")
        assert stream.read(0, 100) == []
        await stream.append(make_batch([b"a", b"b"]))
        assert stream.read(2, 100) == []  # == end_offset
        with pytest.raises(OffsetOutOfRange) as info:
            stream.read(3, 100)
        assert (info.value.start_offset, info.value.end_offset) == (0, 2)
        with pytest.raises(OffsetOutOfRange):
            stream.read(-1, 100)
        await store.close()

    asyncio.run(main())


def test_corrupt_batch_is_rejected_and_nothing_written(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("s")
        await stream.append(make_batch([b"good"]))
        size = stream.size_bytes
        bad = make_batch([b"evil"])
        bad[-1] ^= 1
        with pytest.raises(CorruptBatch):
            await stream.append(bad)
        with pytest.raises(CorruptBatch):
            await stream.append(b"\x00" * 70)
        assert stream.size_bytes == size and stream.end_offset == 1
        assert await stream.append(make_batch([b"next"])) == 1
        await store.close()

    asyncio.run(main())


def test_stream_management(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        a = store.create_stream("topic/with weird:name-0", {"retention.ms": "1000"})
        store.create_stream("b")
        with pytest.raises(StreamExists):
            store.create_stream("b")
        for bad in ["", "x" * 300, "a\nb", "nul\x00"]:
            with pytest.raises(InvalidStreamName):
                store.create_stream(bad)
        await a.append(make_batch([b"1"]))
        assert store.streams() == ["b", "topic/with weird:name-0"]
        store.delete_stream("b")
        with pytest.raises(StreamNotFound):
            store.delete_stream("b")
        assert store.get_stream("b") is None
        await store.close()
        store = await StreamStore.open(tmp_path, SMALL)
        assert store.streams() == ["topic/with weird:name-0"]
        a2 = store.get_stream("topic/with weird:name-0")
        assert a2 is not None and a2.config == {"retention.ms": "1000"}
        assert a2.end_offset == 1
        fresh = store.create_stream("b")  # a recreated stream starts empty
        assert fresh.end_offset == 0 and fresh.read(0, 100) == []
        await store.close()
        assert len(list((tmp_path / "ranges").iterdir())) == 2

    asyncio.run(main())


def test_wait_for_long_poll(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("s")
        assert await stream.wait_for(0, 0.01) is False
        waiter = asyncio.create_task(stream.wait_for(0, 5.0))
        await asyncio.sleep(0)
        assert not waiter.done()
        await stream.append(make_batch([b"x"]))
        assert await asyncio.wait_for(waiter, 5.0) is True
        assert await stream.wait_for(0, 0) is True
        await store.close()

    asyncio.run(main())


def test_non_durable_append_becomes_visible_after_the_next_round(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("s")
        base = await stream.append(make_batch([b"x"]), durable=False)
        assert base == 0 and stream.log_end_offset == 1
        assert await stream.wait_for(0, 5.0)
        assert batch_values(stream.read(0, 100)[0]) == [(0, b"x")]
        await store.close()

    asyncio.run(main())


def test_offset_for_timestamp_searches_from_the_log_start(tmp_path: Path) -> None:
    """As Kafka: the first offset at or after the log start whose timestamp is at or after
    the target. A matching batch below the start made the rest of its segment unsearched
    (-1 for every earlier target, and for batches appended after a delete of everything)."""
    async def main() -> None:
        store = await StreamStore.open(tmp_path, ONE_SEGMENT)
        stream = store.create_stream("s")
        for i in range(100):
            await stream.append(make_batch([b"v"], timestamp=1_000_000 + i))
        assert len(stream._replicas[0].segments) == 1
        await stream.delete_before(50)
        assert stream.offset_for_timestamp(1_000_010) == (50, 1_000_050)
        assert stream.offset_for_timestamp(1_000_049) == (50, 1_000_050)
        assert stream.offset_for_timestamp(1_000_060) == (60, 1_000_060)
        await stream.delete_before(100)  # everything
        assert stream.offset_for_timestamp(1_000_010) is None
        await stream.append(make_batch([b"late"], timestamp=2_000_000))
        assert stream.offset_for_timestamp(1_000_010) == (100, 2_000_000)
        await store.close()
        store = await StreamStore.open(tmp_path, ONE_SEGMENT)
        reopened = store.get_stream("s")
        assert reopened is not None and reopened.offset_for_timestamp(1_000_010) == (100, 2_000_000)
        await store.close()

    asyncio.run(main())


def test_offset_for_timestamp_and_header_tail(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, SMALL)
        stream = store.create_stream("s")
        for i in range(40):
            ts = 1_000_000 + i * 1000
            await stream.append(
                make_batch(
                    [b"v" * 40, b"w"], timestamps=[ts, ts + 10], producer_id=9, base_sequence=2 * i
                )
            )
        assert len(stream._replicas[0].segments) > 1
        assert stream.offset_for_timestamp(0) == (0, 1_000_010)
        assert stream.offset_for_timestamp(1_000_010) == (0, 1_000_010)
        assert stream.offset_for_timestamp(1_000_011) == (2, 1_001_010)
        assert stream.offset_for_timestamp(1_025_005) == (50, 1_025_010)
        assert stream.offset_for_timestamp(1_039_010) == (78, 1_039_010)
        assert stream.offset_for_timestamp(1_039_011) is None
        tail = stream.batch_headers_tail(5)
        assert [h.base_offset for h in tail] == [70, 72, 74, 76, 78]
        assert [h.base_sequence for h in tail] == [70, 72, 74, 76, 78]
        assert len(stream.batch_headers_tail(1000)) == 40
        assert stream.batch_headers_tail(0) == []
        await store.close()

    asyncio.run(main())


def test_reads_match_a_model_for_mixed_batch_sizes(tmp_path: Path) -> None:
    """Random batch sizes (some larger than a read buffer) across segment rolls and a seal."""
    import random

    rng = random.Random(4)
    cfg = StreamSettings(segment_bytes=64 * 1024, index_interval_bytes=1000, flush_max_delay_ms=0.0)

    async def main() -> None:
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        model: list[tuple[int, int, int]] = []  # (base, next, size)
        for i in range(120):
            n = rng.randint(1, 5)
            big = rng.random() < 0.1
            values = [
                bytes([65 + i % 26]) * (rng.randint(20_000, 50_000) if big else rng.randint(1, 900))
                for _ in range(n)
            ]
            batch = make_batch(values)
            base = await stream.append(batch)
            model.append((base, base + n, len(batch)))
            if i == 70:
                stream.seal()
        end = model[-1][1]
        for _ in range(300):
            offset = rng.randrange(end)
            max_bytes = rng.choice([1, 500, 5_000, 40_000, 200_000, 10**7])
            got = stream.read(offset, max_bytes)
            first = next(k for k, (b, n, _s) in enumerate(model) if b <= offset < n)
            want: list[int] = []
            used = 0
            for b, _n, size in model[first:]:
                if want and used + size > max_bytes:
                    break
                want.append(b)
                used += size
            assert [int.from_bytes(c[0:8], "big") for c in got] == want
            assert [len(c) for c in got] == [s for b, _n, s in model if b in set(want)]
        await store.close()

    asyncio.run(main())

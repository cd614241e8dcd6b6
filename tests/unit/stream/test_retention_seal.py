"""Retention by time and size; sealing ranges and reading across them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from crossbeat.stream import OffsetOutOfRange, StreamSettings, StreamStore
from tests.unit.stream.conftest import all_values, make_batch

HOUR = 3600 * 1000


def _cfg(**kw: object) -> StreamSettings:
    base: dict[str, object] = {
        "segment_bytes": 2048,
        "index_interval_bytes": 200,
        "flush_max_delay_ms": 0.0,
        "retention_ms": None,
    }
    base.update(kw)
    return StreamSettings.model_validate(base)


def test_retention_by_time_deletes_whole_old_segments(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = _cfg(retention_ms=HOUR)
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        old_ts, new_ts = 1_000 * HOUR, 1_010 * HOUR
        for i in range(30):
            await stream.append(make_batch([b"o" * 100], timestamp=old_ts + i))
        boundary = stream.end_offset
        for i in range(30):
            await stream.append(make_batch([b"n" * 100], timestamp=new_ts + i))
        end = stream.end_offset
        await store.enforce_retention(now_ms=new_ts + HOUR // 2)
        start = stream.start_offset
        assert 0 < start <= boundary  # whole old segments only
        got = all_values(stream.read(start, 10**9))
        assert got[0][0] == start and got[-1][0] == end - 1
        with pytest.raises(OffsetOutOfRange):
            stream.read(0, 100)
        seg_files = sorted((tmp_path / "ranges").glob("*/*/*.log"))
        assert int(seg_files[0].stem) == start
        await store.close()
        # start_offset survives a restart.
        store = await StreamStore.open(tmp_path, cfg)
        stream2 = store.get_stream("s")
        assert stream2 is not None and stream2.start_offset == start and stream2.end_offset == end
        # Everything expired: even the open segment is rolled and removed; offsets continue.
        await store.enforce_retention(now_ms=new_ts + 10 * HOUR)
        assert stream2.start_offset == stream2.end_offset == end
        assert stream2.read(end, 100) == []
        assert await stream2.append(make_batch([b"fresh"])) == end
        await store.close()

    asyncio.run(main())


def test_retention_by_size(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = _cfg(retention_bytes=5000)
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        for _ in range(100):
            await stream.append(make_batch([b"x" * 150]))
        assert stream.size_bytes > 15000
        await store.enforce_retention()
        assert 5000 <= stream.size_bytes < 5000 + 2048
        assert stream.start_offset > 0 and stream.end_offset == 100
        assert all_values(stream.read(stream.start_offset, 10**9))[-1][0] == 99
        await store.close()

    asyncio.run(main())


def test_no_retention_keeps_everything(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, _cfg())
        stream = store.create_stream("s")
        for _ in range(40):
            await stream.append(make_batch([b"x" * 150], timestamp=1))
        await store.enforce_retention(now_ms=10**15)
        assert stream.start_offset == 0
        await store.close()

    asyncio.run(main())


def test_seal_opens_a_new_range_and_reads_span_ranges(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = _cfg()
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        expected: list[tuple[int, bytes]] = []
        for r in range(3):
            for i in range(15):
                value = f"r{r}-{i}".encode() * 5
                expected.append((await stream.append(make_batch([value])), value))
            sealed = stream.seal()
            assert sealed.sealed and sealed.end_offset == stream.end_offset == len(expected)
        await stream.append(make_batch([b"last"]))
        expected.append((len(expected), b"last"))
        ranges = stream.ranges
        assert [(r.index, r.start_offset, r.end_offset, r.sealed) for r in ranges] == [
            (0, 0, 15, True),
            (1, 15, 30, True),
            (2, 30, 45, True),
            (3, 45, None, False),
        ]
        assert all_values(stream.read(0, 10**9)) == expected
        assert all_values(stream.read(14, 10**9)) == expected[14:]
        # The range index is written as the batch's partitionLeaderEpoch.
        assert [h.leader_epoch for h in stream.batch_headers_tail(2)] == [2, 3]
        await store.close()
        store = await StreamStore.open(tmp_path, cfg)
        stream2 = store.get_stream("s")
        assert stream2 is not None and stream2.ranges == ranges
        assert all_values(stream2.read(0, 10**9)) == expected
        await store.close()

    asyncio.run(main())


def test_seal_during_concurrent_appends_keeps_order(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, _cfg(segment_bytes=1024))
        stream = store.create_stream("s")

        async def producer(k: int) -> list[int]:
            return [await stream.append(make_batch([f"{k}-{i}".encode() * 8])) for i in range(30)]

        tasks = [asyncio.create_task(producer(k)) for k in range(4)]
        for _ in range(5):
            await asyncio.sleep(0.001)
            stream.seal()
        results = await asyncio.gather(*tasks)
        offsets = sorted(o for r in results for o in r)
        assert offsets == list(range(120))
        assert [o for o, _ in all_values(stream.read(0, 10**9))] == offsets
        for r in results:
            assert r == sorted(r)
        await store.close()

    asyncio.run(main())


def test_retention_drops_whole_sealed_ranges(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = _cfg(retention_ms=HOUR)
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        for i in range(10):
            await stream.append(make_batch([b"old"], timestamp=i))
        stream.seal()
        for _ in range(10):
            await stream.append(make_batch([b"new"], timestamp=100 * HOUR))
        await store.enforce_retention(now_ms=100 * HOUR)
        assert stream.start_offset == 10
        assert [r.index for r in stream.ranges] == [1]
        assert not (tmp_path / "ranges" / "1" / "0").exists()
        await store.close()
        store = await StreamStore.open(tmp_path, cfg)
        stream2 = store.get_stream("s")
        assert stream2 is not None and stream2.start_offset == 10 and stream2.end_offset == 20
        assert [o for o, _ in all_values(stream2.read(10, 10**9))] == list(range(10, 20))
        await store.close()

    asyncio.run(main())

"""`Stream.delete_before` (DeleteRecords): the start offset moves anywhere up to the high
watermark, whole segments and sealed ranges below it are deleted, and it survives a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from crossbeat.stream import OffsetOutOfRange, StreamSettings, StreamStore
from tests.unit.stream.conftest import all_values, make_batch


def test_delete_before(tmp_path: Path) -> None:
    cfg = StreamSettings(segment_bytes=2048, index_interval_bytes=200, flush_max_delay_ms=0.0,
                         retention_ms=None)

    async def main() -> None:
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        for _ in range(30):
            await stream.append(make_batch([b"a" * 100, b"b" * 100]))  # 2 records per batch
        stream.seal()
        for _ in range(10):
            await stream.append(make_batch([b"c" * 100, b"d" * 100]))
        end = stream.end_offset
        with pytest.raises(OffsetOutOfRange):
            await stream.delete_before(end + 1)
        files = sorted((tmp_path / "ranges").glob("*/*/*.log"))
        assert await stream.delete_before(41) == 41  # inside a batch of the sealed range
        assert await stream.delete_before(7) == 41  # never backwards
        assert all_values(stream.read(41, 10**9))[0][0] == 40  # the whole batch holding 41
        with pytest.raises(OffsetOutOfRange):
            stream.read(39, 100)
        kept = sorted((tmp_path / "ranges").glob("*/*/*.log"))
        assert len(kept) < len(files) and int(kept[0].stem) <= 41
        assert await stream.delete_before(end) == end  # past the sealed range: it goes
        assert len(stream.ranges) == 1 and stream.read(end, 100) == []
        await store.close()

        store = await StreamStore.open(tmp_path, cfg)
        reopened = store.get_stream("s")
        assert reopened is not None
        assert (reopened.start_offset, reopened.end_offset) == (end, end)
        assert await reopened.append(make_batch([b"e"])) == end
        await store.close()

    asyncio.run(main())

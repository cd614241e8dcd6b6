"""Store lifecycle: close with unsynced data, deletes mid-append, fsync failure, leftovers."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path

import pytest

from crossbeat.stream import (
    StoreClosed,
    StoreFailed,
    StreamError,
    StreamNotFound,
    StreamSettings,
    StreamStore,
)
from tests.unit.stream.conftest import all_values, make_batch

CFG = StreamSettings(segment_bytes=2048, index_interval_bytes=200, flush_max_delay_ms=0.0)


def test_close_flushes_unsynced_appends(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, CFG)
        stream = store.create_stream("s")
        for i in range(50):  # never yields: the flusher has not run when close starts
            await stream.append(make_batch([f"{i}".encode()]), durable=False)
        assert stream.log_end_offset == 50
        await asyncio.wait_for(store.close(), 10)
        assert stream.end_offset == 50
        with pytest.raises(StoreClosed):
            await stream.append(make_batch([b"late"]))
        store = await StreamStore.open(tmp_path, CFG)
        reopened = store.get_stream("s")
        assert reopened is not None
        assert [v for _o, v in all_values(reopened.read(0, 10**9))] == [
            f"{i}".encode() for i in range(50)
        ]
        await store.close()

    asyncio.run(main())


def test_delete_stream_fails_waiting_appends(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, StreamSettings(flush_max_delay_ms=50.0))
        stream = store.create_stream("s")
        waiting = asyncio.create_task(stream.append(make_batch([b"x"])))
        await asyncio.sleep(0)
        assert not waiting.done()
        store.delete_stream("s")
        with pytest.raises(StreamNotFound):
            await waiting
        with pytest.raises(StreamNotFound):
            stream.read(0, 100)
        with pytest.raises(StreamNotFound):
            await stream.append(make_batch([b"y"]))
        assert not (tmp_path / "ranges" / "1").exists()
        await store.close()

    asyncio.run(main())


def test_failed_fsync_fails_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, CFG)
        stream = store.create_stream("s")
        await stream.append(make_batch([b"ok"]))

        def broken(fd: int) -> None:
            raise OSError(errno.EIO, "simulated I/O error")

        monkeypatch.setattr(os, "fdatasync", broken)
        with pytest.raises(StoreFailed):
            await stream.append(make_batch([b"lost"]))
        assert stream.end_offset == 1  # the unsynced batch was never visible
        with pytest.raises(StoreFailed):
            await stream.append(make_batch([b"more"]))
        monkeypatch.undo()
        await store.close()
        store = await StreamStore.open(tmp_path, CFG)
        reopened = store.get_stream("s")
        assert reopened is not None and reopened.read(0, 100)
        await store.close()

    asyncio.run(main())


def test_leftovers_of_interrupted_operations_are_cleaned(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = StreamSettings(
            segment_bytes=2048,
            index_interval_bytes=200,
            flush_max_delay_ms=0.0,
            retention_bytes=3000,
            retention_ms=None,
        )
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        for _ in range(60):
            await stream.append(make_batch([b"x" * 100]))
        segment_dir = next((tmp_path / "ranges").glob("*/0"))
        first_segments = {p.name: p.read_bytes() for p in segment_dir.glob("*.log")}
        await store.enforce_retention()
        start = stream.start_offset
        assert start > 0
        await store.close()
        # Pretend the crash came after the placement update but before the files went.
        for name, data in first_segments.items():
            if not (segment_dir / name).exists():
                (segment_dir / name).write_bytes(data)
        (tmp_path / "ranges" / "1" / "7").mkdir()  # a range the placement driver dropped
        (tmp_path / "placement.json.tmp").write_bytes(b"{half")
        store = await StreamStore.open(tmp_path, cfg)
        reopened = store.get_stream("s")
        assert reopened is not None and reopened.start_offset == start
        assert min(int(p.stem) for p in segment_dir.glob("*.log")) == start
        assert not (tmp_path / "ranges" / "1" / "7").exists()
        assert not (tmp_path / "placement.json.tmp").exists()
        assert all_values(reopened.read(start, 10**9))[-1][0] == 59
        await store.close()

    asyncio.run(main())


def test_per_stream_configs_override_settings(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, CFG.model_copy(update={"retention_ms": None}))
        small = store.create_stream("small", {"segment.bytes": "1024", "retention.bytes": "2500"})
        forever = store.create_stream("forever", {"retention.ms": "-1", "retention.bytes": "-1"})
        assert small.limits.segment_bytes == 1024 and small.limits.retention_bytes == 2500
        assert forever.limits.retention_ms is None and forever.limits.retention_bytes is None
        for _ in range(40):
            await small.append(make_batch([b"x" * 100]))
            await forever.append(make_batch([b"x" * 100], timestamp=1))
        assert len(small._replicas[0].segments) > len(forever._replicas[0].segments)
        await store.enforce_retention(now_ms=10**13)
        assert small.start_offset > 0 and small.size_bytes < 2500 + 1024
        assert forever.start_offset == 0
        forever.update_config({"retention.ms": "1000"})
        assert forever.config == {"retention.ms": "1000"}
        await store.enforce_retention(now_ms=10**13)
        assert forever.start_offset == forever.end_offset == 40
        await store.close()
        store = await StreamStore.open(tmp_path, CFG)
        reopened = store.get_stream("forever")
        assert reopened is not None and reopened.config == {"retention.ms": "1000"}
        await store.close()

    asyncio.run(main())


def test_segments_roll_by_age(tmp_path: Path) -> None:
    async def main() -> None:
        # a minute: two appends are never that far apart, even on a loaded machine (20 ms
        # were, and the second append rolled a segment of its own)
        store = await StreamStore.open(tmp_path, CFG.model_copy(update={"segment_ms": 60_000}))
        stream = store.create_stream("s")
        await stream.append(make_batch([b"a"]))
        await stream.append(make_batch([b"b"]))
        assert len(stream._replicas[0].segments) == 1
        segment = stream._replicas[0].active
        segment.created_ms -= 61_000  # the active segment is now older than segment_ms
        await stream.append(make_batch([b"c"]))
        assert len(stream._replicas[0].segments) == 2
        assert [v for _o, v in all_values(stream.read(0, 10**9))] == [b"a", b"b", b"c"]
        await store.close()

    asyncio.run(main())


def test_segment_age_counts_from_its_first_batch_across_restarts(tmp_path: Path) -> None:
    """segment.ms is timed from the first batch's timestamp (Kafka's rolling-based
    timestamp), so a reopened store does not restart the clock: a broker restarted more
    often than segment.ms never rolled by time."""
    async def main() -> None:
        cfg = CFG.model_copy(update={"segment_ms": 60_000})
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.create_stream("s")
        old = int(time.time() * 1000) - 120_000  # two minutes ago, twice segment.ms
        await stream.append(make_batch([b"a"], timestamp=old))
        await store.close()
        store = await StreamStore.open(tmp_path, cfg)
        stream = store.get_stream("s")
        assert stream is not None and len(stream._replicas[0].segments) == 1
        await stream.append(make_batch([b"b"]))
        assert len(stream._replicas[0].segments) == 2
        assert [v for _o, v in all_values(stream.read(0, 10**9))] == [b"a", b"b"]
        await store.close()

    asyncio.run(main())


def test_cancelled_append_during_roll_leaves_a_consistent_stream(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, CFG)
        stream = store.create_stream("s")
        while len(stream._replicas[0].segments) == 1:
            await stream.append(make_batch([b"x" * 300]))
        segments = len(stream._replicas[0].segments)
        active = stream._replicas[0].active
        while active.fits(400, 0, CFG.segment_bytes):
            await stream.append(make_batch([b"y" * 300]))
        # The next append must roll; cancel it while the roll's fsync runs in a thread.
        task = asyncio.create_task(stream.append(make_batch([b"z" * 300])))
        for _ in range(3):
            await asyncio.sleep(0)
        assert stream._replicas[0]._rolling is not None
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        base = await stream.append(make_batch([b"after"]))
        assert len(stream._replicas[0].segments) == segments + 1
        values = all_values(stream.read(0, 10**9))
        assert [o for o, _ in values] == list(range(base + 1))
        assert values[-1][1] == b"after"
        await store.close()

    asyncio.run(main())


def test_deleted_stream_directories_go_unknown_ones_stay(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, CFG)
        store.create_stream("a")
        store.create_stream("b")
        await store.close()
        store = await StreamStore.open(tmp_path, CFG)
        store.delete_stream("b")
        await store.close()
        (tmp_path / "ranges" / "2").mkdir()  # as if the delete's rmtree was interrupted
        (tmp_path / "ranges" / "50").mkdir()  # never handed out: not ours to delete
        store = await StreamStore.open(tmp_path, CFG)
        assert not (tmp_path / "ranges" / "2").exists()
        assert (tmp_path / "ranges" / "50").exists()
        await store.close()

    asyncio.run(main())


def test_missing_placement_file_with_data_refuses_to_open(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, CFG)
        await store.create_stream("a").append(make_batch([b"precious"]))
        await store.close()
        (tmp_path / "placement.json").unlink()
        with pytest.raises(StreamError, match="missing"):
            await StreamStore.open(tmp_path, CFG)
        assert any((tmp_path / "ranges").glob("*/*/*.log"))

    asyncio.run(main())

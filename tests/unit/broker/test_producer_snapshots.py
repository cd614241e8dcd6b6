"""Producer state snapshots against a real stream store: what a partition knows of its
idempotent producers survives a reopen (saved at shutdown, or replayed from the log after
the last snapshot a crash left), expiry counts from before the restart, and a snapshot that
no longer describes the log is not trusted."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from crossbeat.broker import producers as producers_module
from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.producer_snapshots import Snapshot, SnapshotFiles
from crossbeat.broker.producers import ID_BLOCK, ProducerIdAllocator, ProducerStates
from crossbeat.stream import Stream, StreamSettings, StreamStore, parse_header

A, B = 7, 8
SETTINGS = StreamSettings(flush_max_delay_ms=0)


def batch(pid: int, seq: int, epoch: int = 0, ts: int | None = None) -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000) if ts is None else ts, key=None,
             value=b"v%d" % seq, headers=[])
    return b.build()


async def produce(states: ProducerStates, stream: Stream, buf: bytearray) -> tuple[object, int]:
    """(outcome, offset): NONE and the new offset, "dup" and the original one, or the error."""
    verdict = states.check(stream, parse_header(buf))
    if verdict.error:
        return verdict.error, -1
    if verdict.duplicate_of is not None:
        assert isinstance(verdict.duplicate_of, int)
        return "dup", verdict.duplicate_of
    base = await stream.append(buf)
    states.appended(verdict, base)
    return ErrorCode.NONE, base


async def a_behind_300_batches_of_b(states: ProducerStates, stream: Stream) -> None:
    """Offsets 0-9: A's sequences 0-9; 10-309: B's 0-299 (more than the 256 headers a
    restart used to read back)."""
    for seq in range(10):
        assert await produce(states, stream, batch(A, seq)) == (ErrorCode.NONE, seq)
    for seq in range(300):
        assert (await produce(states, stream, batch(B, seq)))[0] is ErrorCode.NONE


async def a_is_known(states: ProducerStates, stream: Stream) -> None:
    assert await produce(states, stream, batch(A, 9)) == ("dup", 9)
    assert (await produce(states, stream, batch(A, 0)))[0] is not ErrorCode.NONE
    end = stream.end_offset
    assert await produce(states, stream, batch(A, 10)) == (ErrorCode.NONE, end)


@pytest.mark.parametrize("saved", [True, False], ids=["shutdown-snapshot", "no-snapshot"])
def test_a_producer_far_behind_the_log_end_is_known_after_a_reopen(
    tmp_path: Path, saved: bool,
) -> None:
    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.create_stream("t-0")
        states = ProducerStates(tmp_path / "snapshots")
        await a_behind_300_batches_of_b(states, stream)
        if saved:
            await states.save_due(everything=True)
        await store.close()

        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.get_stream("t-0")
        assert stream is not None
        await a_is_known(ProducerStates(tmp_path / "snapshots"), stream)
        await store.close()

    asyncio.run(run())


def test_batches_after_the_snapshot_are_replayed(tmp_path: Path) -> None:
    """A crash after a snapshot: what came after it is read back from the log, including a
    batch that was durable but not yet settled when the snapshot was taken."""

    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.create_stream("t-0")
        states = ProducerStates(tmp_path / "snapshots")
        for seq in range(9):
            assert (await produce(states, stream, batch(A, seq)))[0] is ErrorCode.NONE
        buf = batch(A, 9)
        verdict = states.check(stream, parse_header(buf))
        base = await stream.append(buf)  # durable: below the high watermark
        assert await states.save_due(everything=True) == 1  # before the produce path settles it
        states.appended(verdict, base)
        for seq in range(300):
            assert (await produce(states, stream, batch(B, seq)))[0] is ErrorCode.NONE
        await store.close()  # a crash: no snapshot at the end

        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.get_stream("t-0")
        assert stream is not None
        states = ProducerStates(tmp_path / "snapshots")
        await a_is_known(states, stream)
        assert await produce(states, stream, batch(B, 299)) == ("dup", 309)
        await store.close()

    asyncio.run(run())


def test_expiry_counts_from_the_last_write_before_the_restart(tmp_path: Path) -> None:
    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.create_stream("t-0")
        states = ProducerStates(tmp_path / "snapshots")
        assert (await produce(states, stream, batch(A, 0)))[0] is ErrorCode.NONE
        written = int(time.time() * 1000)
        await states.save_due(everything=True)
        await store.close()
        while int(time.time() * 1000) < written + 20:  # the restart comes later
            time.sleep(0.005)

        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.get_stream("t-0")
        assert stream is not None
        states = ProducerStates(tmp_path / "snapshots")
        assert [p.producer_id for p in states.active(stream)] == [A]

        def never(name: str, pid: int) -> bool:
            return False

        # 10 s after its write: counted from the restart it would be idle for less
        assert states.expire(10_000, never, now_ms=written + 10_001 + 10) == 1
        assert states.active(stream) == []  # forgotten: it would be taken up anew
        await store.close()

    asyncio.run(run())


def damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[20] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["damaged", "beyond-the-end", "other-log", "below-the-start"])
def test_a_snapshot_that_does_not_describe_the_log_is_not_used(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Logged, and the state rebuilt from the whole log instead: still right."""

    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.create_stream("t-0")
        states = ProducerStates(tmp_path / "snapshots")
        for seq in range(20):
            assert (await produce(states, stream, batch(A, seq)))[0] is ErrorCode.NONE
        await states.save_due(everything=True)
        path = tmp_path / "snapshots" / "t-0.snapshot"
        if how == "damaged":
            damage(path)
        elif how in ("beyond-the-end", "other-log"):
            # the stream made anew under the name (its deletion's removal lost in a crash)
            store.delete_streams(["t-0"])
            stream = store.create_stream("t-0")
            states = ProducerStates(tmp_path / "snapshots")
            for seq in range(5 if how == "beyond-the-end" else 30):
                assert (await produce(states, stream, batch(B, seq)))[0] is ErrorCode.NONE
        else:
            assert (await produce(states, stream, batch(B, 0)))[0] is ErrorCode.NONE
            await stream.delete_before(stream.end_offset)
        await store.close()

        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.get_stream("t-0")
        assert stream is not None
        states = ProducerStates(tmp_path / "snapshots")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="crossbeat.broker.producers"):
            listed = [(p.producer_id, p.last_sequence) for p in states.active(stream)]
        assert "snapshot is not used" in caplog.text
        if how == "damaged":
            assert listed == [(A, 19)]
        elif how == "beyond-the-end":
            assert listed == [(B, 4)]
        elif how == "other-log":
            assert listed == [(B, 29)]
        else:
            assert listed == []  # its batches are gone with the log before the start
        await store.close()

    asyncio.run(run())


def test_a_partition_of_plain_batches_is_snapshotted_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loaded off the event loop once as many plain batches as make a snapshot due came, so
    that a later first idempotent batch does not walk its whole log."""
    monkeypatch.setattr(producers_module, "SNAPSHOT_EVERY_BATCHES", 5)

    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.create_stream("t-0")
        states = ProducerStates(tmp_path / "snapshots")
        for _ in range(4):
            assert (await produce(states, stream, batch(-1, -1, epoch=-1)))[0] is ErrorCode.NONE
        assert await states.save_due() == 0
        assert (await produce(states, stream, batch(-1, -1, epoch=-1)))[0] is ErrorCode.NONE
        assert await states.save_due() == 1
        snapshot = SnapshotFiles(tmp_path / "snapshots").read("t-0")
        assert snapshot is not None and (snapshot.offset, snapshot.producers) == (5, ())
        await store.close()

    asyncio.run(run())


def test_a_snapshot_the_log_start_passed_is_written_again(tmp_path: Path) -> None:
    """DeleteRecords past the snapshot's offset: a restart would not trust it, so a new one
    is due at once, though no producer changed."""

    async def run() -> None:
        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.create_stream("t-0")
        states = ProducerStates(tmp_path / "snapshots")
        for seq in range(3):
            assert (await produce(states, stream, batch(A, seq)))[0] is ErrorCode.NONE
        assert await states.save_due(everything=True) == 1
        assert await states.save_due() == 0
        for _ in range(2):  # plain batches: nothing changes
            assert (await produce(states, stream, batch(-1, -1, epoch=-1)))[0] is ErrorCode.NONE
        assert await states.save_due() == 0
        await stream.delete_before(5)
        assert await states.save_due() == 1
        snapshot = SnapshotFiles(tmp_path / "snapshots").read("t-0")
        assert snapshot is not None and snapshot.offset == 5
        await store.close()

        store = await StreamStore.open(tmp_path / "s", SETTINGS)
        stream = store.get_stream("t-0")
        assert stream is not None
        states = ProducerStates(tmp_path / "snapshots")
        assert await produce(states, stream, batch(A, 2)) == ("dup", 2)
        await store.close()

    asyncio.run(run())


def test_a_removed_snapshot_is_not_brought_back_by_a_write_under_way(tmp_path: Path) -> None:
    files = SnapshotFiles(tmp_path / "snapshots")
    snapshot = Snapshot("t-0", 3, -1, 0, ())
    assert files.write(snapshot, files.generation("t-0"))
    taken = files.generation("t-0")  # a write's state taken, then the topic deleted
    files.remove("t-0")
    assert files.read("t-0") is None
    assert not files.write(snapshot, taken)
    assert list((tmp_path / "snapshots").iterdir()) == []
    assert files.write(snapshot, files.generation("t-0"))  # a new topic of the name


def test_prune_removes_the_snapshots_of_partitions_that_are_gone(tmp_path: Path) -> None:
    files = SnapshotFiles(tmp_path / "snapshots")
    for name in ("kept-0", "gone-0", "x" * 300 + "-0"):
        assert files.write(Snapshot(name, 0, -1, 0, ()), 0)
    (tmp_path / "snapshots" / "gone-1.snapshot.tmp").write_bytes(b"torn")
    assert files.prune({"kept-0", "x" * 300 + "-0"}) == 2
    assert files.read("kept-0") is not None and files.read("x" * 300 + "-0") is not None


def test_the_producer_id_file_is_made_before_the_first_topic(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A fresh data dir gets it at once, so a topic made before the first InitProducerId is
    not taken for a sign that ids were handed out and the file lost."""
    ProducerIdAllocator.prepare(tmp_path)
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "placement.json").write_text("{}")  # a topic, made later
    ProducerIdAllocator.prepare(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert asyncio.run(ProducerIdAllocator(tmp_path).allocate()) == 0
    assert caplog.records == []


def test_a_data_dir_of_an_older_version_gets_ids_above_any_it_handed_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Data but no producer id file: an older version made it at the first InitProducerId,
    and whether that came cannot be told, so ids resume from the clock, once."""
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "placement.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        ProducerIdAllocator.prepare(tmp_path)
    assert "producer ids resume at" in caplog.text
    first = asyncio.run(ProducerIdAllocator(tmp_path).allocate())
    assert first > 10**12 * ID_BLOCK
    caplog.clear()
    ProducerIdAllocator.prepare(tmp_path)
    assert caplog.records == []
    assert asyncio.run(ProducerIdAllocator(tmp_path).allocate()) == first + ID_BLOCK

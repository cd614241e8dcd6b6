"""Recovery on open: torn tails, corrupt CRCs, missing or stale indexes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossbeat.stream import Stream, StreamError, StreamSettings, StreamStore
from tests.unit.stream.conftest import all_values, make_batch

SMALL = StreamSettings(segment_bytes=2048, index_interval_bytes=200, flush_max_delay_ms=0.0)


async def _fill(
    tmp_path: Path, batches: int, cfg: StreamSettings = SMALL
) -> list[tuple[int, bytes]]:
    store = await StreamStore.open(tmp_path, cfg)
    stream = store.create_stream("s")
    expected: list[tuple[int, bytes]] = []
    for i in range(batches):
        values = [f"r{i}-{j}".encode() * 4 for j in range(i % 3 + 1)]
        base = await stream.append(make_batch(values), durable=False)  # close() syncs
        expected.extend((base + j, v) for j, v in enumerate(values))
    await store.close()
    return expected


def _segments(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "ranges").glob("*/*/*.log"))


async def _reopen(tmp_path: Path, cfg: StreamSettings = SMALL) -> tuple[StreamStore, Stream]:
    store = await StreamStore.open(tmp_path, cfg)
    stream = store.get_stream("s")
    assert stream is not None
    return store, stream


def _batch_ends(path: Path) -> list[int]:
    from crossbeat.stream.batch import scan

    result = scan(path.read_bytes())
    return [p + h.size for p, h in zip(result.positions, result.headers, strict=True)]


def test_torn_tail_is_truncated_and_earlier_batches_survive(tmp_path: Path) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path, 50)
        last = _segments(tmp_path)[-1]
        ends = _batch_ends(last)
        assert len(ends) >= 2
        os.truncate(last, ends[-1] - 5)  # tear the last batch
        store, stream = await _reopen(tmp_path)
        got = all_values(stream.read(0, 10**9))
        assert got == expected[: len(got)]
        assert stream.end_offset == got[-1][0] + 1
        assert last.stat().st_size == ends[-2]  # truncated to the last whole batch
        # Only the torn batch is gone; appends continue at the next offset.
        assert len(expected) - len(got) <= 3
        base = await stream.append(make_batch([b"after"]))
        assert base == stream.end_offset - 1 == got[-1][0] + 1
        await store.close()

    asyncio.run(main())


def test_corrupt_crc_of_last_batch_is_truncated(tmp_path: Path) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path, 50)
        last = _segments(tmp_path)[-1]
        ends = _batch_ends(last)
        with last.open("r+b") as fh:
            fh.seek(ends[-1] - 2)
            byte = fh.read(1)
            fh.seek(ends[-1] - 2)
            fh.write(bytes([byte[0] ^ 0xFF]))
        store, stream = await _reopen(tmp_path)
        got = all_values(stream.read(0, 10**9))
        assert got == expected[: len(got)] and 1 <= len(expected) - len(got) <= 3
        assert last.stat().st_size == ends[-2]
        await store.close()

    asyncio.run(main())


def test_garbage_after_the_last_batch_is_truncated(tmp_path: Path) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path, 10)
        last = _segments(tmp_path)[-1]
        size = last.stat().st_size
        with last.open("ab") as fh:
            fh.write(b"\x00" * 100)  # preallocated zeros after a crash look like this
        store, stream = await _reopen(tmp_path)
        assert all_values(stream.read(0, 10**9)) == expected
        assert last.stat().st_size == size
        await store.close()

    asyncio.run(main())


def test_indexes_are_rebuilt_when_missing_or_stale(tmp_path: Path) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path, 80)
        segments = _segments(tmp_path)
        assert len(segments) >= 4
        indexes = sorted((tmp_path / "ranges").glob("*/*/*.index"))
        time_indexes = sorted((tmp_path / "ranges").glob("*/*/*.timeindex"))
        assert indexes and time_indexes
        originals = {p: p.read_bytes() for p in [*indexes, *time_indexes]}
        indexes[0].unlink()  # missing
        time_indexes[1].unlink()  # missing time index
        indexes[2].write_bytes(originals[indexes[2]][:-3])  # malformed
        time_indexes[2].write_bytes(originals[time_indexes[2]][:-16])  # stale: no final entry
        store, stream = await _reopen(tmp_path)
        assert all_values(stream.read(0, 10**9)) == expected
        for offset in range(0, len(expected), 5):
            got = all_values(stream.read(offset, 10**9))
            assert got[0][0] <= offset and got == expected[got[0][0] :]
        assert stream.offset_for_timestamp(0) == (0, 1_700_000_000_000)
        await store.close()
        # Rebuilt indexes were saved on close and equal the originals.
        for path, data in originals.items():
            assert path.read_bytes() == data, path

    asyncio.run(main())


def test_all_indexes_deleted(tmp_path: Path) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path, 60)
        for path in (tmp_path / "ranges").glob("*/*/*index"):
            path.unlink()
        store, stream = await _reopen(tmp_path)
        assert all_values(stream.read(0, 10**9)) == expected
        assert all_values(stream.read(expected[-1][0], 10**9))[-1] == expected[-1]
        await store.close()

    asyncio.run(main())


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(cut=st.floats(min_value=0.0, max_value=1.0))
def test_recovery_on_random_truncation(tmp_path_factory, cut: float) -> None:
    tmp_path = tmp_path_factory.mktemp("trunc")
    cfg = StreamSettings(segment_bytes=1 << 20, index_interval_bytes=100, flush_max_delay_ms=0.0)

    async def main() -> None:
        expected = await _fill(tmp_path, 25, cfg)
        (seg,) = _segments(tmp_path)
        ends = _batch_ends(seg)
        size = int(seg.stat().st_size * cut)
        os.truncate(seg, size)
        store, stream = await _reopen(tmp_path, cfg)
        whole = [e for e in ends if e <= size]
        got = all_values(stream.read(0, 10**9)) if stream.end_offset else []
        assert got == expected[: len(got)]
        assert seg.stat().st_size == (whole[-1] if whole else 0)
        assert stream.end_offset == (got[-1][0] + 1 if got else 0)
        # The store keeps working at the right offset.
        assert await stream.append(make_batch([b"z"])) == stream.end_offset - 1
        await store.close()

    asyncio.run(main())


def test_damage_inside_a_closed_segment_is_reported_not_skipped(tmp_path: Path) -> None:
    async def main() -> None:
        await _fill(tmp_path, 60)
        first = _segments(tmp_path)[0]
        ends = _batch_ends(first)
        with first.open("r+b") as fh:  # wreck the magic byte of the second batch
            fh.seek(ends[0] + 16)
            fh.write(b"\x07")
        store, stream = await _reopen(tmp_path)
        assert len(stream.read(0, 10**9)) == 1  # the whole batch before the damage is served
        with pytest.raises(StreamError, match="damaged"):
            stream.read(1, 10**9)  # the damaged batch (the first has one record)
        later = int(_segments(tmp_path)[-1].stem)
        assert stream.read(later, 100)  # later segments still serve
        await store.close()

    asyncio.run(main())

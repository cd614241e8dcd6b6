"""Damaged or missing segment files at rest: recovery keeps every later segment, leaves an
offset gap that reads skip, logs what was lost, and never hands an offset out twice."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from crossbeat.stream import OffsetOutOfRange, Stream, StreamError, StreamSettings, StreamStore
from crossbeat.stream.batch import scan
from tests.unit.stream.conftest import all_values, make_batch

SMALL = StreamSettings(segment_bytes=2048, index_interval_bytes=200, flush_max_delay_ms=0.0)


async def _fill(tmp_path: Path, batches: int = 60) -> list[tuple[int, bytes]]:
    store = await StreamStore.open(tmp_path, SMALL)
    stream = store.create_stream("s")
    expected: list[tuple[int, bytes]] = []
    for i in range(batches):
        values = [f"r{i}-{j}".encode() * 4 for j in range(i % 3 + 1)]
        base = await stream.append(make_batch(values), durable=False)  # close() syncs
        expected.extend((base + j, v) for j, v in enumerate(values))
    await store.close()
    return expected


async def _reopen(tmp_path: Path) -> tuple[StreamStore, Stream]:
    store = await StreamStore.open(tmp_path, SMALL)
    stream = store.get_stream("s")
    assert stream is not None
    return store, stream


def _segments(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "ranges").glob("*/*/*.log"))


def _batch_ends(path: Path) -> list[int]:
    result = scan(path.read_bytes())
    return [p + h.size for p, h in zip(result.positions, result.headers, strict=True)]


def _remove(segment: Path, *suffixes: str) -> None:
    for suffix in suffixes:
        segment.with_suffix(suffix).unlink()


def _errors(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


def _kept_and_gap(
    expected: list[tuple[int, bytes]], got: list[tuple[int, bytes]], gap_start: int, gap_end: int
) -> None:
    """`got` is `expected` without offsets [gap_start, gap_end)."""
    assert got == [(o, v) for o, v in expected if not gap_start <= o < gap_end]


def test_truncated_middle_segment_is_cut_and_later_segments_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path)
        segments = _segments(tmp_path)
        assert len(segments) >= 4
        middle, after = segments[1], segments[2]
        ends = _batch_ends(middle)
        os.truncate(middle, ends[-1] - 5)  # tear its last batch
        end = expected[-1][0] + 1
        store, stream = await _reopen(tmp_path)
        assert all(s.exists() for s in segments)
        assert middle.stat().st_size == ends[-2]  # every whole batch before the torn one
        assert stream.end_offset == end and stream.start_offset == 0
        got = all_values(stream.read(0, 10**9))
        lost_to = int(after.stem)
        missing = sorted({o for o, _ in expected} - {o for o, _ in got})
        assert missing == list(range(missing[0], lost_to)) and missing[0] > int(middle.stem)
        _kept_and_gap(expected, got, missing[0], lost_to)
        # a read at an offset in the gap gets the next batch after it
        assert all_values(stream.read(missing[0], 1))[0][0] == lost_to
        # the next offset comes from the end of the last segment: none is reused
        assert await stream.append(make_batch([b"new"])) == end
        await store.close()
        errors = _errors(caplog)
        assert str(middle) in errors and f"byte {ends[-2]}" in errors
        assert f"offsets {missing[0]} to {lost_to - 1} are missing" in errors

    asyncio.run(main())


def test_deleted_middle_segment_leaves_a_gap_not_a_shorter_stream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path)
        segments = _segments(tmp_path)
        middle, after = segments[1], segments[2]
        _remove(middle, ".log", ".index", ".timeindex")
        end = expected[-1][0] + 1
        store, stream = await _reopen(tmp_path)
        assert stream.end_offset == end
        got = all_values(stream.read(0, 10**9))
        _kept_and_gap(expected, got, int(middle.stem), int(after.stem))
        assert all_values(stream.read(int(middle.stem), 1))[0][0] == int(after.stem)
        assert await stream.append(make_batch([b"new"])) == end
        await store.close()
        assert f"offsets {int(middle.stem)} to {int(after.stem) - 1} are missing" in _errors(caplog)

    asyncio.run(main())


def test_corrupt_batch_in_a_fully_verified_middle_segment_cuts_only_that_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path)
        segments = _segments(tmp_path)
        middle, after = segments[1], segments[2]
        ends = _batch_ends(middle)
        with middle.open("r+b") as fh:  # a payload byte of its second batch
            fh.seek(ends[1] - 3)
            byte = fh.read(1)
            fh.seek(ends[1] - 3)
            fh.write(bytes([byte[0] ^ 0xFF]))
        _remove(middle, ".index")  # so the whole segment is verified
        end = expected[-1][0] + 1
        store, stream = await _reopen(tmp_path)
        assert middle.stat().st_size == ends[0]
        assert all(s.exists() for s in segments)
        assert stream.end_offset == end
        got = all_values(stream.read(0, 10**9))
        first_lost = max(o for o, _ in all_values(stream.read(int(middle.stem), 1))) + 1
        _kept_and_gap(expected, got, first_lost, int(after.stem))
        assert await stream.append(make_batch([b"new"])) == end
        await store.close()
        assert str(middle) in _errors(caplog) and "CRC" in _errors(caplog)

    asyncio.run(main())


def test_damage_the_index_covers_serves_the_batches_before_it_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path)
        first = _segments(tmp_path)[0]
        ends = _batch_ends(first)
        with first.open("r+b") as fh:  # wreck the length field of the third batch
            fh.seek(ends[1] + 9)
            byte = fh.read(1)
            fh.seek(ends[1] + 9)
            fh.write(bytes([byte[0] ^ 0xFF]))
        store, stream = await _reopen(tmp_path)
        before = expected[:3]  # the first two batches: 1 and 2 records
        assert all_values(stream.read(0, 10**9)) == before
        damaged = before[-1][0] + 1
        for _ in range(5):
            with pytest.raises(StreamError, match="damaged"):
                stream.read(damaged, 10**9)
            assert all_values(stream.read(0, 10**9)) == before
        later = int(_segments(tmp_path)[-1].stem)
        assert stream.read(later, 100)
        await store.close()
        damage_logs = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(damage_logs) == 1
        assert str(first) in damage_logs[0].getMessage()
        assert f"byte {ends[1]}" in damage_logs[0].getMessage()

    asyncio.run(main())


def test_deleted_first_segment_moves_the_log_start(tmp_path: Path) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path)
        segments = _segments(tmp_path)
        _remove(segments[0], ".log", ".index", ".timeindex")
        store, stream = await _reopen(tmp_path)
        first = int(segments[1].stem)
        assert stream.start_offset == first
        with pytest.raises(OffsetOutOfRange):
            stream.read(first - 1, 100)
        assert all_values(stream.read(first, 10**9)) == [v for v in expected if v[0] >= first]
        await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("suffixes", [(".log",), (".log", ".index", ".timeindex")])
def test_deleted_last_segment_does_not_reuse_offsets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, suffixes: tuple[str, ...]
) -> None:
    async def main() -> None:
        expected = await _fill(tmp_path)
        last = _segments(tmp_path)[-1]
        _remove(last, *suffixes)
        end = expected[-1][0] + 1
        store, stream = await _reopen(tmp_path)
        assert stream.end_offset == end
        assert await stream.append(make_batch([b"new"])) == end
        assert all_values(stream.read(int(last.stem), 10**9)) == [(end, b"new")]
        await store.close()
        assert str(int(last.stem)) in _errors(caplog)

    asyncio.run(main())


def test_missing_open_range_directory_is_logged_and_keeps_the_log_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        await _fill(tmp_path)
        store, stream = await _reopen(tmp_path)
        start = await stream.delete_before(stream.end_offset - 5)
        await store.close()
        directory = _segments(tmp_path)[0].parent
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()
        store, stream = await _reopen(tmp_path)
        assert stream.start_offset == stream.end_offset == start
        assert await stream.append(make_batch([b"new"])) == start
        await store.close()
        assert str(directory) in _errors(caplog)

    asyncio.run(main())


def test_unknown_directories_in_a_stream_directory_are_kept_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        await _fill(tmp_path, 5)
        stream_dir = _segments(tmp_path)[0].parent.parent
        unlisted = stream_dir / "1"  # e.g. left by an older placement.json restored
        backup = stream_dir / "backup"
        for d in (unlisted, backup):
            d.mkdir()
            (d / "notes.txt").write_text("mine")
        store, _stream = await _reopen(tmp_path)
        await store.close()
        assert (unlisted / "notes.txt").exists() and (backup / "notes.txt").exists()
        warnings = "\n".join(
            r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
        )
        assert str(unlisted) in warnings and str(backup) in warnings

    asyncio.run(main())

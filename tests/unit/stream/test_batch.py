"""RecordBatch v2 header parsing, validation and the recovery scanner."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossbeat.stream.batch import (
    HEADER_SIZE,
    assign,
    crc_ok,
    iter_batch_positions,
    parse_header,
    scan,
    validate_batch,
)
from crossbeat.stream.errors import CorruptBatch
from tests.unit.stream.conftest import make_batch


def test_parse_header_of_a_real_batch() -> None:
    batch = make_batch([b"a", b"b", b"c"], producer_id=7, producer_epoch=1, base_sequence=10)
    header = validate_batch(batch)
    assert header.magic == 2
    assert header.size == len(batch)
    assert header.record_count == 3 and header.last_offset_delta == 2
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 10)
    assert header.max_timestamp == 1_700_000_000_002
    assert parse_header(batch) == header


def test_assign_keeps_the_crc_valid() -> None:
    batch = make_batch([b"x"])
    assign(batch, 123456789, 5)
    header = validate_batch(batch)
    assert header.base_offset == 123456789 and header.leader_epoch == 5
    assert crc_ok(batch, 0, header)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.__setitem__(-1, b[-1] ^ 0xFF), "CRC"),
        (lambda b: b.__setitem__(16, 1), "magic"),
        (lambda b: struct.pack_into(">i", b, 8, len(b)), "length"),
        (lambda b: b.__delitem__(slice(-3, None)), "length"),
        (lambda b: b.__delitem__(slice(30, None)), "truncated"),
    ],
)
def test_validate_rejects_bad_batches(mutate, message: str) -> None:
    batch = make_batch([b"hello", b"world"])
    mutate(batch)
    with pytest.raises(CorruptBatch, match=message):
        validate_batch(batch)


def test_validate_rejects_record_count_mismatch() -> None:
    batch = make_batch([b"a", b"b"])
    struct.pack_into(">i", batch, 57, 5)  # recordCount (inside the CRC: fix the CRC too)
    from crc32c import crc32c

    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptBatch, match="record count"):
        validate_batch(batch)


def _log(n: int) -> tuple[bytes, list[int]]:
    """n batches with assigned offsets back to back, and the end position of each."""
    data = bytearray()
    ends: list[int] = []
    offset = 0
    for i in range(n):
        batch = make_batch([f"v{i}-{j}".encode() for j in range(i % 3 + 1)])
        assign(batch, offset, 0)
        offset += validate_batch(batch).record_count
        data += batch
        ends.append(len(data))
    return bytes(data), ends


def test_scan_and_walk_a_whole_log() -> None:
    data, ends = _log(20)
    result = scan(data, 0)
    assert result.error is None and result.valid_bytes == len(data)
    assert [p + h.size for p, h in zip(result.positions, result.headers, strict=True)] == ends
    walked = list(iter_batch_positions(lambda n, pos: data[pos : pos + n], 0, len(data), chunk=64))
    assert [pos + size for pos, _b, size, _n in walked] == ends
    assert walked[-1][3] == result.next_offset


def test_scan_stops_at_an_offset_gap() -> None:
    data, ends = _log(3)
    second = bytearray(data[ends[0] : ends[1]])
    struct.pack_into(">q", second, 0, 999)
    broken = data[: ends[0]] + bytes(second) + data[ends[1] :]
    result = scan(broken, 0)
    assert result.valid_bytes == ends[0] and "expected" in (result.error or "")


@settings(max_examples=200, deadline=None)
@given(
    cut=st.integers(min_value=0, max_value=10_000), flip=st.integers(min_value=-1, max_value=10_000)
)
def test_scan_of_damaged_log_keeps_exactly_the_intact_prefix(cut: int, flip: int) -> None:
    data, ends = _log(12)
    cut %= len(data) + 1
    damaged = bytearray(data[:cut])
    if flip >= 0 and damaged:
        damaged[flip % len(damaged)] ^= 0x5A
    result = scan(bytes(damaged), 0)
    intact = [e for e in ends if e <= cut]
    if flip < 0 or not damaged:
        assert result.valid_bytes == (intact[-1] if intact else 0)
        assert result.error is None or result.valid_bytes < cut
    else:
        # Batches before the one holding the flipped byte stay; that one and later ones go
        # (unless the flip hit partitionLeaderEpoch, the only field no check covers).
        hit = flip % len(damaged)
        start_of_hit = max([0, *[e for e in ends if e <= hit]])
        in_epoch_field = 12 <= hit - start_of_hit < 16
        intact_end = intact[-1] if intact else 0
        assert result.valid_bytes in [0, *ends]
        assert min(start_of_hit, intact_end) <= result.valid_bytes <= intact_end
        if not in_epoch_field:
            assert result.valid_bytes <= start_of_hit


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_parser_and_scanner_never_crash_on_garbage(blob: bytes) -> None:
    result = scan(blob)
    assert 0 <= result.valid_bytes <= len(blob)
    list(iter_batch_positions(lambda n, pos: blob[pos : pos + n], 0, len(blob)))
    if len(blob) < HEADER_SIZE:
        with pytest.raises(CorruptBatch):
            parse_header(blob)
    with contextlib.suppress(CorruptBatch):
        validate_batch(blob)

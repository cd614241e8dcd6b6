"""Kafka RecordBatch v2 headers: parsing, validation, offset assignment and scanning.

Layout of the 61-byte header (big-endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32

`batchLength` counts the bytes after itself (total size = batchLength + 12). The CRC-32C
covers everything from `attributes` to the end, so the store may rewrite baseOffset and
partitionLeaderEpoch without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from crossbeat.stream.errors import CorruptBatch

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
CRC_START = 21  # first byte covered by the CRC (attributes)
MAGIC = 2
# Enough of the header to walk a log: base, length, magic, attributes, lastOffsetDelta.
WALK = struct.Struct(">qi4xb4xhi")
WALK_SIZE = WALK.size  # 27

ReadAt = Callable[[int, int], bytes]
"""A pread-like callable: read(n, position) -> up to n bytes."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The parsed 61-byte header of one RecordBatch v2."""

    base_offset: int
    length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire and on disk."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & 0x08)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`; raises CorruptBatch when fewer than 61 bytes remain."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatch(f"truncated batch header: {len(buf) - pos} bytes, need {HEADER_SIZE}")
    return BatchHeader(*HEADER.unpack_from(buf, pos))


def check_structure(header: BatchHeader, available: int) -> None:
    """Raise CorruptBatch unless the header is sane and its batch fits in `available` bytes."""
    if header.magic != MAGIC:
        raise CorruptBatch(f"unsupported magic {header.magic} (only RecordBatch v2)")
    if header.length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatch(f"batch length {header.length} is shorter than a header")
    if header.size > available:
        raise CorruptBatch(f"batch length {header.length} runs past the data ({available} bytes)")


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """True when the CRC-32C of the batch at `pos` matches its header."""
    with memoryview(buf) as view:
        return crc32c(view[pos + CRC_START : pos + header.size]) == header.crc


def validate_batch(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Validate `buf` as exactly one RecordBatch v2 and return its header.

    Checks: at least a header, batchLength matches the buffer, magic 2, the CRC-32C,
    lastOffsetDelta >= 0 and recordCount == lastOffsetDelta + 1 (what a producer sends).
    Raises CorruptBatch describing the first failure.
    """
    header = parse_header(buf)
    check_structure(header, len(buf))
    if header.size != len(buf):
        raise CorruptBatch(f"batch length {header.length} does not match {len(buf)} bytes given")
    if not crc_ok(buf, 0, header):
        raise CorruptBatch("batch CRC-32C mismatch")
    if header.last_offset_delta < 0 or header.record_count != header.last_offset_delta + 1:
        raise CorruptBatch(
            f"record count {header.record_count} does not match last offset delta "
            f"{header.last_offset_delta}"
        )
    return header


def assign(buf: bytearray, base_offset: int, leader_epoch: int) -> None:
    """Write baseOffset and partitionLeaderEpoch in place (both lie outside the CRC)."""
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a verifying scan found: the valid prefix and where each batch starts."""

    valid_bytes: int
    next_offset: int
    positions: list[int]
    headers: list[BatchHeader]
    error: str | None  # why the scan stopped before the end, None when all bytes were valid


class Scanner:
    """Walk the batches in `buf`, yielding (position, header) of each valid one, in order.

    A batch is valid when its header is sane, it fits in `buf`, its CRC matches (unless
    `verify_crc` is False) and its base offset continues the previous batch (or equals
    `expected_base` for the first one). Never raises on bad data: after iterating,
    `valid_bytes` is the length of the valid prefix (recovery truncates to it), `next_offset`
    the offset after its last batch and `error` why the walk stopped early (None at the end).
    """

    def __init__(
        self,
        buf: bytes | bytearray | memoryview,
        expected_base: int | None = None,
        *,
        verify_crc: bool = True,
    ) -> None:
        self._buf = buf
        self._verify_crc = verify_crc
        self.valid_bytes = 0
        self.next_offset = expected_base
        self.error: str | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        buf = self._buf
        size = len(buf)
        pos = 0
        while pos < size:
            try:
                header = parse_header(buf, pos)
                check_structure(header, size - pos)
            except CorruptBatch as exc:
                self.error = f"at byte {pos}: {exc}"
                return
            if header.last_offset_delta < 0:
                self.error = f"at byte {pos}: negative last offset delta"
                return
            if self.next_offset is not None and header.base_offset != self.next_offset:
                self.error = (
                    f"at byte {pos}: base offset {header.base_offset}, expected {self.next_offset}"
                )
                return
            if self._verify_crc and not crc_ok(buf, pos, header):
                self.error = f"at byte {pos}: CRC-32C mismatch"
                return
            yield pos, header
            pos += header.size
            self.valid_bytes = pos
            self.next_offset = header.next_offset


def scan(
    buf: bytes | bytearray | memoryview,
    expected_base: int | None = None,
    *,
    verify_crc: bool = True,
) -> ScanResult:
    """Run a `Scanner` over `buf` and collect what it found."""
    scanner = Scanner(buf, expected_base, verify_crc=verify_crc)
    positions: list[int] = []
    headers: list[BatchHeader] = []
    for pos, header in scanner:
        positions.append(pos)
        headers.append(header)
    next_offset = scanner.next_offset if scanner.next_offset is not None else 0
    return ScanResult(scanner.valid_bytes, next_offset, positions, headers, scanner.error)


TRANSACTIONAL = 0x10  # attributes bit: a transactional batch (KIP-98); control batches have it too


def iter_batch_positions(
    read: ReadAt, start: int, end: int, chunk: int = 8192, attributes: int = 0
) -> Iterator[tuple[int, int, int, int]]:
    """Yield (position, base_offset, size, next_offset) of each batch in [start, end), or,
    with `attributes`, of each batch that has one of those attribute bits.

    `read(n, pos)` is a pread-like callable. Reads `chunk` bytes at a time so that walking
    many small batches costs few system calls, and big batches cost one small read each.
    Stops (without raising) at the first header that does not parse or fit.
    """
    buf = b""
    buf_pos = start
    pos = start
    while pos + WALK_SIZE <= end:
        rel = pos - buf_pos
        if rel < 0 or rel + WALK_SIZE > len(buf):
            buf = read(min(chunk, end - pos), pos)
            buf_pos = pos
            rel = 0
            if len(buf) < WALK_SIZE:
                return
        base, length, magic, attrs, last_delta = WALK.unpack_from(buf, rel)
        size = length + LOG_OVERHEAD
        if magic != MAGIC or length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            return
        if not attributes or attrs & attributes:
            yield pos, base, size, base + last_delta + 1
        pos += size

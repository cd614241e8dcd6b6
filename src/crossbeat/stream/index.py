"""Sparse offset and time indexes of one segment, kept in memory and saved beside it.

Offset index file (`.index`): entries of (offset - segment base: u32, position: u32), one per
`index_interval_bytes` of batches, in increasing order. Time index file (`.timeindex`):
entries of (running max timestamp: i64, offset - base: u32, position: u32); the running max
never decreases, and a closed segment's time index always ends with an entry for its last
batch carrying the segment's max timestamp (the "final entry"), which is how a stale index
is told from a complete one.

Index files are derived data: they are written when a segment is closed (rolled, sealed,
store closed) and rebuilt from the segment whenever they are missing or do not match it.
"""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qII")


class OffsetIndex:
    """Batch base offset → file position, sparse."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.offsets: list[int] = []  # absolute base offsets of indexed batches
        self.positions: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, offset: int, position: int) -> None:
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before `offset` (0 if none)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def entry_at_or_before(self, k: int) -> int:
        """Position of index entry `k` clamped into range (0 when the index is empty)."""
        if not self.positions or k < 0:
            return 0
        return self.positions[min(k, len(self.positions) - 1)]

    def encode(self) -> bytes:
        base = self.base_offset
        return b"".join(
            _OFFSET_ENTRY.pack(o - base, p)
            for o, p in zip(self.offsets, self.positions, strict=True)
        )

    @classmethod
    def decode(cls, base_offset: int, data: bytes, segment_size: int) -> OffsetIndex | None:
        """Parse an index file; None when it is malformed or points outside the segment."""
        if len(data) % _OFFSET_ENTRY.size:
            return None
        index = cls(base_offset)
        last_offset, last_pos = -1, -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_offset or pos <= last_pos or pos >= segment_size:
                return None
            index.add(base_offset + rel, pos)
            last_offset, last_pos = rel, pos
        return index


class TimeIndex:
    """Running max timestamp → (offset, position) of the batch where it was reached, sparse."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.timestamps: list[int] = []
        self.offsets: list[int] = []
        self.positions: list[int] = []

    def __len__(self) -> int:
        return len(self.timestamps)

    def add(self, timestamp: int, offset: int, position: int) -> None:
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        self.positions.append(position)

    def scan_start(self, timestamp: int) -> int:
        """Position from which to scan for the first batch with max timestamp >= `timestamp`.

        Every batch up to and including the last entry whose running max is below
        `timestamp` has a smaller max timestamp, so scanning may start at that entry.
        """
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.positions[i] if i >= 0 else 0

    def encode(self) -> bytes:
        base = self.base_offset
        return b"".join(
            _TIME_ENTRY.pack(t, o - base, p)
            for t, o, p in zip(self.timestamps, self.offsets, self.positions, strict=True)
        )

    @classmethod
    def decode(cls, base_offset: int, data: bytes, segment_size: int) -> TimeIndex | None:
        if len(data) % _TIME_ENTRY.size:
            return None
        index = cls(base_offset)
        last_ts, last_offset, last_pos = -(2**63), -1, -1
        for ts, rel, pos in _TIME_ENTRY.iter_unpack(data):
            if ts < last_ts or rel < last_offset or pos < last_pos or pos >= segment_size:
                return None
            index.add(ts, base_offset + rel, pos)
            last_ts, last_offset, last_pos = ts, rel, pos
        return index


def read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None

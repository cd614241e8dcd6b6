"""Transaction markers (KIP-98): the COMMIT/ABORT control batches a coordinator writes.

A control batch is a RecordBatch v2 with the transactional (0x10) and control (0x20)
attribute bits, the producer's id and epoch, base sequence -1 and exactly one record whose
key is ``version i16 (0) | type i16 (0 abort, 1 commit)`` and whose value is
``version i16 (0) | coordinator epoch i32``. It is never compressed.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from crossbeat.stream.batch import CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD

ABORT, COMMIT = 0, 1
ATTRIBUTES = 0x10 | 0x20  # transactional | control


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def control_batch(producer_id: int, producer_epoch: int, commit: bool, timestamp_ms: int,
                  coordinator_epoch: int = 0) -> bytearray:
    """A control batch marking the end (commit or abort) of a producer's transaction; its
    base offset is 0 (the store assigns the real one)."""
    key = struct.pack(">hh", 0, COMMIT if commit else ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = (b"\x00" + _varint(0) + _varint(0) + _varint(len(key)) + key
            + _varint(len(value)) + value + _varint(0))
    record = _varint(len(body)) + body
    buf = bytearray(HEADER_SIZE + len(record))
    HEADER.pack_into(buf, 0, 0, HEADER_SIZE - LOG_OVERHEAD + len(record), -1, 2, 0, ATTRIBUTES,
                     0, timestamp_ms, timestamp_ms, producer_id, producer_epoch, -1, 1)
    buf[HEADER_SIZE:] = record
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return buf


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        byte = buf[pos]
        pos += 1
        z |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7


def control_type(batch: bytes | memoryview) -> int | None:
    """The control type of a stored control batch (COMMIT, ABORT, or another Kafka type),
    None when its first record cannot be read."""
    try:
        pos = HEADER_SIZE
        _length, pos = _read_varint(batch, pos)
        pos += 1  # record attributes
        _ts, pos = _read_varint(batch, pos)
        _delta, pos = _read_varint(batch, pos)
        key_len, pos = _read_varint(batch, pos)
        if key_len < 4:
            return None
        (kind,) = struct.unpack_from(">h", batch, pos + 2)
        return int(kind)
    except (IndexError, struct.error):
        return None

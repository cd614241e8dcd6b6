"""A topic's `compression.type` applied to produced batches, as Kafka's broker applies it.

With `producer` (the default) a batch is stored exactly as produced and nothing here runs.
With a codec name (`uncompressed` = none, `gzip`, `snappy`, `lz4`, `zstd`), a batch whose
codec differs is decoded and rebuilt with that codec before it is appended, as Kafka's
`LogValidator` does, so consumers read the topic's codec whatever the producer used:

- the records keep their keys, values, headers and timestamps; their offset deltas become
  0..n-1 (Kafka assigns them afresh when it rebuilds a batch);
- the batch keeps its base offset, partition leader epoch, producer id and epoch, base
  sequence and its timestamp-type, transactional and control attributes; only the codec
  bits change. Base and max timestamp are those of the records, as Kafka recomputes them;
- the batch is compressed with the topic's codec even when that does not make it smaller
  (kafka-python's builder would fall back to none; Kafka's broker never does).

Records are decoded and encoded with kafka-python's record module and `kafka.codec`; which
codecs can be written depends on the libraries installed (`missing_codec_library`), so a
topic asking for one the broker cannot write is refused at CreateTopics.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

import kafka.codec as codecs
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from crossbeat.errors import CrossbeatError
from crossbeat.stream.batch import CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from crossbeat.stream.errors import CorruptBatch

PRODUCER = "producer"

CODECS: dict[str, int] = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
"""`compression.type` value -> the codec id in a RecordBatch's attributes (bits 0-2)."""

_CODEC_MASK = 0x07
_CRC_AT = 17  # baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8
_NAMES = {codec: name for name, codec in CODECS.items()}

# codec id -> (is its library installed, the package that provides it)
_AVAILABLE: dict[int, tuple[Callable[[], bool], str]] = {
    1: (codecs.has_gzip, "the standard library's gzip"),
    2: (codecs.has_snappy, "python-snappy"),
    3: (codecs.has_lz4, "lz4"),
    4: (codecs.has_zstd, "zstandard"),
}

_ENCODERS: dict[int, Callable[[bytes], bytes]] = {
    # Kafka's default compression.gzip.level is zlib's default (6); kafka.codec's is 9,
    # several times slower for a few percent
    1: functools.partial(codecs.gzip_encode, compresslevel=6),
    # xerial framing, as Kafka's own SnappyOutputStream writes (every client reads it)
    2: codecs.snappy_encode,
    3: lambda data: codecs.lz4_encode(data),  # looked up at call time: None without lz4
    4: codecs.zstd_encode,
}


class CodecUnavailable(CrossbeatError):
    """A batch needs a codec whose library is not installed (to read it or to write it)."""


def target_codec(configs: dict[str, str]) -> int | None:
    """The codec id batches of a topic with `configs` are stored in, or None to keep each
    batch's own (`producer`, the default, or a value CreateTopics would have refused)."""
    return CODECS.get(configs.get("compression.type", PRODUCER))


def missing_codec_library(compression_type: str) -> str | None:
    """None when the broker can write `compression_type` (or it is `producer` or not a
    codec name at all); otherwise which package it lacks, for the client's message."""
    codec = CODECS.get(compression_type)
    if codec is None or codec not in _AVAILABLE:
        return None
    installed, package = _AVAILABLE[codec]
    return None if installed() else package


def _require(codec: int, purpose: str) -> None:
    if codec in _AVAILABLE and not _AVAILABLE[codec][0]():
        raise CodecUnavailable(f"cannot {purpose} {_NAMES[codec]}: the broker lacks "
                               f"{_AVAILABLE[codec][1]}")


def recompress(batch: bytes | bytearray | memoryview, header: BatchHeader, codec: int) -> bytearray:
    """Rebuild the validated RecordBatch v2 `batch` (whose parsed header is `header`) with
    codec id `codec`, keeping what the module docstring lists.

    Raises CorruptBatch when its records cannot be decoded (bad compressed data, records
    that do not match the header's count, malformed record fields), and CodecUnavailable
    when the batch's codec or `codec` needs a library that is not installed.
    """
    if header.compression not in _NAMES:
        raise CorruptBatch(f"unknown compression codec {header.compression}")
    _require(header.compression, "read")
    _require(codec, "write")
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=header.is_transactional,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, batch_size=2**31 - 1)
    try:
        # any failure of a decompressor or of the record parser means bytes we cannot read:
        # each library raises its own types (zlib.error, EOFError, RuntimeError, ZstdError,
        # kafka's CorruptRecordError, UnicodeDecodeError for a header key...)
        for delta, record in enumerate(DefaultRecordBatch(bytes(batch))):
            builder.append(delta, timestamp=record.timestamp, key=record.key,
                           value=record.value, headers=record.headers)
    except Exception as exc:
        raise CorruptBatch(f"cannot decode the {_NAMES[header.compression]} records of the "
                           f"batch: {exc}") from exc
    plain = builder.build()  # uncompressed: kafka-python only compresses what shrinks
    built = HEADER.unpack_from(plain)
    records = bytes(memoryview(plain)[HEADER_SIZE:])
    if codec != 0:
        records = _ENCODERS[codec](records)
    out = bytearray(HEADER_SIZE + len(records))
    HEADER.pack_into(
        out, 0,
        header.base_offset,
        len(out) - LOG_OVERHEAD,
        header.leader_epoch,
        2,
        0,  # CRC, below
        (header.attributes & ~_CODEC_MASK) | codec,
        built[6],  # lastOffsetDelta = count - 1
        built[7],  # base timestamp: the first record's
        built[8],  # max timestamp
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        built[12],  # record count
    )
    out[HEADER_SIZE:] = records
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[CRC_START:]))
    return out

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

Decoding is bounded: a few KiB of gzip, snappy, lz4 or zstd can claim or expand to GiBs (a
decompression bomb), and all of this runs in memory on the broker's event loop. The records
are therefore decompressed here, in chunks, with an explicit output limit (the caller's
`max_decoded_bytes`, measured as the batch would be uncompressed: header + records), and
decompression stops with `DecodedTooLarge` as soon as the output would pass it: each
decompressor is asked for at most one byte more than the room left (a snappy block's stated
length is checked before it is decompressed), so the output never holds more than the
limit, whatever the compressed data or its headers claim; the decompressors' own buffers
(zlib's and gzip's read-ahead, an lz4 block, a zstd window) are bounded by their formats.
Only then are the records handed, uncompressed, to kafka-python's parser.
"""

from __future__ import annotations

import functools
import gzip
import io
import struct
from collections.abc import Callable
from typing import Protocol, cast

import kafka.codec as codecs

# Imported here, once, not where used: check_records runs on worker threads for large
# batches, and two threads importing aiokafka's (circular) package at once failed with
# "cannot import name 'MemoryRecords' from partially initialized module" (a produce after
# a start, under load).
from aiokafka.errors import CorruptRecordException
from aiokafka.record._crecords import DefaultRecordBatch as CRecordBatch
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
_ATTRIBUTES_AT = CRC_START
_CHUNK = 1 << 20  # largest piece a decompressor is asked for at once
_XERIAL_MAGIC = b"\x82SNAPPY\x00"  # kafka.codec's _XERIAL_V1_HEADER; version fields ignored
_NAMES = {codec: name for name, codec in CODECS.items()}

# codec id -> (is its library installed, the package that provides it)
_AVAILABLE: dict[int, tuple[Callable[[], bool], str]] = {
    1: (codecs.has_gzip, "the standard library's gzip"),
    2: (codecs.has_snappy, "python-snappy"),
    # kafka.codec.has_lz4 also counts the lz4f and lz4framed packages; reading in bounded
    # pieces needs lz4.frame's LZ4FrameDecompressor (the lz4 package, our dependency)
    3: (lambda: codecs.lz4 is not None, "lz4"),
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


class InvalidRecords(CorruptBatch):
    """A batch whose bytes decode (its CRC holds, its records decompress) but whose records
    are not what its header says: not records at all, fewer or more than its count, offset
    deltas that are not 0..n-1, bytes after the last record, a header key that is not
    UTF-8. Kafka answers these INVALID_RECORD (its `DefaultRecord.readFrom`, `LogValidator`)."""


class InvalidTimestamp(InvalidRecords):
    """A batch holding CreateTime records whose timestamps are outside the topic's bounds
    (`message.timestamp.before.max.ms` / `after.max.ms`): INVALID_TIMESTAMP. As Kafka's
    `LogValidator` (`validateTimestamp`, `processRecordErrors`): every such record is
    named in `records` (its index in the batch, Kafka's message for it), under one
    message for the batch."""

    def __init__(self, records: list[tuple[int, str]]) -> None:
        super().__init__("One or more records have been rejected due to invalid timestamp")
        self.records = records


class _Timestamps:
    """The records of one batch whose timestamps are outside `window` (lowest, highest
    accepted, ms), gathered on the walk of its records: Kafka names them all. A record
    without a timestamp (-1) is not checked, as in Kafka."""

    def __init__(self, window: tuple[int, int] | None) -> None:
        self.low, self.high = window if window is not None else (-(2**63), 2**63 - 1)
        self.bad: list[tuple[int, str]] = []

    def check(self, timestamp: int, index: int) -> None:
        low, high = self.low, self.high
        if timestamp != -1 and not low <= timestamp <= high:
            self.bad.append((index, f"Timestamp {timestamp} of message with offset {index} is "
                                    f"out of range. The timestamp should be within [{low}, {high}]"))

    def raise_any(self) -> None:
        if self.bad:
            raise InvalidTimestamp(self.bad)


class DecodedTooLarge(CrossbeatError):
    """A batch's records, decompressed, are larger than the limit they were decoded under.

    Raised as soon as the output would pass the limit, so at most the limit (and one more
    byte) was decompressed and nothing was rebuilt."""


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


class _Output:
    """The decoded batch being filled: the source header with the codec bits cleared, then
    the decompressed records, refusing to grow past `limit` bytes in all."""

    def __init__(self, header: bytes | bytearray | memoryview, limit: int) -> None:
        self.buf = bytearray(header)
        (attributes,) = struct.unpack_from(">h", self.buf, _ATTRIBUTES_AT)
        struct.pack_into(">h", self.buf, _ATTRIBUTES_AT, attributes & ~_CODEC_MASK)
        self.limit = limit

    @property
    def room(self) -> int:
        """Bytes that may still be added; asking a decompressor for one more than this is
        how an overflow is noticed without decompressing further."""
        return self.limit - len(self.buf)

    def next_size(self) -> int:
        return min(_CHUNK, self.room + 1)

    def add(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) > self.room:
            raise self.too_large()
        self.buf += data

    def too_large(self, why: str = "") -> DecodedTooLarge:
        return DecodedTooLarge(f"the batch decompresses to more than {self.limit} bytes "
                               f"(header and records), the most the broker decodes{why}")


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _read_all(reader: _Reader, out: _Output) -> None:
    """Drain `reader`, whose read(n) returns at most n bytes and b"" at the end, into `out`."""
    while chunk := reader.read(out.next_size()):
        out.add(chunk)


def _gunzip(data: memoryview, out: _Output) -> None:
    # the reader kafka.codec.gzip_decode uses (several members, zero padding), read in
    # bounded pieces: GzipFile.read(n) inflates at most n bytes per call
    with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as reader:
        _read_all(reader, out)


def _unzstd(data: memoryview, out: _Output) -> None:
    # as kafka.codec.zstd_decode (every frame), read in bounded pieces. A frame's header may
    # announce any content size or window: the stream reader allocates neither up front
    # beyond zstd's own window limit (128 MiB by default, touched only as output is written)
    decompressor = codecs.zstd.ZstdDecompressor()
    with decompressor.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
        _read_all(reader, out)


def _unlz4(data: memoryview, out: _Output) -> None:
    # one frame, what follows it ignored, as lz4.frame.decompress (kafka.codec.lz4_decode)
    # and Kafka's KafkaLZ4BlockInputStream read it. decompress() without max_length would
    # allocate whatever content size the frame header claims
    decompressor = codecs.lz4.LZ4FrameDecompressor()
    out.add(decompressor.decompress(data, max_length=out.next_size()))
    while not decompressor.eof:
        chunk = decompressor.decompress(b"", max_length=out.next_size())
        if not chunk and decompressor.needs_input:
            raise CorruptBatch("lz4 frame is truncated")
        out.add(chunk)


def _varint32(data: memoryview) -> int:
    """The little-endian base-128 length a raw snappy block starts with."""
    value = 0
    for i in range(min(5, len(data))):
        value |= (data[i] & 0x7F) << (7 * i)
        if not data[i] & 0x80:
            return value
    raise CorruptBatch("snappy block has no valid uncompressed length")


def _unsnappy_block(block: memoryview, out: _Output) -> None:
    # snappy's decoder allocates the uncompressed length the block header states before it
    # reads anything else: check that claim against the room left first
    claimed = _varint32(block)
    if claimed > out.room:
        raise out.too_large(f": a snappy block claims {claimed} bytes, {out.room} are left")
    out.add(codecs.snappy.decompress(bytes(block)))


def _unsnappy(data: memoryview, out: _Output) -> None:
    # as kafka.codec.snappy_decode: xerial framing (16-byte header, then blocks of a
    # big-endian i32 length and a raw snappy block), or else one raw snappy block
    if not (len(data) > 16 and data[:8] == _XERIAL_MAGIC):
        _unsnappy_block(data, out)
        return
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptBatch("xerial snappy block length is truncated")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptBatch(f"xerial snappy block of {size} bytes does not fit the batch")
        _unsnappy_block(data[pos:pos + size], out)
        pos += size


_DECODERS: dict[int, Callable[[memoryview, _Output], None]] = {
    1: _gunzip,
    2: _unsnappy,
    3: _unlz4,
    4: _unzstd,
}


def _decoded(batch: bytes | bytearray | memoryview, header: BatchHeader, limit: int) -> bytearray:
    """`batch` as it would be uncompressed (codec bits cleared, records decompressed), at
    most `limit` bytes; raises DecodedTooLarge past it and CorruptBatch for bad data."""
    view = memoryview(batch)[:header.size]
    out = _Output(view[:HEADER_SIZE], limit)
    records = view[HEADER_SIZE:]
    if header.compression == 0:
        out.add(records)
        return out.buf
    try:
        _DECODERS[header.compression](records, out)
    except (DecodedTooLarge, CorruptBatch):
        raise
    except Exception as exc:
        # each library raises its own types (zlib.error, EOFError, gzip.BadGzipFile,
        # RuntimeError, ZstdError, snappy's UncompressError...): all mean unreadable bytes
        raise CorruptBatch(f"cannot decode the {_NAMES[header.compression]} records of the "
                           f"batch: {exc}") from exc
    return out.buf


def recompress(batch: bytes | bytearray | memoryview, header: BatchHeader, codec: int, *,
               max_decoded_bytes: int, require_keys: bool = False,
               timestamps: tuple[int, int] | None = None) -> bytearray:
    """Rebuild the validated RecordBatch v2 `batch` (whose parsed header is `header`) with
    codec id `codec`, keeping what the module docstring lists.

    `max_decoded_bytes` bounds the batch as it would be uncompressed (61-byte header plus
    decompressed records): past it, decoding stops and DecodedTooLarge is raised, with no
    more than that held in memory. It says nothing about the rebuilt batch, which the
    caller checks against `max.message.bytes` itself.

    Raises CorruptBatch when its records cannot be decoded (bad compressed data, records
    that do not match the header's count, malformed record fields), InvalidRecords for a
    record without a key when `require_keys` (a compacted topic's), InvalidTimestamp for a
    record timestamped outside `timestamps` (see `check_timestamp`), and CodecUnavailable
    when the batch's codec or `codec` needs a library that is not installed.
    """
    if header.compression not in _NAMES:
        raise CorruptBatch(f"unknown compression codec {header.compression}")
    _require(header.compression, "read")
    _require(codec, "write")
    plain_source = DefaultRecordBatch(_decoded(batch, header, max_decoded_bytes))
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=header.is_transactional,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, batch_size=2**31 - 1)
    times = _Timestamps(timestamps)
    keyless: InvalidRecords | None = None
    try:
        # any failure of the record parser means records that are not records (kafka's
        # CorruptRecordError, UnicodeDecodeError for a header key...)
        for delta, record in enumerate(plain_source):
            if require_keys and record.key is None:
                # Kafka goes on to the other records' timestamps: any bad one makes the
                # batch's answer INVALID_TIMESTAMP
                keyless = _keyless()
                if timestamps is None:
                    raise keyless
            elif timestamps is not None:
                times.check(record.timestamp, delta)
            builder.append(delta, timestamp=record.timestamp, key=record.key,
                           value=record.value, headers=record.headers)
    except InvalidRecords:
        raise
    except Exception as exc:
        raise InvalidRecords(f"cannot decode the {_NAMES[header.compression]} records of the "
                             f"batch: {exc}") from exc
    times.raise_any()
    if keyless is not None:
        raise keyless
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


def _keyless() -> InvalidRecords:
    # Kafka's LogValidator message; a compacted log is keyed by record key
    return InvalidRecords("Compacted topic cannot accept message without key")


def check_records(batch: bytes | bytearray | memoryview, header: BatchHeader, *,
                  max_decoded_bytes: int, require_keys: bool = False,
                  timestamps: tuple[int, int] | None = None) -> None:
    """Raise unless every record of the validated RecordBatch v2 `batch` parses: exactly the
    header's count of them, with offset deltas 0..n-1 and nothing after the last. A
    compressed batch is decompressed for it, bounded as `recompress` is (DecodedTooLarge).

    What a batch stored as produced gets, as Kafka's broker walks every record of every
    batch it appends: a batch whose CRC holds but whose records are garbage was stored, and
    every consumer stopped at it (librdkafka silently, for good). Raises InvalidRecords
    (also for a record without a key when `require_keys`: a compacted topic's, as Kafka;
    InvalidTimestamp for a record timestamped outside `timestamps`), CorruptBatch (records that do not decompress), CodecUnavailable. The walk is
    aiokafka's C parser: about 0.1 us a record (0.13-0.33 with zstd or lz4 decompression).
    """
    if header.compression not in _NAMES:
        raise CorruptBatch(f"unknown compression codec {header.compression}")
    plain: bytes | bytearray | memoryview = memoryview(batch)[:header.size]
    if header.compression != 0:
        _require(header.compression, "read")
        plain = _decoded(batch, header, max_decoded_bytes)
    count = 0
    times = _Timestamps(timestamps)
    keyless: InvalidRecords | None = None
    try:
        # the parser reads any buffer (its stub says bytes): no copy of the batch
        for count, record in enumerate(CRecordBatch(cast(bytes, plain)), start=1):
            if record.offset != header.base_offset + count - 1:
                raise InvalidRecords(f"record {count - 1} of the batch has offset delta "
                                     f"{record.offset - header.base_offset}")
            if require_keys and record.key is None:
                keyless = _keyless()  # as in `recompress`
                if timestamps is None:
                    raise keyless
            elif timestamps is not None:
                times.check(record.timestamp, count - 1)
    except CorruptRecordException as exc:
        raise InvalidRecords(f"invalid record structure: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidRecords(f"a record header key is not UTF-8: {exc}") from exc
    if count != header.record_count:
        raise InvalidRecords(f"the batch holds {count} records, its header says "
                             f"{header.record_count}")
    times.raise_any()
    if keyless is not None:
        raise keyless


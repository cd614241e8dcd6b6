"""Rebuilding a batch in a topic's compression.type: every codec pair, what the batch keeps,
undecodable records, a codec whose library is missing (refused at CreateTopics), and the
decoding limit: decompression bombs of every codec stop at it without allocating what they
expand to, and a batch exactly at it is rebuilt."""

from __future__ import annotations

import functools
import gzip
import itertools
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import kafka.codec
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from crossbeat.broker.recompress import (
    CODECS,
    CodecUnavailable,
    DecodedTooLarge,
    missing_codec_library,
    recompress,
    target_codec,
)
from crossbeat.stream import parse_header
from crossbeat.stream.batch import CRC_START, validate_batch
from crossbeat.stream.errors import CorruptBatch
from tests.unit.broker.conftest import LoopBroker

T0 = 1_700_000_000_000
RECORDS: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (T0 + 5, b"k0", b"first " * 40, [("trace", b"abc"), ("empty", b""), ("none", None)]),
    (T0, None, b"no key, timestamp before the first", []),
    (T0 + 900, b"k2", None, [("h", b"\x00\xff")]),  # a tombstone
    (T0 + 7, b"", b"empty key", [("\u00e9t\u00e9", b"unicode key")]),
]
ATTRIBUTES_OFFSET = 21
PID, EPOCH, SEQ = 4242, 3, 17
UNBOUNDED = 1 << 40  # for tests not about the decoding limit


def fix_crc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return buf


def source(codec: int, records: list[Any] = RECORDS, attributes: int = 0) -> bytearray:
    """A producer-style batch (base offset 0, deltas 0..n-1) of `records` in `codec`, with
    extra attribute bits `attributes` set."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=PID, producer_epoch=EPOCH, base_sequence=SEQ,
                                  batch_size=1 << 20)
    for delta, (ts, key, value, headers) in enumerate(records):
        b.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = b.build()
    if attributes:
        (attrs,) = struct.unpack_from(">h", buf, ATTRIBUTES_OFFSET)
        struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attrs | attributes)
        fix_crc(buf)
    if codec:
        buf = recompress(buf, parse_header(buf), codec, max_decoded_bytes=UNBOUNDED)
    assert parse_header(buf).compression == codec
    return buf


def decoded(buf: bytearray) -> list[tuple[int, int, bytes | None, bytes | None, list[Any]]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in DefaultRecordBatch(bytes(buf))]


EXPECTED = [(i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(RECORDS)]


@pytest.mark.parametrize(("src", "dst"), [
    pair for pair in itertools.product(CODECS.values(), repeat=2) if pair[0] != pair[1]])
def test_every_codec_pair_keeps_records_and_producer_fields(src: int, dst: int) -> None:
    original = source(src)
    out = recompress(original, parse_header(original), dst, max_decoded_bytes=UNBOUNDED)

    header = validate_batch(out)  # lengths, CRC-32C, count vs last delta
    assert header.compression == dst
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, SEQ)
    assert (header.record_count, header.last_offset_delta) == (len(RECORDS), len(RECORDS) - 1)
    assert header.base_timestamp == RECORDS[0][0]
    assert header.max_timestamp == max(r[0] for r in RECORDS)
    assert not header.is_log_append_time and not header.is_transactional
    assert decoded(out) == EXPECTED


@pytest.mark.parametrize("dst", [c for c in CODECS.values() if c])
def test_incompressible_batch_still_gets_the_codec(dst: int) -> None:
    # kafka-python's own builder would store this uncompressed: compression makes it bigger
    tiny = source(0, [(T0, None, b"x", [])])
    out = recompress(tiny, parse_header(tiny), dst, max_decoded_bytes=UNBOUNDED)
    assert len(out) > len(tiny)
    assert validate_batch(out).compression == dst
    assert decoded(out) == [(0, T0, None, b"x", [])]


def test_timestamp_type_and_transactional_bits_are_kept() -> None:
    original = source(0, attributes=0x08 | 0x10)  # LogAppendTime, transactional
    out = recompress(original, parse_header(original), CODECS["gzip"], max_decoded_bytes=UNBOUNDED)
    header = validate_batch(out)
    assert (header.is_log_append_time, header.is_transactional, header.is_control) == (
        True, True, False)
    assert header.compression == CODECS["gzip"]
    # a LogAppendTime batch's records all read as its max timestamp, before and after
    assert header.max_timestamp == parse_header(original).max_timestamp
    assert decoded(out) == decoded(original)


def test_base_offset_and_leader_epoch_are_kept() -> None:
    original = source(0)
    struct.pack_into(">qii", original, 0, 77, len(original) - 12, 9)
    out = recompress(original, parse_header(original), CODECS["lz4"], max_decoded_bytes=UNBOUNDED)
    header = validate_batch(out)
    assert (header.base_offset, header.leader_epoch) == (77, 9)
    assert [r[0] for r in decoded(out)] == [77, 78, 79, 80]


def test_undecodable_compressed_data_is_corrupt() -> None:
    gz = source(CODECS["gzip"])
    gz[70:80] = b"\xff" * 10  # inside the deflate stream
    with pytest.raises(CorruptBatch, match="cannot decode the gzip records"):
        recompress(fix_crc(gz), parse_header(gz), CODECS["zstd"], max_decoded_bytes=UNBOUNDED)


def test_records_missing_behind_the_header_count_are_corrupt() -> None:
    plain = source(0)
    # claim one more record than the batch holds, consistently in both header fields
    struct.pack_into(">i", plain, 23, len(RECORDS))
    struct.pack_into(">i", plain, 57, len(RECORDS) + 1)
    validate_batch(fix_crc(plain))
    with pytest.raises(CorruptBatch):
        recompress(plain, parse_header(plain), CODECS["snappy"], max_decoded_bytes=UNBOUNDED)


def test_target_codec() -> None:
    assert target_codec({}) is None
    assert target_codec({"compression.type": "producer"}) is None
    assert target_codec({"compression.type": "uncompressed"}) == 0
    assert target_codec({"compression.type": "zstd"}) == 4


def test_missing_library_refuses_the_codec_to_write_and_read(monkeypatch: pytest.MonkeyPatch) -> None:
    assert missing_codec_library("zstd") is None  # installed by the project's dependencies
    zstd = source(CODECS["zstd"])
    monkeypatch.setattr(kafka.codec, "zstd", None)
    assert missing_codec_library("zstd") == "zstandard"
    assert missing_codec_library("gzip") is None
    assert missing_codec_library("producer") is None
    plain = source(0)
    with pytest.raises(CodecUnavailable, match="cannot write zstd: the broker lacks zstandard"):
        recompress(plain, parse_header(plain), CODECS["zstd"], max_decoded_bytes=UNBOUNDED)
    with pytest.raises(CodecUnavailable, match="cannot read zstd"):
        recompress(zstd, parse_header(zstd), CODECS["gzip"], max_decoded_bytes=UNBOUNDED)


def test_create_topics_refuses_a_codec_without_its_library(
        loop_broker: LoopBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka.codec, "snappy", None)  # the broker runs in this process
    admin = AdminClient({"bootstrap.servers": loop_broker.address})
    futures = admin.create_topics(
        [NewTopic("snappy-topic", 1, 1, config={"compression.type": "snappy"}),
         NewTopic("gzip-topic", 1, 1, config={"compression.type": "gzip"})],
        operation_timeout=10)
    with pytest.raises(Exception, match="compression.type snappy is not available on this "
                                        "broker: it needs python-snappy") as info:
        futures["snappy-topic"].result(timeout=20)
    assert info.value.args[0].name() == "INVALID_CONFIG"
    futures["gzip-topic"].result(timeout=20)
    assert set(admin.list_topics(timeout=10).topics) == {"gzip-topic"}


# --- the decoding limit ---------------------------------------------------------------------

LIMIT = 1 << 20
BOMB = 64 << 20  # what the bombs below expand to: 64 times LIMIT
COMPRESSED = [c for c in CODECS.values() if c]


def with_records(batch: bytearray, codec: int, records: bytes) -> bytearray:
    """`batch`'s header with `records` as its (compressed) records, codec bits `codec`, and
    length and CRC to match."""
    out = bytearray(batch[:61]) + records
    struct.pack_into(">i", out, 8, len(out) - 12)
    (attrs,) = struct.unpack_from(">h", out, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, (attrs & ~0x07) | codec)
    return fix_crc(out)


@functools.cache
def bomb(codec: int) -> bytes:
    """A valid batch of one record whose value is BOMB zero bytes, in `codec`: a few KiB
    (snappy, whose ratio is at most ~21, some MiB) that decode to BOMB + 61 + a few bytes."""
    return bytes(source(codec, [(T0, None, bytes(BOMB), [])]))


def peak_while(call: Callable[[], object]) -> tuple[object, int]:
    """What `call` returned or raised, and the most Python memory it held at once."""
    tracemalloc.start()
    try:
        try:
            result: object = call()
        except Exception as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bomb_stops_at_the_limit_without_decoding_it_all(codec: int) -> None:
    batch = bomb(codec)
    assert len(batch) < BOMB // 20
    target = CODECS["zstd"] if codec != CODECS["zstd"] else CODECS["gzip"]
    result, peak = peak_while(
        lambda: recompress(batch, parse_header(batch), target, max_decoded_bytes=LIMIT))
    assert isinstance(result, DecodedTooLarge), result
    assert f"more than {LIMIT} bytes" in str(result)
    # decoding it all would hold BOMB (64 MiB) at least once, kafka-python's decoders twice
    assert peak < 4 * LIMIT + len(batch), peak


@pytest.mark.parametrize("codec", COMPRESSED)
def test_batch_decoding_to_exactly_the_limit_is_rebuilt(codec: int) -> None:
    # highly compressible, many records: what a legitimate producer of logs sends
    records: list[Any] = [(T0 + i, b"k%d" % (i % 10), b"INFO request served path=/api/v1/items " * 20, [])
               for i in range(1000)]  # ~0.8 MB, under source()'s batch_size
    plain = source(0, records)
    batch = source(codec, records)
    assert len(batch) * 10 < len(plain)
    target = CODECS["uncompressed"] if codec != 0 else CODECS["gzip"]
    out = recompress(batch, parse_header(batch), target, max_decoded_bytes=len(plain))
    assert [r[2:] for r in decoded(out)] == [(k, v, h) for _, k, v, h in records]
    with pytest.raises(DecodedTooLarge):
        recompress(batch, parse_header(batch), target, max_decoded_bytes=len(plain) - 1)


def test_uncompressed_batch_over_the_limit_is_refused_too() -> None:
    plain = source(0)
    assert recompress(plain, parse_header(plain), CODECS["lz4"], max_decoded_bytes=len(plain))
    with pytest.raises(DecodedTooLarge):
        recompress(plain, parse_header(plain), CODECS["lz4"], max_decoded_bytes=len(plain) - 1)


def snappy_length(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


@pytest.mark.parametrize("xerial", [False, True])
def test_snappy_block_claiming_gibs_is_refused_before_it_is_decompressed(xerial: bool) -> None:
    # a raw snappy block starts with its uncompressed length; the decoder allocates that much
    # before it reads on, so 4 GiB claimed by 5 bytes would be 4 GiB allocated
    block = snappy_length(2**32 - 1) + b"\x00" * 32
    if xerial:
        block = (b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
                 + struct.pack(">i", len(block)) + block)
    batch = with_records(source(0), CODECS["snappy"], block)
    result, peak = peak_while(
        lambda: recompress(batch, parse_header(batch), CODECS["gzip"], max_decoded_bytes=LIMIT))
    assert isinstance(result, DecodedTooLarge), result
    assert "more than 1048576 bytes" in str(result) and "claims 4294967295 bytes" in str(result)
    assert peak < LIMIT, peak


def test_gzip_members_and_zstd_frames_count_together() -> None:
    # several gzip members or zstd frames are read as one stream, as kafka.codec reads them;
    # the limit is on their sum, so splitting a bomb does not get around it
    plain = source(0)
    records = bytes(plain[61:])
    half = len(records) // 2
    two_gzip = gzip.compress(records[:half]) + gzip.compress(records[half:])
    zstd = kafka.codec.zstd.ZstdCompressor()
    two_zstd = zstd.compress(records[:half]) + zstd.compress(records[half:])
    for codec, payload in [(CODECS["gzip"], two_gzip), (CODECS["zstd"], two_zstd)]:
        batch = with_records(plain, codec, payload)
        out = recompress(batch, parse_header(batch), 0, max_decoded_bytes=len(plain))
        assert decoded(out) == EXPECTED
        with pytest.raises(DecodedTooLarge):
            recompress(batch, parse_header(batch), 0, max_decoded_bytes=len(plain) - 1)


def test_truncated_lz4_frame_is_corrupt() -> None:
    lz4 = source(CODECS["lz4"])
    batch = with_records(lz4, CODECS["lz4"], bytes(lz4[61:-20]))
    with pytest.raises(CorruptBatch, match="lz4"):
        recompress(batch, parse_header(batch), 0, max_decoded_bytes=LIMIT)


def test_the_record_parser_is_imported_with_the_module_not_by_concurrent_first_uses() -> None:
    """check_records runs on worker threads for large batches; two threads importing
    aiokafka's circular package at once failed ("cannot import name 'MemoryRecords' from
    partially initialized module"): the first large produces after a start, under load, had
    their connection closed. The parser is imported with the module, on one thread."""
    import subprocess
    import sys

    probe = ("import sys, crossbeat.broker.recompress; "
             "print('aiokafka.record._crecords' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"

"""Rebuilding a batch in a topic's compression.type: every codec pair, what the batch keeps,
undecodable records, and a codec whose library is missing (refused at CreateTopics)."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import kafka.codec
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from crossbeat.broker.recompress import (
    CODECS,
    CodecUnavailable,
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
        buf = recompress(buf, parse_header(buf), codec)
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
    out = recompress(original, parse_header(original), dst)

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
    out = recompress(tiny, parse_header(tiny), dst)
    assert len(out) > len(tiny)
    assert validate_batch(out).compression == dst
    assert decoded(out) == [(0, T0, None, b"x", [])]


def test_timestamp_type_and_transactional_bits_are_kept() -> None:
    original = source(0, attributes=0x08 | 0x10)  # LogAppendTime, transactional
    out = recompress(original, parse_header(original), CODECS["gzip"])
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
    out = recompress(original, parse_header(original), CODECS["lz4"])
    header = validate_batch(out)
    assert (header.base_offset, header.leader_epoch) == (77, 9)
    assert [r[0] for r in decoded(out)] == [77, 78, 79, 80]


def test_undecodable_compressed_data_is_corrupt() -> None:
    gz = source(CODECS["gzip"])
    gz[70:80] = b"\xff" * 10  # inside the deflate stream
    with pytest.raises(CorruptBatch, match="cannot decode the gzip records"):
        recompress(fix_crc(gz), parse_header(gz), CODECS["zstd"])


def test_records_missing_behind_the_header_count_are_corrupt() -> None:
    plain = source(0)
    # claim one more record than the batch holds, consistently in both header fields
    struct.pack_into(">i", plain, 23, len(RECORDS))
    struct.pack_into(">i", plain, 57, len(RECORDS) + 1)
    validate_batch(fix_crc(plain))
    with pytest.raises(CorruptBatch):
        recompress(plain, parse_header(plain), CODECS["snappy"])


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
        recompress(plain, parse_header(plain), CODECS["zstd"])
    with pytest.raises(CodecUnavailable, match="cannot read zstd"):
        recompress(zstd, parse_header(zstd), CODECS["gzip"])


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

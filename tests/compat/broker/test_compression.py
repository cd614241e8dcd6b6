"""A topic's compression.type is applied: batches produced (by librdkafka, also idempotent)
in another codec are stored in the topic's, every record comes back to confluent-kafka and
kafka-python unchanged, and `producer` keeps the producer's codec without decoding it.
Decoding is bounded: a decompression bomb of each codec is refused MESSAGE_TOO_LARGE,
nothing of it stored and the broker still serving, while a batch that decodes to exactly
the limit is stored.

The stored codec is read from the batches of a raw Fetch (kafka-python's protocol classes),
i.e. what every consumer receives."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from crc32c import crc32c
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tests.compat.broker.helpers import BrokerProcess, read_topic, running_broker

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

CODEC_IDS = {"uncompressed": 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CORRUPT_MESSAGE, MESSAGE_TOO_LARGE = 2, 10
T0 = 1_700_000_000_000
N = 120

Message = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def messages() -> list[Message]:
    """Keys (some null), values (compressible, random, empty, one null), headers (none,
    several, a null value) and timestamps that are not in order."""
    out: list[Message] = []
    for i in range(N):
        key = None if i % 7 == 0 else b"key-%d" % (i % 5)
        if i == 13:
            value: bytes | None = None
        elif i % 3 == 0:
            value = b"compressible %d " % i * 30
        elif i % 3 == 1:
            value = uuid.uuid4().bytes * 4
        else:
            value = b""
        headers: list[tuple[str, bytes | None]] = (
            [] if i % 4 == 0 else [("seq", b"%d" % i), ("trace", uuid.uuid4().bytes)])
        if i % 10 == 5:
            headers.append(("nothing", None))
        out.append((key, value, headers, T0 + (i * 7919) % 1000))
    return out


def create(address: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=10)
    futures[topic].result(timeout=20)


def produce(address: str, topic: str, batch: list[Message], **config: Any) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5,
                         "batch.num.messages": 25, **config})  # several batches per run
    errors: list[Any] = []
    for key, value, headers, ts in batch:
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts,
                         on_delivery=lambda err, _msg: err is not None and errors.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors


def _call(address: str, request: Any, response_cls: Any) -> Any:
    host, port = address.rsplit(":", 1)
    request.with_header(correlation_id=1, client_id="compression-test")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(1 << 16)
            assert chunk, "the broker closed the connection"
            data += chunk
    return response_cls.decode(data[4:], version=request.API_VERSION, header=True)


def stored_batches(address: str, topic: str) -> list[DefaultRecordBatch]:
    """Every batch of partition 0, as a raw Fetch returns them."""
    req_cls = FetchRequest[4]
    ft = req_cls.FetchTopic
    batches: list[DefaultRecordBatch] = []
    offset = 0
    for _ in range(100):  # bounded: each round returns at least one batch or we stop
        resp = _call(address, req_cls(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 24, isolation_level=0,
            topics=[ft(topic=topic, partitions=[ft.FetchPartition(
                partition=0, fetch_offset=offset, partition_max_bytes=1 << 24)])]),
            FetchResponse)
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0
        records = MemoryRecords(bytes(part.records or b""))
        while (batch := records.next_batch()) is not None:
            assert isinstance(batch, DefaultRecordBatch)
            assert batch.validate_crc()
            batches.append(batch)
            offset = batch.next_offset
        if offset >= part.high_watermark:
            return batches
    raise AssertionError(f"fetched only up to offset {offset}")


def kafka_python_read(address: str, topic: str, n: int) -> list[Any]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
    finally:
        consumer.close()
    return got


def assert_both_clients_read(address: str, topic: str, sent: list[Message], *,
                             log_append_window: tuple[int, int] | None = None) -> None:
    """confluent-kafka and kafka-python read back exactly `sent`, in order, at offsets
    0..n-1; with `log_append_window`, timestamps are LogAppendTime inside it instead."""
    def check_timestamp(kind: int, ts: int, expected: int) -> None:
        if log_append_window is None:
            assert (kind, ts) == (1, expected)  # CreateTime, the producer's
        else:
            assert kind == 2 and log_append_window[0] <= ts <= log_append_window[1]

    confluent = read_topic(address, topic, len(sent))
    assert [m.offset() for m in confluent] == list(range(len(sent)))
    for msg, (key, value, headers, ts) in zip(confluent, sent, strict=True):
        assert (msg.key(), msg.value(), msg.headers() or []) == (key, value, headers)
        check_timestamp(*msg.timestamp(), ts)

    plain = kafka_python_read(address, topic, len(sent))
    assert [r.offset for r in plain] == list(range(len(sent)))
    for rec, (key, value, headers, ts) in zip(plain, sent, strict=True):
        assert (rec.key, rec.value, list(rec.headers)) == (key, value, headers)
        # kafka-python numbers the types 0 (create) and 1 (log append)
        check_timestamp(rec.timestamp_type + 1, rec.timestamp, ts)


@pytest.mark.parametrize(("topic_codec", "producer_codec", "idempotent"), [
    ("gzip", "lz4", True),
    ("snappy", "none", True),
    ("lz4", "zstd", False),
    ("zstd", "gzip", True),
    ("uncompressed", "snappy", True),
])
def test_batches_are_stored_in_the_topics_codec(
        broker: BrokerProcess, topic_name: str, topic_codec: str, producer_codec: str,
        idempotent: bool) -> None:
    create(broker.address, topic_name, **{"compression.type": topic_codec})
    sent = messages()
    produce(broker.address, topic_name, sent, **{
        "compression.type": producer_codec, "enable.idempotence": idempotent})

    batches = stored_batches(broker.address, topic_name)
    assert len(batches) > 1
    assert {b.compression_type for b in batches} == {CODEC_IDS[topic_codec]}
    assert sum(b.records_count for b in batches) == N
    if idempotent:  # the producer's id, epoch and sequences survive the rebuild
        assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1
        assert batches[0].producer_id >= 0
        assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]
    else:
        assert {(b.producer_id, b.base_sequence) for b in batches} == {(-1, -1)}
    assert_both_clients_read(broker.address, topic_name, sent)


def test_log_append_time_is_applied_to_the_rebuilt_batch(
        broker: BrokerProcess, topic_name: str) -> None:
    create(broker.address, topic_name, **{"compression.type": "zstd",
                                          "message.timestamp.type": "LogAppendTime"})
    sent = messages()
    before = int(time.time() * 1000)
    produce(broker.address, topic_name, sent, **{"compression.type": "gzip"})
    after = int(time.time() * 1000)
    batches = stored_batches(broker.address, topic_name)
    assert {(b.compression_type, b.timestamp_type) for b in batches} == {(4, 1)}
    assert_both_clients_read(broker.address, topic_name, sent,
                             log_append_window=(before, after))


@pytest.mark.parametrize("configs", [{}, {"compression.type": "producer"}])
def test_producer_keeps_the_producers_codec(
        broker: BrokerProcess, topic_name: str, configs: dict[str, str]) -> None:
    create(broker.address, topic_name, **configs)
    sent = messages()
    produce(broker.address, topic_name, sent[:60], **{"compression.type": "lz4"})
    produce(broker.address, topic_name, sent[60:], **{"compression.type": "snappy"})
    codecs = [b.compression_type for b in stored_batches(broker.address, topic_name)]
    assert set(codecs[:1]) == {3} and set(codecs[-1:]) == {2} and set(codecs) == {2, 3}
    assert_both_clients_read(broker.address, topic_name, sent)


def raw_batch(codec: int, payload: bytes, records: int) -> bytes:
    """A RecordBatch v2 claiming `records` records and `codec`, carrying `payload` as its
    (compressed) records, with a correct CRC."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    for i in range(records):
        b.append(i, timestamp=T0, key=None, value=b"", headers=[])
    buf = b.build()
    del buf[61:]
    buf += payload
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">h", buf, 21, codec)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def raw_produce(address: str, topic: str, batch: bytes) -> Any:
    req_cls = ProduceRequest[8]
    t = req_cls.TopicProduceData
    resp = _call(address, req_cls(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        t(name=topic, partition_data=[t.PartitionProduceData(index=0, records=batch)])]),
        ProduceResponse)
    return resp.responses[0].partition_responses[0]


def test_undecodable_batch_is_refused_wherever_it_goes(
        broker: BrokerProcess, topic_name: str) -> None:
    """Records that do not decompress are refused whether the topic rebuilds batches or
    stores them as produced: Kafka's broker decompresses every batch it appends. `producer`
    used to store them unread, and every consumer stopped at them."""
    garbage = raw_batch(3, b"\x04\x22\x4d\x18 this is no lz4 frame", 2)
    recompressed, kept = topic_name + "-zstd", topic_name + "-producer"
    create(broker.address, recompressed, **{"compression.type": "zstd"})
    create(broker.address, kept)
    for topic in (recompressed, kept):
        answer = raw_produce(broker.address, topic, garbage)
        assert answer.error_code == CORRUPT_MESSAGE, (topic, answer)
        assert "cannot decode the lz4 records" in answer.error_message
        assert stored_batches(broker.address, topic) == []


INVALID_RECORD = 87


def _with_records(codec: int, records: bytes, count: int, last_delta: int | None = None) -> bytes:
    """A RecordBatch v2 of `count` records (header) whose records section is `records`,
    compressed with `codec` (3 = lz4), with a correct CRC: bytes intact, content a lie."""
    import lz4.frame

    payload = lz4.frame.compress(records) if codec == 3 else records
    buf = bytearray(raw_batch(codec, payload, count))
    struct.pack_into(">i", buf, 23, count - 1 if last_delta is None else last_delta)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def _records(deltas: list[int]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    for d in deltas:
        b.append(d, timestamp=T0, key=b"k", value=b"value %d" % d, headers=[("h", b"x")])
    return bytes(b.build()[61:])


@pytest.mark.parametrize("codec", [0, 3], ids=["uncompressed", "lz4"])
def test_records_that_are_not_what_the_header_says_are_invalid_record(
        broker: BrokerProcess, topic_name: str, codec: int) -> None:
    """A batch whose CRC holds but whose records are garbage, fewer or more than its count,
    or with offset deltas that are not 0..n-1 was stored on a `producer` topic: librdkafka
    consumers then stopped there, silently and for good. Kafka walks every record of every
    batch and answers INVALID_RECORD; so do we, storing nothing. A good batch is stored."""
    create(broker.address, topic_name)
    lies = {
        "garbage": _with_records(codec, b"\xde\xad\xbe\xef" * 10, 3),
        "count 1000 holding 3": _with_records(codec, _records([0, 1, 2]), 1000),
        "count 2 holding 3": _with_records(codec, _records([0, 1, 2]), 2),
        "offset deltas 7, 7, 7": _with_records(codec, _records([7, 7, 7]), 3),
    }
    for name, batch in lies.items():
        answer = raw_produce(broker.address, topic_name, batch)
        assert answer.error_code == INVALID_RECORD, (name, answer)
    assert stored_batches(broker.address, topic_name) == []
    good = _with_records(codec, _records([0, 1, 2]), 3)
    assert raw_produce(broker.address, topic_name, good).error_code == 0
    [stored] = stored_batches(broker.address, topic_name)
    assert [r.value for r in stored] == [b"value 0", b"value 1", b"value 2"]


def test_rebuilt_batch_over_max_message_bytes_is_too_large(
        broker: BrokerProcess, topic_name: str) -> None:
    create(broker.address, topic_name, **{"compression.type": "uncompressed",
                                          "max.message.bytes": "10000"})
    b = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    b.append(0, timestamp=T0, key=None, value=b"z" * 50_000, headers=[])
    gzipped = bytes(b.build())
    assert len(gzipped) < 10_000 and gzipped[22] & 0x07 == 1

    answer = raw_produce(broker.address, topic_name, gzipped)
    assert answer.error_code == MESSAGE_TOO_LARGE
    assert stored_batches(broker.address, topic_name) == []


DECODE_LIMIT = 1 << 20  # the small broker's max_decompressed_batch_bytes
BOMB = 16 << 20  # what each bomb expands to


@pytest.fixture
def small_decode_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker that decodes batches of at most DECODE_LIMIT bytes."""
    with running_broker(tmp_path / "data", f"max_decompressed_batch_bytes = {DECODE_LIMIT}") as proc:
        yield proc


def batch_of(sent: list[Message], codec: int) -> bytes:
    """`sent` as one RecordBatch in `codec`, as a producer would build it."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for delta, (key, value, headers, ts) in enumerate(sent):
        assert b.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = bytes(b.build())
    assert buf[22] & 0x07 == codec
    return buf


def decoding_to(size: int) -> list[Message]:
    """Log-like messages whose uncompressed batch is exactly `size` bytes."""
    line = b"INFO 2026-01-01T00:00:00Z request served path=/api/v1/items status=200 "
    sent: list[Message] = [(b"host-%d" % (i % 8), line * 10, [("n", b"%d" % i)], T0 + i)
                           for i in range(size // 800)]
    for _ in range(5):  # the last value's length varint may change size once
        missing = size - len(batch_of(sent, 0))
        if missing == 0:
            return sent
        key, value, headers, ts = sent[-1]
        sent[-1] = (key, (value or b"")[:len(value or b"") + missing].ljust(
            len(value or b"") + missing, b"."), headers, ts)
    raise AssertionError(f"cannot size a batch to {size} bytes")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_decompression_bomb_is_too_large_and_the_broker_carries_on(
        small_decode_broker: BrokerProcess, topic_name: str, codec: str) -> None:
    address = small_decode_broker.address
    topic_codec = "zstd" if codec != "zstd" else "gzip"
    create(address, topic_name, **{"compression.type": topic_codec})
    bomb = batch_of([(None, bytes(BOMB), [], T0)], CODEC_IDS[codec])
    assert len(bomb) < DECODE_LIMIT  # under max.message.bytes: only decoding can tell

    answer = raw_produce(address, topic_name, bomb)
    assert answer.error_code == MESSAGE_TOO_LARGE, answer
    assert f"decompresses to more than {DECODE_LIMIT} bytes" in answer.error_message
    assert stored_batches(address, topic_name) == []
    # still serving, the same connection-less way, and the next batch is stored
    small: list[Message] = [(b"k", b"after the bomb " * 20, [], T0)]  # compressible
    assert raw_produce(address, topic_name, batch_of(small, CODEC_IDS[codec])).error_code == 0
    [stored] = stored_batches(address, topic_name)
    assert (stored.compression_type, stored.base_offset) == (CODEC_IDS[topic_codec], 0)
    assert [r.value for r in stored] == [b"after the bomb " * 20]
    assert small_decode_broker.service is not None
    assert small_decode_broker.service.proc.poll() is None


@pytest.mark.parametrize(("codec", "topic_codec"), [("gzip", "zstd"), ("snappy", "uncompressed")])
def test_batch_decoding_to_exactly_the_limit_is_stored(
        small_decode_broker: BrokerProcess, topic_name: str, codec: str,
        topic_codec: str) -> None:
    address = small_decode_broker.address
    create(address, topic_name, **{"compression.type": topic_codec,
                                   "max.message.bytes": str(2 * DECODE_LIMIT)})
    sent = decoding_to(DECODE_LIMIT)
    batch = batch_of(sent, CODEC_IDS[codec])
    assert len(batch) * 10 < DECODE_LIMIT  # highly compressible, as logs are

    one_more = decoding_to(DECODE_LIMIT + 1)
    answer = raw_produce(address, topic_name, batch_of(one_more, CODEC_IDS[codec]))
    assert answer.error_code == MESSAGE_TOO_LARGE, answer
    assert raw_produce(address, topic_name, batch).error_code == 0
    [stored] = stored_batches(address, topic_name)
    assert stored.compression_type == CODEC_IDS[topic_codec]
    assert_both_clients_read(address, topic_name, sent)
